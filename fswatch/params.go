package fswatch

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/internal/serde"
	"github.com/execgo/exec-server/protocol"
)

// DecodeMissingParams decodes fs/watchMissing params with the reference's
// error texts (serde's wording: "invalid type: string \"x\", expected
// u64"), which the generic decoder does not reproduce.
func DecodeMissingParams(raw []byte) (MissingParams, error) {
	var p MissingParams
	m, err := object(raw, "WatchMissingParams")
	if err != nil {
		return p, err
	}
	id, ok := m["watchId"]
	if ok {
		if p.WatchID, err = decodeU64(id); err != nil {
			return p, err
		}
	}
	missing, okMissing := m["missing"]
	if okMissing {
		list, err := decodeStrings(missing)
		if err != nil {
			return p, err
		}
		for _, s := range list {
			path, err := fileuri.Parse(s)
			if err != nil {
				return p, err
			}
			p.Missing = append(p.Missing, path)
		}
	}
	if present, ok := m["present"]; ok && !isNull(present) {
		s, err := decodeString(present)
		if err != nil {
			return p, err
		}
		if p.Present, err = fileuri.Parse(s); err != nil {
			return p, err
		}
	}
	if !ok {
		return p, protocol.InvalidParams("missing field `watchId`")
	}
	if !okMissing {
		return p, protocol.InvalidParams("missing field `missing`")
	}
	return p, nil
}

// object splits a params object into its members.
func object(raw []byte, typeName string) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isNull(raw) {
		return nil, protocol.InvalidParams("invalid type: null, expected struct %s", typeName)
	}
	if raw[0] != '{' {
		return nil, protocol.InvalidParams("invalid type: %s, expected struct %s", serdeKind(raw), typeName)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, protocol.InvalidParams("%s", err.Error())
	}
	return m, nil
}

func isNull(v []byte) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// serdeKind words an unexpected JSON value as serde does.
func serdeKind(v []byte) string { return serde.Unexpected(bytes.TrimSpace(v)) }

func decodeU64(v []byte) (uint64, error) {
	v = bytes.TrimSpace(v)
	if len(v) > 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) && !bytes.ContainsAny(v, ".eE") {
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			return n, nil
		}
		return 0, protocol.InvalidParams("invalid value: integer `%s`, expected u64", v)
	}
	return 0, protocol.InvalidParams("invalid type: %s, expected u64", serdeKind(v))
}

func decodeString(v []byte) (string, error) {
	var s string
	if v = bytes.TrimSpace(v); len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", protocol.InvalidParams("invalid type: %s, expected a string", serdeKind(v))
	}
	return s, nil
}

func decodeStrings(v []byte) ([]string, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || v[0] != '[' {
		return nil, protocol.InvalidParams("invalid type: %s, expected a sequence", serdeKind(v))
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, protocol.InvalidParams("%s", err.Error())
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, err := decodeString(it)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// MaxWatchIDBytes bounds a watch id: it is echoed in every fs/changed.
const MaxWatchIDBytes = 256

// DecodeWatchParams decodes fs/watch params, with the path parsed.
func DecodeWatchParams(raw []byte) (protocol.FsWatchParams, error) {
	var p protocol.FsWatchParams
	if err := jsonscan.DecodeParams(raw, &p, "WatchParams", "watchId", "path"); err != nil {
		return p, err
	}
	if err := checkWatchID(p.WatchID); err != nil {
		return p, err
	}
	path, err := fileuri.Parse(p.Path)
	if err != nil {
		return p, err
	}
	p.Path = path
	return p, nil
}

// DecodeUnwatchParams decodes fs/unwatch params.
func DecodeUnwatchParams(raw []byte) (protocol.FsUnwatchParams, error) {
	var p protocol.FsUnwatchParams
	if err := jsonscan.DecodeParams(raw, &p, "UnwatchParams", "watchId"); err != nil {
		return p, err
	}
	return p, checkWatchID(p.WatchID)
}

func checkWatchID(id string) error {
	if id == "" {
		return protocol.InvalidParams("watchId must not be empty")
	}
	if len(id) > MaxWatchIDBytes {
		return protocol.InvalidParams("watchId is %d bytes long (limit %d)", len(id), MaxWatchIDBytes)
	}
	return nil
}

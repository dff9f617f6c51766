package client

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/execgo/exec-server/internal/jsonscan"
)

// Fast paths for the messages that carry bulk data (process/output pushes,
// fs/readBlock and fs/readFile results). encoding/json scans a message
// once to validate it, again to skip a json.RawMessage and a third time to
// unquote a base64 string before decoding it; for megabyte payloads that
// made the client's read loop the bottleneck of a transfer. These helpers
// find the top-level fields with one scan and decode base64 in place.
// Anything unexpected (escapes in a string, a malformed object) falls back
// to encoding/json, which then reports the error.

var errSlow = errors.New("not on the fast path")

// plainString returns the contents of a JSON string without escapes, in
// valid UTF-8 (encoding/json would replace invalid bytes).
func plainString(val []byte) (string, bool) {
	b, ok := plainBytes(val)
	if !ok || !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

func plainBytes(val []byte) ([]byte, bool) {
	if len(val) < 2 || val[0] != '"' || val[len(val)-1] != '"' {
		return nil, false
	}
	inner := val[1 : len(val)-1]
	if bytes.IndexByte(inner, '\\') >= 0 {
		return nil, false
	}
	return inner, true
}

// base64Field decodes a JSON string of standard base64; null is nil.
func base64Field(val []byte) ([]byte, bool) {
	if string(val) == "null" {
		return nil, true
	}
	inner, ok := plainBytes(val)
	if !ok {
		return nil, false
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(inner)))
	n, err := base64.StdEncoding.Decode(out, inner)
	if err != nil {
		return nil, false
	}
	return out[:n], true
}

// decodeEvent decodes process/output, process/exited and process/closed
// params.
func decodeEvent(raw []byte, ev *event) error {
	err := jsonscan.EachMember(raw, func(key, val []byte) error {
		var ok bool
		switch string(key) {
		case "processId":
			ev.ProcessID, ok = plainString(val)
		case "seq":
			ev.Seq, ok = parseUint(val)
		case "stream":
			ev.Stream, ok = plainString(val)
		case "chunk":
			ev.Chunk, ok = base64Field(val)
		case "exitCode":
			var n int64
			n, ok = parseInt(val)
			ev.ExitCode = int(n)
		case "sandboxDenied":
			switch string(val) {
			case "true", "false":
				b := string(val) == "true"
				ev.SandboxDenied, ok = &b, true
			case "null":
				ev.SandboxDenied, ok = nil, true
			}
		case "timedOut":
			// An extension of this project's server, present when true.
			switch string(val) {
			case "true", "false":
				ev.TimedOut, ok = string(val) == "true", true
			}
		default:
			ok = !mayMatch(key, eventFields)
		}
		if !ok {
			return errSlow
		}
		return nil
	})
	if err != nil {
		*ev = event{kind: ev.kind}
		return json.Unmarshal(raw, ev)
	}
	return nil
}

var eventFields = []string{"processId", "seq", "stream", "chunk", "exitCode", "sandboxDenied", "timedOut"}

// mayMatch reports whether an unrecognised key might still name one of
// fields for encoding/json, which matches keys case-insensitively and
// after unescaping: such a message takes the slow path.
func mayMatch(key []byte, fields []string) bool {
	if bytes.IndexByte(key, '\\') >= 0 {
		return true
	}
	for _, f := range fields {
		if bytes.EqualFold(key, []byte(f)) {
			return true
		}
	}
	return false
}

func parseUint(val []byte) (uint64, bool) {
	n, err := strconv.ParseUint(string(val), 10, 64)
	return n, err == nil
}

func parseInt(val []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(val), 10, 64)
	return n, err == nil
}

// rawDecoder is implemented by results with a fast decoding.
type rawDecoder interface {
	decodeRaw(raw []byte) error
}

// readBlockResult is protocol.FsReadBlockResult with a fast decoding.
type readBlockResult struct {
	Chunk []byte `json:"chunk"`
	EOF   bool   `json:"eof"`
}

func (r *readBlockResult) decodeRaw(raw []byte) error {
	err := jsonscan.EachMember(raw, func(key, val []byte) error {
		ok := true
		switch string(key) {
		case "chunk":
			r.Chunk, ok = base64Field(val)
		case "eof":
			switch string(val) {
			case "true":
				r.EOF = true
			case "false":
				r.EOF = false
			default:
				ok = false
			}
		default:
			ok = !mayMatch(key, []string{"chunk", "eof"})
		}
		if !ok {
			return errSlow
		}
		return nil
	})
	if err != nil {
		*r = readBlockResult{}
		type plain readBlockResult
		return json.Unmarshal(raw, (*plain)(r))
	}
	return nil
}

// readFileResult is protocol.FsReadFileResult with a fast decoding.
type readFileResult struct {
	DataBase64 []byte `json:"dataBase64"`
}

func (r *readFileResult) decodeRaw(raw []byte) error {
	err := jsonscan.EachMember(raw, func(key, val []byte) error {
		if string(key) == "dataBase64" {
			var ok bool
			if r.DataBase64, ok = base64Field(val); !ok {
				return errSlow
			}
		} else if mayMatch(key, []string{"dataBase64"}) {
			return errSlow
		}
		return nil
	})
	if err != nil {
		*r = readFileResult{}
		type plain readFileResult
		return json.Unmarshal(raw, (*plain)(r))
	}
	return nil
}

// Package sandbox parses the protocol's sandbox parameter. Enforcement by the
// kernel is not built yet, so a policy that restricts anything is refused:
// a request is never run with less confinement than it asked for.
package sandbox

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/execgo/exec-server/protocol"
)

// Policy is the sandbox parameter of fs methods and process/start: the
// parts this server looks at (other members are accepted and ignored, as
// the reference ignores unknown ones).
type Policy struct {
	Permissions         Permissions
	WindowsSandboxLevel string
}

// Permissions is the tagged permission profile.
type Permissions struct {
	Type           string // disabled | external | managed
	Network        string // restricted | enabled (external and managed)
	FileSystemType string // unrestricted | restricted (managed)
}

// Parse validates raw (absent or null means no sandbox and returns nil).
// Errors are -32602 with the reference's (serde's) texts: members are
// checked in the order they come, and a missing member is reported after
// every present one has been checked.
func Parse(raw json.RawMessage) (*Policy, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	const ctx = "struct WireFileSystemSandboxContext"
	if raw[0] != '{' {
		if bytes.Equal(raw, []byte("[]")) {
			return nil, invalid("invalid length 0, expected %s with 10 elements", ctx)
		}
		return nil, invalid("invalid type: %s, expected %s", unexpected(raw), ctx)
	}
	var p Policy
	var seenPerm, seenLevel bool
	err := members(raw, func(key string, val []byte) error {
		switch key {
		case "permissions":
			if seenPerm {
				return invalid("duplicate field `permissions`")
			}
			seenPerm = true
			perm, err := parsePermissions(val)
			p.Permissions = perm
			return err
		case "windowsSandboxLevel":
			if seenLevel {
				return invalid("duplicate field `windowsSandboxLevel`")
			}
			seenLevel = true
			if isNumber(val) {
				// Buffered by the reference before it is read: serde
				// then says "number", not the number itself.
				return invalid("invalid type: number, expected string or map")
			}
			level, err := variant(val, "string or map", "one of `disabled`, `restricted-token`, `elevated`, `mxc`", "disabled", "restricted-token", "elevated", "mxc")
			p.WindowsSandboxLevel = level
			return err
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case !seenPerm:
		return nil, invalid("missing field `permissions`")
	case !seenLevel:
		return nil, invalid("missing field `windowsSandboxLevel`")
	}
	return &p, nil
}

// parsePermissions checks an internally tagged ExecPermissionProfile.
func parsePermissions(raw []byte) (Permissions, error) {
	var perm Permissions
	if raw[0] != '{' {
		return perm, invalid("invalid type: %s, expected internally tagged enum ExecPermissionProfile", unexpected(raw))
	}
	tag, err := tagOf(raw, "one of `managed`, `disabled`, `external`", "managed", "disabled", "external")
	if err != nil {
		return perm, err
	}
	perm.Type = tag
	if tag == "disabled" {
		return perm, nil
	}
	var seenNet, seenFS bool
	err = members(raw, func(key string, val []byte) error {
		switch {
		case key == "network":
			if seenNet {
				return invalid("duplicate field `network`")
			}
			seenNet = true
			v, err := variant(val, "string or map", "`restricted` or `enabled`", "restricted", "enabled")
			perm.Network = v
			return err
		case key == "file_system" && tag == "managed":
			if seenFS {
				return invalid("duplicate field `file_system`")
			}
			seenFS = true
			if val[0] != '{' {
				return invalid("invalid type: %s, expected internally tagged enum ExecManagedFileSystemPermissions", unexpected(val))
			}
			v, err := tagOf(val, "`restricted` or `unrestricted`", "restricted", "unrestricted")
			perm.FileSystemType = v
			return err
		}
		return nil
	})
	switch {
	case err != nil:
		return perm, err
	case tag == "managed" && !seenFS:
		return perm, invalid("missing field `file_system`")
	case !seenNet:
		return perm, invalid("missing field `network`")
	}
	return perm, nil
}

// tagOf reads the "type" tag of an internally tagged enum.
func tagOf(obj []byte, expected string, variants ...string) (string, error) {
	var tag []byte
	err := members(obj, func(key string, val []byte) error {
		if key == "type" && tag == nil {
			tag = val
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if tag == nil {
		return "", invalid("missing field `type`")
	}
	if tag[0] != '"' {
		return "", invalid("invalid type: %s, expected variant identifier", numberAsIs(tag))
	}
	return variant(tag, "variant identifier", expected, variants...)
}

// variant decodes a unit enum variant written as a JSON string.
func variant(raw []byte, wantType, expected string, variants ...string) (string, error) {
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", invalid("invalid type: %s, expected %s", unexpected(raw), wantType)
	}
	for _, v := range variants {
		if s == v {
			return s, nil
		}
	}
	return "", invalid("unknown variant `%s`, expected %s", s, expected)
}

// members walks an object's members in order, with keys decoded.
func members(obj []byte, f func(key string, val []byte) error) error {
	err := protocol.EachMember(obj, func(k, v []byte) error {
		key := string(k) // as written, without its quotes
		if bytes.IndexByte(k, '\\') >= 0 && json.Unmarshal([]byte(`"`+key+`"`), &key) != nil {
			return invalid("invalid object key `%s`", k)
		}
		return f(key, v)
	})
	if err != nil {
		if pe, ok := err.(*protocol.Error); ok {
			return pe
		}
		return invalid("invalid sandbox: %v", err)
	}
	return nil
}

// numberAsIs is unexpected, except that a number is only "number" (a
// value the reference buffered before reading it).
func numberAsIs(v []byte) string {
	if isNumber(v) {
		return "number"
	}
	return unexpected(v)
}

func isNumber(v []byte) bool { return v[0] == '-' || (v[0] >= '0' && v[0] <= '9') }

// unexpected describes a JSON value as serde_json's Unexpected does.
func unexpected(v []byte) string {
	switch v[0] {
	case '"':
		var s string
		_ = json.Unmarshal(v, &s)
		return "string " + strconv.Quote(s)
	case '{':
		return "map"
	case '[':
		return "sequence"
	case 't', 'f':
		return "boolean `" + string(v) + "`"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(v, ".eE") {
		return "floating point `" + string(v) + "`"
	}
	return "integer `" + string(v) + "`"
}

func invalid(format string, args ...any) *protocol.Error {
	return protocol.InvalidParams(format, args...)
}

// Restrictive reports whether the policy limits anything.
func (p *Policy) Restrictive() bool {
	if p == nil || p.Permissions.Type != "managed" {
		return false
	}
	return p.Permissions.Network == "restricted" || p.Permissions.FileSystemType == "restricted"
}

// Check parses raw and refuses any policy this server cannot enforce.
func Check(raw json.RawMessage) error {
	p, err := Parse(raw)
	if err != nil {
		return err
	}
	if p.Restrictive() {
		return protocol.Internal("sandbox not available: this server cannot enforce a restrictive sandbox policy")
	}
	return nil
}

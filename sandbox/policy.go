// Package sandbox parses the protocol's sandbox parameter. Enforcement by the
// kernel is not built yet, so a policy that restricts anything is refused:
// a request is never run with less confinement than it asked for.
package sandbox

import (
	"bytes"
	"encoding/json"

	"github.com/execgo/exec-server/protocol"
)

// Policy is the sandbox parameter of fs methods and process/start.
type Policy struct {
	Permissions         *Permissions `json:"permissions"`
	WindowsSandboxLevel *string      `json:"windowsSandboxLevel"`
}

// Permissions is the tagged permission profile.
type Permissions struct {
	Type       string      `json:"type"` // disabled | external | managed
	Network    string      `json:"network,omitempty"`
	FileSystem *FileSystem `json:"file_system,omitempty"`
}

// FileSystem is the managed file-system policy.
type FileSystem struct {
	Type    string            `json:"type"` // unrestricted | restricted
	Entries []json.RawMessage `json:"entries,omitempty"`
}

// Parse validates raw (absent or null means no sandbox and returns nil).
func Parse(raw json.RawMessage) (*Policy, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var p Policy
	if err := protocol.DecodeParams(raw, &p, "SandboxPolicy", "permissions", "windowsSandboxLevel"); err != nil {
		e := protocol.ToError(err)
		e.Message = "invalid sandbox: " + e.Message
		return nil, e
	}
	switch *p.WindowsSandboxLevel {
	case "disabled", "restricted-token", "elevated", "mxc":
	default:
		return nil, protocol.InvalidParams("invalid sandbox: unknown windowsSandboxLevel `%s`", *p.WindowsSandboxLevel)
	}
	switch p.Permissions.Type {
	case "disabled", "external":
	case "managed":
		switch p.Permissions.Network {
		case "restricted", "enabled":
		default:
			return nil, protocol.InvalidParams("invalid sandbox: unknown network `%s`, expected `restricted` or `enabled`", p.Permissions.Network)
		}
		if p.Permissions.FileSystem == nil {
			return nil, protocol.InvalidParams("invalid sandbox: missing field `file_system`")
		}
		switch p.Permissions.FileSystem.Type {
		case "unrestricted", "restricted":
		default:
			return nil, protocol.InvalidParams("invalid sandbox: unknown file_system type `%s`", p.Permissions.FileSystem.Type)
		}
	default:
		return nil, protocol.InvalidParams("invalid sandbox: unknown permissions type `%s`", p.Permissions.Type)
	}
	return &p, nil
}

// Restrictive reports whether the policy limits anything.
func (p *Policy) Restrictive() bool {
	if p == nil || p.Permissions.Type != "managed" {
		return false
	}
	return p.Permissions.Network == "restricted" || p.Permissions.FileSystem.Type == "restricted"
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

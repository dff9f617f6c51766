package sandbox

import (
	"errors"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// TestParseMatchesReference: each text is what the reference (codex
// exec-server 0.169.0) answered for the same sandbox parameter of
// fs/getMetadata.
func TestParseMatchesReference(t *testing.T) {
	const ok = ""
	for _, c := range []struct{ in, want string }{
		{`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`, ok},
		{`{"permissions":{"type":"external","network":"enabled"},"windowsSandboxLevel":"elevated","bogusField":1}`, ok},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"mxc"}`, ok},
		{`{"windowsSandboxLevel":"disabled"}`, "missing field `permissions`"},
		{`{"permissions":{"type":"disabled"}}`, "missing field `windowsSandboxLevel`"},
		{`{"permissions":{"type":"bogus"},"windowsSandboxLevel":"disabled"}`, "unknown variant `bogus`, expected one of `managed`, `disabled`, `external`"},
		{`{"permissions":{"type":"read-only"},"windowsSandboxLevel":"disabled"}`, "unknown variant `read-only`, expected one of `managed`, `disabled`, `external`"},
		{`{"permissions":{},"windowsSandboxLevel":"disabled"}`, "missing field `type`"},
		{`{"permissions":{"Type":"disabled"},"windowsSandboxLevel":"disabled"}`, "missing field `type`"},
		{`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"zz"}`, "unknown variant `zz`, expected one of `disabled`, `restricted-token`, `elevated`, `mxc`"},
		{`{"permissions":{"type":"external"},"windowsSandboxLevel":"disabled"}`, "missing field `network`"},
		{`{"permissions":{"type":"external","network":"zz"},"windowsSandboxLevel":"disabled"}`, "unknown variant `zz`, expected `restricted` or `enabled`"},
		{`{"permissions":{"type":"managed","network":"enabled"},"windowsSandboxLevel":"disabled"}`, "missing field `file_system`"},
		{`{"permissions":{"type":"managed","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}`, "missing field `network`"},
		{`{"permissions":{"type":"managed"},"windowsSandboxLevel":"disabled"}`, "missing field `file_system`"},
		{`{"permissions":{"type":"managed","network":"zz"},"windowsSandboxLevel":"disabled"}`, "unknown variant `zz`, expected `restricted` or `enabled`"},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"zz"}},"windowsSandboxLevel":"disabled"}`, "unknown variant `zz`, expected `restricted` or `unrestricted`"},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":{}},"windowsSandboxLevel":"disabled"}`, "missing field `type`"},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":3},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected internally tagged enum ExecManagedFileSystemPermissions"},
		{`{"permissions":{"type":"bogus"},"windowsSandboxLevel":"zz"}`, "unknown variant `bogus`, expected one of `managed`, `disabled`, `external`"},
		{`{"windowsSandboxLevel":"zz","permissions":{"type":"bogus"}}`, "unknown variant `zz`, expected one of `disabled`, `restricted-token`, `elevated`, `mxc`"},
		{`{"permissions":{"type":true},"windowsSandboxLevel":"disabled"}`, "invalid type: boolean `true`, expected variant identifier"},
		{`{"permissions":{"type":null},"windowsSandboxLevel":"disabled"}`, "invalid type: null, expected variant identifier"},
		{`{"permissions":3,"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected internally tagged enum ExecPermissionProfile"},
		{`{"permissions":null,"windowsSandboxLevel":"disabled"}`, "invalid type: null, expected internally tagged enum ExecPermissionProfile"},
		{`{"permissions":"x","windowsSandboxLevel":"disabled"}`, `invalid type: string "x", expected internally tagged enum ExecPermissionProfile`},
		{`{"permissions":{"type":"external","network":3},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected string or map"},
		{`{"permissions":{"type":3},"windowsSandboxLevel":"disabled"}`, "invalid type: number, expected variant identifier"},
		{`{"permissions":{"type":"disabled"},"windowsSandboxLevel":3}`, "invalid type: number, expected string or map"},
		{`"x"`, `invalid type: string "x", expected struct WireFileSystemSandboxContext`},
		{`[]`, "invalid length 0, expected struct WireFileSystemSandboxContext with 10 elements"},
	} {
		_, err := Parse([]byte(c.in))
		var pe *protocol.Error
		switch {
		case c.want == ok && err != nil:
			t.Errorf("%s: %v, want accepted", c.in, err)
		case c.want == ok:
		case !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams || pe.Message != c.want:
			t.Errorf("%s:\n got %v\nwant -32602 %s", c.in, err, c.want)
		}
	}
}

func TestCheckRefusesRestrictivePolicies(t *testing.T) {
	for _, c := range []struct {
		in      string
		refused bool
	}{
		{`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`, false},
		{`{"permissions":{"type":"external","network":"restricted"},"windowsSandboxLevel":"disabled"}`, false},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}`, false},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}`, true},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"restricted","entries":[]}},"windowsSandboxLevel":"disabled"}`, true},
	} {
		err := Check([]byte(c.in))
		var pe *protocol.Error
		refused := errors.As(err, &pe) && pe.Code == protocol.CodeInternal
		if refused != c.refused || (!c.refused && err != nil) {
			t.Errorf("%s: Check = %v, want refused=%v", c.in, err, c.refused)
		}
	}
}

package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// FuzzParse checks the sandbox policy parser against hostile JSON: it never
// panics; a refusal is a -32602 error (-32600 for a foreign file: URI); an
// accepted policy is nil only for an absent or null parameter; and Check
// refuses exactly the restrictive policies, so a request never runs with
// less confinement than it asked for.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `5`, `"x"`,
		`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`,
		`{"permissions":{"type":"external"},"windowsSandboxLevel":"elevated"}`,
		`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}`,
		`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}`,
		`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"restricted","entries":[{"path":"/tmp","access":"write"}]}},"windowsSandboxLevel":"mxc"}`,
		`{"permissions":{"type":"managed","network":"enabled"},"windowsSandboxLevel":"disabled"}`,
		`{"permissions":{"type":"managed","network":"enabled","file_system":null},"windowsSandboxLevel":"disabled"}`,
		`{"permissions":null,"windowsSandboxLevel":"disabled"}`,
		`{"permissions":{"type":"disabled"},"windowsSandboxLevel":null}`,
		`{"permissions":{"type":"bogus"},"windowsSandboxLevel":"disabled"}`,
		`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"restricted-token","extra":[1,2]}`,
		`{"permissions":"disabled","windowsSandboxLevel":"disabled"}`,
		`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},{"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read","missing_path_behavior":"skip"},{"path":{"type":"glob_pattern","pattern":"**/*.env"},"access":"deny"},{"path":{"type":"path","path":"file:///w/x"},"access":"none"}],"glob_scan_max_depth":3},"network":"restricted"},"cwd":"file:///w","workspaceRoots":["file:///w"],"policyContext":{"cwd":"file:///w","workspaceRoots":["file:///w"]},"userHomeDir":"file:///root","temporaryDirectories":["file:///t"],"windowsSandboxLevel":"disabled","windowsSandboxProxySettingsMode":"reconcile","useLegacyLandlock":false}`,
		`{"permissions":{"type":"managed","file_system":{"type":1,"entries":[{"path":{"type":2,"value":{"kind":5,"path":"x"}},"access":"none"}]},"network":"enabled"},"windowsSandboxLevel":"mxc","cwd":"file://other/x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := Parse(raw)
		absent := len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || (pe.Code != protocol.CodeInvalidParams && pe.Code != protocol.CodeInvalidRequest) || pe.Message == "" {
				t.Fatalf("Parse(%q): error %T %v is not an -32602 or -32600 with a message", raw, err, err)
			}
			return
		}
		if (p == nil) != absent {
			t.Fatalf("Parse(%q) = %v: nil policy must mean an absent parameter", raw, p)
		}
		if p != nil && !json.Valid(raw) {
			t.Fatalf("Parse(%q): invalid JSON accepted", raw)
		}
		if p != nil && p.Permissions.Type == "managed" && p.Permissions.FileSystemType == "" {
			t.Fatalf("Parse(%q): managed policy without file_system accepted", raw)
		}
		if p != nil && p.Permissions.Type != "disabled" && p.Permissions.Network == "" {
			t.Fatalf("Parse(%q): %s policy without network accepted", raw, p.Permissions.Type)
		}
		if p != nil {
			if _, err := json.Marshal(p); err != nil {
				t.Fatalf("accepted policy cannot be re-encoded: %v", err)
			}
		}
	})
}

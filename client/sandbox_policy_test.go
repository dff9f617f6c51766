package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The policies are the objects codex 0.169 sends (recorded from codex exec
// against a server; internal/test/interop/codex_test.go drives it), compared
// as JSON values.
func TestSandboxPolicyShapes(t *testing.T) {
	const roRoot = `{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}`
	wsEntries := roRoot + `,
	   {"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"},
	   {"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},
	   {"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"},
	   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read","missing_path_behavior":"skip"},
	   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".agents"}},"access":"read","missing_path_behavior":"skip"},
	   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".codex"}},"access":"read","missing_path_behavior":"skip"},
	   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".aws"}},"access":"read","missing_path_behavior":"skip"}`
	cases := []struct {
		name   string
		s      Sandbox
		fsCall bool
		want   string
	}{
		{"read-only start", Sandbox{Mode: SandboxReadOnly}, false,
			`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` + roRoot + `]},"network":"restricted"},
			 "cwd":"file:///WORK","workspaceRoots":["file:///WORK"],"windowsSandboxLevel":"disabled",
			 "windowsSandboxProxySettingsMode":"reconcile","useLegacyLandlock":false}`},
		{"workspace-write start", Sandbox{Mode: SandboxWorkspaceWrite}, false,
			`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` + wsEntries + `]},"network":"restricted"},
			 "cwd":"file:///WORK","workspaceRoots":["file:///WORK"],"windowsSandboxLevel":"disabled",
			 "windowsSandboxProxySettingsMode":"reconcile","useLegacyLandlock":false}`},
		{"workspace-write, --add-dir and network", Sandbox{Mode: SandboxWorkspaceWrite, WritableRoots: []string{"/data"}, Network: true}, false,
			`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` + wsEntries + `]},"network":"enabled"},
			 "cwd":"file:///WORK","workspaceRoots":["file:///WORK","file:///data"],"windowsSandboxLevel":"disabled",
			 "windowsSandboxProxySettingsMode":"reconcile","useLegacyLandlock":false}`},
		{"workspace-write fs call", Sandbox{Mode: SandboxWorkspaceWrite}, true,
			`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` + wsEntries + `]},"network":"restricted"},
			 "cwd":"file:///WORK","policyContext":{"cwd":"file:///WORK","workspaceRoots":["file:///WORK"]},
			 "workspaceRoots":["file:///WORK"],"userHomeDir":"file:///root","windowsSandboxLevel":"disabled","useLegacyLandlock":false}`},
	}
	for _, tc := range cases {
		raw, err := tc.s.policy("file:///WORK", "file:///root", tc.fsCall)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got, want any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, raw, tc.want)
		}
	}
	for _, bad := range []Sandbox{{Mode: "full"}, {Mode: SandboxReadOnly, WritableRoots: []string{"/x"}}, {Mode: SandboxWorkspaceWrite, WritableRoots: []string{"rel"}}} {
		if _, err := bad.policy("file:///WORK", "", false); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

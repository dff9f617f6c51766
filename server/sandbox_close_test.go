package server

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/sandbox"
	"github.com/execgo/exec-server/sandbox/policy"
)

// workspaceWriteSandbox is codex's workspace-write policy for ws, without
// /tmp (shared with every other test process).
func workspaceWriteSandbox(ws string) map[string]any {
	special := func(kind string) map[string]any {
		return map[string]any{"type": "special", "value": map[string]any{"kind": kind}}
	}
	entries := []any{
		map[string]any{"path": special("root"), "access": "read"},
		map[string]any{"path": special("project_roots"), "access": "write"},
	}
	for _, sub := range policy.ProtectedNames {
		entries = append(entries, map[string]any{
			"path":                  map[string]any{"type": "special", "value": map[string]any{"kind": "project_roots", "subpath": sub}},
			"access":                "read",
			"missing_path_behavior": "skip",
		})
	}
	return map[string]any{
		"permissions":         map[string]any{"type": "managed", "file_system": map[string]any{"type": "restricted", "entries": entries}, "network": "restricted"},
		"cwd":                 fileuri.FromPath(ws),
		"workspaceRoots":      []string{fileuri.FromPath(ws)},
		"windowsSandboxLevel": "disabled",
	}
}

// Server.Close leaves nothing of its sandboxes on the host: the mount
// points of the workspace's missing protected paths, which a warm fs
// helper (after fs/writeFile) and a running sandboxed command hold, are
// gone when Close returns (before the fix the idle helper kept them, and a
// process ending right after Close left them for good).
func TestCloseLeavesNoMountPoints(t *testing.T) {
	if !sandbox.Probe().Available {
		t.Skip("no kernel sandbox here")
	}
	for _, withCommand := range []bool{false, true} {
		name := "fs"
		if withCommand {
			name = "fs+command"
		}
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			s := New(Config{})
			p := stdioPeer(t, s)
			p.init()
			sbx := workspaceWriteSandbox(ws)
			p.call("fs/writeFile", map[string]any{"path": fileuri.FromPath(filepath.Join(ws, "f")), "dataBase64": base64.StdEncoding.EncodeToString(make([]byte, 4096)), "sandbox": sbx})
			if withCommand {
				params := startParams(t, "sleeper", false, "sleep", "100")
				params["cwd"] = fileuri.FromPath(ws)
				params["sandbox"] = sbx
				p.call("process/start", params)
			}
			held := 0
			for _, n := range policy.ProtectedNames {
				if _, err := os.Lstat(filepath.Join(ws, n)); err == nil {
					held++
				}
			}
			t.Logf("%d mount points held before Close", held)
			s.Close()
			for _, n := range policy.ProtectedNames {
				if _, err := os.Lstat(filepath.Join(ws, n)); err == nil {
					t.Errorf("LEFTOVER: %s is on the host after Server.Close", n)
				}
			}
			p.stop()
		})
	}
}

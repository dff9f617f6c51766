package process

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The two Linux root-write capabilities (linuxRootWritePreservesDevices,
// linuxApprovedRootWritePreservesRestrictions) promise behaviours of
// policies whose root is writable; these tests pin them, so that the
// flags stay true only while they hold. Our view attaches a fresh /dev
// after the binds (sandbox/view_linux.go), so the bubblewrap ordering bug
// behind the first flag (openai/codex#16451: /dev/null unusable under
// `--bind / /`) does not apply.

// rootWritePolicy is a root-write policy with extra entries (JSON) for ws.
func rootWritePolicy(ws string, extra ...string) string {
	entries := append([]string{`{"path":{"type":"special","value":{"kind":"root"}},"access":"write"}`}, extra...)
	return `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` + strings.Join(entries, ",") +
		`]},"network":"restricted"},"cwd":"WORK","workspaceRoots":["WORK"],"windowsSandboxLevel":"disabled","useLegacyLandlock":false}`
}

func pathEntry(p, access string) string {
	return `{"path":{"type":"path","path":"` + fileURI(p) + `"},"access":"` + access + `"}`
}

// TestRootWritePreservesDevices: `/` writable plus a deny entry keeps the
// standard devices usable and the deny enforced, and writes outside the
// workspace allowed (the measurement behind linuxRootWritePreservesDevices).
func TestRootWritePreservesDevices(t *testing.T) {
	needSandbox(t)
	m, sink := newTestManager(t, Options{})
	ws := workspace(t)
	base := filepath.Dir(ws)
	if err := os.WriteFile(filepath.Join(ws, "denied.txt"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := sandboxParams(t, "dev", rootWritePolicy(ws, pathEntry(filepath.Join(ws, "denied.txt"), "deny")), ws, "/bin/sh", "-c", `
echo x > /dev/null && echo null-ok
head -c 3 /dev/zero | od -An -tx1 | tr -d ' \n'; echo
head -c 4 /dev/urandom | wc -c | tr -d ' '
cat denied.txt 2>/dev/null || echo deny-ok
echo out > ../outside.txt && echo outside-ok
`)
	startSandboxed(t, m, p)
	out := output(sink.waitClosed(t, "dev"), "")
	for _, want := range []string{"null-ok\n", "000000\n", "4\n", "deny-ok\n", "outside-ok\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q: %q", want, out)
		}
	}
	if strings.Contains(out, "secret") {
		t.Errorf("the denied file was read: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(base, "outside.txt")); err != nil || string(b) != "out\n" {
		t.Errorf("write outside the workspace: %q %v", b, err)
	}
}

// TestApprovedRootWritePreservesRestrictions: a root-write policy (what an
// approved escalation gets) that keeps a read-only `.git` which is a
// symlink to a directory outside the workspace, and a deny entry: the
// symlink and its target stay read-only, the deny holds, the devices
// work, and the rest is writable (the measurement behind
// linuxApprovedRootWritePreservesRestrictions; the reference refuses this
// policy: "cannot enforce sandbox read-only path … crosses writable
// symlink").
func TestApprovedRootWritePreservesRestrictions(t *testing.T) {
	needSandbox(t)
	m, sink := newTestManager(t, Options{})
	ws := workspace(t)
	base := filepath.Dir(ws)
	gitdir := filepath.Join(base, "gitdir")
	if err := os.Mkdir(gitdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(gitdir, filepath.Join(ws, ".git")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "denied.txt"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	git := `{"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read"}`
	p := sandboxParams(t, "approved", rootWritePolicy(ws, git, pathEntry(filepath.Join(ws, "denied.txt"), "deny")), ws, "/bin/sh", "-c", `
touch .git/in-git 2>/dev/null && echo git-writable || echo git-ro
touch ../gitdir/in-target 2>/dev/null && echo target-writable || echo target-ro
cat denied.txt 2>/dev/null || echo deny-ok
echo x > /dev/null && echo null-ok
echo w > written.txt && echo ws-ok
`)
	startSandboxed(t, m, p)
	out := output(sink.waitClosed(t, "approved"), "")
	for _, want := range []string{"git-ro\n", "target-ro\n", "deny-ok\n", "null-ok\n", "ws-ok\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q: %q", want, out)
		}
	}
	for _, p := range []string{filepath.Join(gitdir, "in-git"), filepath.Join(gitdir, "in-target")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was created through the read-only .git", p)
		}
	}
}

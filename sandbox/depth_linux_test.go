package sandbox

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/test/asnobody"
	"github.com/execgo/exec-server/internal/test/plantest"
	"github.com/execgo/exec-server/sandbox/policy"
)

// TestDenyGlobAnyDepth: without glob_scan_max_depth a deny glob masks its
// matches at any depth, as the reference does, for the fs helper and for
// commands alike (a scan depth of 32 left WORK/d1/…/d40/k.env readable).
// An explicit glob_scan_max_depth still bounds the masks.
func TestDenyGlobAnyDepth(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	deep := ws
	for i := range 40 {
		deep = filepath.Join(deep, "d"+strings.Repeat("x", i%3))
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(deep, "k.env")
	if err := os.WriteFile(secret, []byte("deep secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	raw := plantest.Context([]string{plantest.Special("root", "read"), plantest.Special("project_roots", "write"), plantest.Glob("**/*.env", "deny")},
		`,"cwd":"`+plantest.URI(ws)+`","workspaceRoots":["`+plantest.URI(ws)+`"]`)
	p := resolve(t, raw, policy.Env{})
	if m, ok := findMount(p, secret); !ok || m.Access != policy.AccessNone {
		t.Fatalf("the match 41 levels deep is not masked\n%s", dump(p))
	}
	if got := runOp(t, p, "read", secret); got != "EACCES" {
		t.Errorf("fs helper read of the deep match: %s, want EACCES", got)
	}
	spec, err := Command(p, "/bin/cat", []string{"cat", secret}, nil, ws)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r, w, _ := os.Pipe()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	proc, err := startSpecProcess(spec, []*os.File{null, w, w}, nil)
	w.Close()
	if err != nil {
		spec.Release()
		t.Fatal(err)
	}
	_, _ = out.ReadFrom(r)
	r.Close()
	st, _ := proc.Wait()
	spec.Release()
	if strings.Contains(out.String(), "deep secret") || st.ExitCode() == 0 {
		t.Errorf("HOLE: a command read the deep match: exit %d, %q", st.ExitCode(), out.String())
	}

	// An explicit depth still bounds the scan (the reference's too).
	bounded := strings.Replace(raw, `]}},`, `],"glob_scan_max_depth":8}},`, 1)
	if p := resolve(t, bounded, policy.Env{}); func() bool { _, ok := findMount(p, secret); return ok }() {
		t.Errorf("glob_scan_max_depth 8 masked a match 41 levels deep")
	}
}

// TestHostCleanupNonRoot re-runs this file's and the protected-path
// tests of #17 as an unprivileged user (nobody).
func TestHostCleanupNonRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	asnobody.Run(t, "", "^Test(DenyGlobAnyDepth|ProtectedRemovedWhileHeld|ProtectedRemovalRetried|ProtectedMountPointOfConcurrentSandbox)$", []string{"SANDBOX_TEST_NONROOT=1"}, "sandbox not available")
}

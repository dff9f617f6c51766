// Package asnobody re-runs tests of the running test binary as an
// unprivileged user (uid and gid 65534), so that a package run as root also
// proves its code works for a server that is not root. Test-only.
package asnobody

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// UID is the unprivileged user (and group) the tests run as.
const UID = 65534

// Result is what the re-run printed.
type Result struct {
	Passed, Skipped []string // "--- PASS: …" / "--- SKIP: …" lines of top-level tests
	Output          string
}

// Run copies the running test binary to a new directory under base ("" for
// the system's temporary directory; t.TempDir's parent is private to root)
// that nobody can reach, and runs the tests matching pattern (a -test.run regexp) there as UID, with a
// TMPDIR it owns as its working directory and env added to a minimal
// environment. The caller is skipped when the re-run's output contains one
// of unavailable (the kernel refuses what the tests need, e.g. unprivileged
// user namespaces) and no test passed; it fails when the re-run fails or
// runs no test.
func Run(t *testing.T, base, pattern string, env []string, unavailable ...string) Result {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("not root: the other tests already run unprivileged")
	}
	dir, err := os.MkdirTemp(base, "asnobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(self))
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	home, tmp := filepath.Join(dir, "home"), filepath.Join(dir, "tmp")
	for _, d := range []string{home, tmp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, UID, UID); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run", pattern, "-test.v", "-test.count=1")
	cmd.Env = append([]string{"TMPDIR=" + tmp, "PATH=/usr/local/bin:/usr/bin:/bin"}, env...)
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: UID, Gid: UID}}
	out, runErr := cmd.CombinedOutput()
	r := Result{Output: string(out)}
	for _, l := range strings.Split(r.Output, "\n") {
		switch {
		case strings.HasPrefix(l, "--- PASS: "):
			r.Passed = append(r.Passed, l)
		case strings.HasPrefix(l, "--- SKIP: "):
			r.Skipped = append(r.Skipped, l)
		}
	}
	if len(r.Passed) == 0 {
		for _, u := range unavailable {
			if strings.Contains(r.Output, u) && !strings.Contains(r.Output, "--- FAIL") {
				t.Skipf("as nobody, unavailable (%q):\n%s", u, r.Output)
			}
		}
	}
	if runErr != nil {
		t.Fatalf("as nobody: %v\n%s", runErr, r.Output)
	}
	if len(r.Passed) == 0 {
		t.Fatalf("as nobody, no test passed:\n%s", r.Output)
	}
	t.Logf("as nobody: %d passed, skipped: %q", len(r.Passed), r.Skipped)
	return r
}

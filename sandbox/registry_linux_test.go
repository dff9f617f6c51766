package sandbox

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/execgo/exec-server/sandbox/policy"
)

// deadPid returns the pid of a process that has ended.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// recorded returns the pid in path's record, 0 when there is none.
func recorded(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(recordName(registryDir(), path))
	if err != nil {
		return 0
	}
	pid, p, ok := parseRecord(b)
	if !ok || p != path {
		t.Fatalf("record of %s: %q", path, b)
	}
	return pid
}

func setRecord(t *testing.T, path string, pid int) {
	t.Helper()
	if err := os.WriteFile(recordName(registryDir(), path), []byte(strconv.Itoa(pid)+"\n"+path+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The mount point of a missing protected path is recorded while it
// exists; CleanStale removes only what a dead server left, unheld, empty
// and made by an exec-server, and keeps or drops the other records.
func TestCleanStale(t *testing.T) {
	t.Setenv(StateDirEnv, t.TempDir())
	w := t.TempDir()
	dead := deadPid(t)

	// The ordinary life: made and recorded, removed and forgotten.
	p := filepath.Join(w, ".codex")
	f := lockMountPoint(p)
	if f == nil {
		t.Fatal("lockMountPoint failed")
	}
	if got := recorded(t, p); got != os.Getpid() {
		t.Fatalf("record of a new mount point: pid %d, want ours (%d)", got, os.Getpid())
	}
	f.Close()
	if !removeMountPoint(p) || exists(p) || recorded(t, p) != 0 {
		t.Fatalf("after removal: exists %v, record pid %d", exists(p), recorded(t, p))
	}

	// A dead server's leftovers.
	left := filepath.Join(w, "a", ".agents")
	held := filepath.Join(w, "b", ".codex")
	live := filepath.Join(w, "c", ".aws")
	full := filepath.Join(w, "d", ".codex")
	real := filepath.Join(w, "e", ".git")
	for _, d := range []string{"a", "b", "c", "d", "e"} {
		if err := os.Mkdir(filepath.Join(w, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var keep []*os.File
	for _, m := range []string{left, held, live, full} {
		f := lockMountPoint(m)
		if f == nil {
			t.Fatalf("lockMountPoint %s failed", m)
		}
		keep = append(keep, f)
		setRecord(t, m, dead)
	}
	setRecord(t, live, os.Getppid()) // a server still running
	if err := os.WriteFile(filepath.Join(full, "user-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(real, 0o755); err != nil { // the user's own, no marker
		t.Fatal(err)
	}
	setRecord(t, real, dead)
	for i, f := range keep {
		if i != 1 { // held stays held (another server's sandbox uses it)
			f.Close()
		}
	}
	garbage := filepath.Join(registryDir(), "0000")
	if err := os.WriteFile(garbage, []byte("x\n/etc\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	removed := CleanStale()
	if !slices.Equal(removed, []string{left}) {
		t.Errorf("CleanStale removed %v, want only %s", removed, left)
	}
	for _, c := range []struct {
		path      string
		exists    bool
		record    int
		whyRecord string
	}{
		{left, false, 0, "removed: forgotten"},
		{held, true, dead, "held by another server: kept for later"},
		{live, true, os.Getppid(), "its server runs: kept"},
		{full, true, 0, "the user's files in it: not ours any more"},
		{real, true, 0, "no marker: the user's"},
	} {
		if exists(c.path) != c.exists {
			t.Errorf("%s exists: %v, want %v", c.path, exists(c.path), c.exists)
		}
		if got := recorded(t, c.path); got != c.record {
			t.Errorf("%s record pid %d, want %d (%s)", c.path, got, c.record, c.whyRecord)
		}
	}
	if _, err := os.Stat(garbage); err == nil {
		t.Error("a record that is not one was kept")
	}
	keep[1].Close()
	if got := CleanStale(); !slices.Equal(got, []string{held}) {
		t.Errorf("once released: CleanStale removed %v, want %s", got, held)
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add([]byte("12\n/w/.git\n"))
	f.Add([]byte("0\n/\n"))
	f.Add([]byte("12\n/w/../.git\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pid, path, ok := parseRecord(b)
		if ok && (pid <= 0 || !filepath.IsAbs(path) || filepath.Clean(path) != path || !isProtectedName(path)) {
			t.Fatalf("accepted %q: %d %q", b, pid, path)
		}
	})
}

// A mount point still mounted in a running sandbox (its server died, the
// sandbox not yet) is not removed: rmdir would lazily unmount the mask in
// the sandbox, which could then create the protected path.
func TestCleanStaleKeepsMounted(t *testing.T) {
	needSandbox(t)
	t.Setenv(StateDirEnv, t.TempDir())
	ws, _ := fixture(t)
	p := filepath.Join(ws, ".codex")
	plan := workspaceWrite(ws)
	plan.Mounts = append(plan.Mounts, policy.Mount{Path: p, Access: policy.AccessRead, Protected: true, Missing: true, Dir: true})
	spec, err := Command(plan, "/bin/sh", []string{"sh", "-c", "echo up; read x; mkdir -p .codex/x && echo made"}, nil, ws)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	proc, err := startSpecProcess(spec, []*os.File{inR, outW, outW}, nil)
	inR.Close()
	outW.Close()
	if err != nil {
		spec.Release()
		t.Fatal(err)
	}
	out := bufio.NewReader(outR)
	if line, err := out.ReadString('\n'); line != "up\n" {
		t.Fatalf("sandboxed command: %q, %v", line, err)
	}
	// As if this server had died: its lock gone, its record a dead pid's.
	protMu.Lock()
	e := protReg[p]
	delete(protReg, p)
	for _, d := range e.dirs {
		d.Close()
	}
	e.dirs = nil
	protMu.Unlock()
	setRecord(t, p, deadPid(t))
	removed := CleanStale()
	protMu.Lock()
	protReg[p] = e // its release now leaves the mount point alone
	protMu.Unlock()
	if len(removed) > 0 || !exists(p) {
		t.Errorf("CleanStale removed %v while a sandbox had it mounted", removed)
	}
	inW.Close()
	rest, _ := io.ReadAll(out)
	st, _ := proc.Wait()
	spec.Release()
	if strings.Contains(string(rest), "made") || exists(filepath.Join(p, "x")) {
		t.Errorf("the sandbox created .codex/x after the clean-up (exit %v): %q", st, rest)
	}
	if got := CleanStale(); !slices.Equal(got, []string{p}) {
		t.Errorf("once the sandbox ended: CleanStale removed %v, want %s", got, p)
	}
}

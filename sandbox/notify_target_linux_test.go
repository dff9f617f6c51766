package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTargetProcSelfPinned: the target's /proc/self and /proc/thread-self
// name the process the notification came from, even once its numbers name
// another process. The supervisor checks the notification is still valid
// (so its tid still names the caller) before it walks the paths, and the
// walk used to look /proc/TGID up by number then: had the caller died and
// its number been reused by another process of the sandbox meanwhile, the
// walk went through that process's cwd and descriptors. Reuse is
// simulated by giving the target the numbers of another live process
// after openTarget; the walks must still reach the first one's cwd. Without
// the fix every case reached the second's.
func TestTargetProcSelfPinned(t *testing.T) {
	dirA, dirB := realTemp(t), realTemp(t)
	start := func(dir string) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	a, b := start(dirA), start(dirB)
	// Yama's ptrace_scope 2 or 3 without CAP_SYS_PTRACE: no
	// /proc/PID/mem of a child either, which openTarget needs.
	mem, err := unix.Open("/proc/"+strconv.Itoa(a.Process.Pid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == unix.EACCES || err == unix.EPERM {
		t.Skipf("open of a child's /proc/PID/mem: %v", err)
	}
	if err == nil {
		unix.Close(mem)
	}
	tg, errno := openTarget(a.Process.Pid)
	if errno != 0 {
		t.Fatalf("openTarget: %v", errno)
	}
	defer tg.close()
	tg.tid, tg.tgid = b.Process.Pid, b.Process.Pid // the numbers now name b

	proc, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(proc)
	wantA := func(what string, fd int, want string) {
		t.Helper()
		got, ok := realDir(fd)
		if !ok {
			t.Fatalf("%s: cannot name the directory reached", what)
		}
		if got != want {
			t.Errorf("%s reached %s, want %s (the caller's)", what, got, want)
		}
	}
	for _, p := range []string{"/proc/self/cwd/x", "/proc/thread-self/cwd/x"} {
		dir, name, _, errno := tg.walkParent(tg.root, p)
		if errno != 0 {
			t.Fatalf("walk %s: %v", p, errno)
		}
		if name != "x" {
			t.Errorf("walk %s: last component %q, want x", p, name)
		}
		wantA("walk "+p, dir, dirA)
		unix.Close(dir)
	}
	// A final self followed (an open of "/proc/self" itself).
	aProc := "/proc/" + strconv.Itoa(a.Process.Pid)
	for name, want := range map[string]string{"self": aProc, "thread-self": aProc + "/task/" + strconv.Itoa(a.Process.Pid)} {
		fd, errno := tg.openFollow(proc, name)
		if errno != 0 {
			t.Fatalf("follow /proc/%s: %v", name, errno)
		}
		wantA("follow /proc/"+name, fd, want)
		unix.Close(fd)
	}
	// And through a relative symlink to it in an ordinary directory.
	link := filepath.Join(t.TempDir(), "l")
	if err := os.Symlink("/proc/self/cwd", link); err != nil {
		t.Fatal(err)
	}
	dir, name, _, errno := tg.walkParent(tg.root, link+"/x")
	if errno != 0 {
		t.Fatalf("walk %s/x: %v", link, errno)
	}
	if name != "x" {
		t.Errorf("walk via a link: last component %q, want x", name)
	}
	wantA("walk via "+link, dir, dirA)
	unix.Close(dir)
	// Once the caller is gone, its /proc/self leads nowhere (procfs's
	// lookups in a dead process's directory fail), whatever has its number.
	_ = a.Process.Kill()
	_ = a.Wait()
	if dir, _, _, errno := tg.walkParent(tg.root, "/proc/self/cwd/x"); errno == 0 {
		got, _ := realDir(dir)
		unix.Close(dir)
		t.Errorf("walk /proc/self/cwd/x of a dead caller reached %s", got)
	}
}

// realTemp is a fresh temporary directory by its path without symlinks
// (what realDir reports).
func realTemp(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

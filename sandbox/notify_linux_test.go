package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/internal/test/plantest"
	"github.com/execgo/exec-server/sandbox/policy"
)

// denyPlan resolves a workspace-write policy over ws with the deny globs
// **/*.env and secrets/** and the missing deny path ws/missing.key.
func denyPlan(t testing.TB, ws string) *policy.Plan {
	t.Helper()
	return resolve(t, plantest.Context([]string{
		plantest.Special("root", "read"),
		plantest.Path(ws, "write"),
		plantest.Glob(ws+"/**/*.env", "deny"),
		plantest.Glob(ws+"/secrets/**", "deny"),
		plantest.Path(filepath.Join(ws, "missing.key"), "deny"),
	}, ""), policy.Env{})
}

// runSh runs sh -c script confined by p in dir; it returns the exit status
// and the output (stdout and stderr).
func runSh(t *testing.T, p *policy.Plan, dir, script string) (int, string) {
	t.Helper()
	return runShHook(t, p, dir, script, nil)
}

// runShHook is runSh with hook, when not nil, run beside the command with
// the host PID of the sandbox's init (its PID 1); it returns before
// runShHook does, and must return once the command is gone (done closed).
func runShHook(t *testing.T, p *policy.Plan, dir, script string, hook func(init int, done <-chan struct{})) (int, string) {
	t.Helper()
	return runShEnvHook(t, p, dir, script, nil, hook)
}

// runShEnvHook is runShHook with env added to the command's environment.
func runShEnvHook(t *testing.T, p *policy.Plan, dir, script string, env []string, hook func(init int, done <-chan struct{})) (int, string) {
	t.Helper()
	spec, err := Command(p, "/bin/sh", []string{"sh", "-c", script}, append([]string{"PATH=/usr/bin:/bin"}, env...), dir)
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); r.Close(); done <- b }()
	defer spec.Release()
	proc, err := startSpecProcess(spec, []*os.File{null, w, w}, nil)
	w.Close()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	// A hang is a failure, not a test timeout.
	// Generous: 3 000 supervised creations under a signal storm took over
	// 30 s beside two CPU hogs and four -race packages.
	timer := time.AfterFunc(120*time.Second, func() {
		t.Errorf("%q: still running after 120 s: killed", script)
		_ = syscall.Kill(-proc.Pid, syscall.SIGKILL)
	})
	defer timer.Stop()
	if hook != nil {
		gone, hooked := make(chan struct{}), make(chan struct{})
		go func() { defer close(hooked); hook(proc.Pid, gone) }()
		defer func() { close(gone); <-hooked }()
	}
	st, err := proc.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return st.ExitCode(), string(<-done)
}

// denyFixture makes ws with in.txt, ok.txt, dir/f.txt and plain/.
func denyFixture(t *testing.T) string {
	t.Helper()
	ws, _ := fixture(t)
	for name, body := range map[string]string{"in.txt": "in", "ok.txt": "ok", "dir/f.txt": "f", "sub/keep.txt": "k"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

func TestCommandDenyGlobCreate(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	p := denyPlan(t, ws)
	if !superviseCreation(p) {
		t.Fatalf("no supervision for %s", dump(p))
	}
	// The supervisor lives in the init: the server side keeps nothing.
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	defer func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > goroutines {
			t.Errorf("goroutines: %d before, %d after", goroutines, n)
		}
		if n := openFDs(t); n > fds {
			t.Errorf("open descriptors: %d before, %d after", fds, n)
		}
	}()
	refused := []struct {
		name, script string
		gone         []string // must not exist on the host afterwards
	}{
		{"redirect", "echo x > new.env", []string{"new.env"}},
		{"touch in a subdirectory", "touch sub/new2.env", []string{"sub/new2.env"}},
		{"cp", "cp in.txt new3.env", []string{"new3.env"}},
		{"mkdir", "mkdir d.env", []string{"d.env"}},
		{"mkfifo", "mkfifo f.env", []string{"f.env"}},
		{"symlink", "ln -s in.txt l.env", []string{"l.env"}},
		{"hard link", "ln in.txt h.env", []string{"h.env"}},
		{"rename", "mv ok.txt m.env", []string{"m.env"}},
		{"through a dangling symlink", "ln -s target.env l && echo x > l", []string{"target.env"}},
		{"through a symlinked directory", "ln -s sub sl && echo x > sl/deep.env", []string{"sub/deep.env"}},
		{"absolute path", "echo x > " + ws + "/abs.env", []string{"abs.env"}},
		{"dot-dot", "echo x > sub/../dd.env", []string{"dd.env"}},
		{"directory moved under a denied tree", "mv dir secrets", []string{"secrets"}},
		{"into a denied tree", "mkdir secrets && touch secrets/x", []string{"secrets/x"}},
		{"missing deny path", "echo x > missing.key", []string{"missing.key"}},
		{"missing deny path, mkdir", "mkdir missing.key", []string{"missing.key"}},
		{"append", "echo x >> app.env", []string{"app.env"}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runSh(t, p, ws, tc.script)
			if code == 0 || !strings.Contains(out, "Permission denied") {
				t.Errorf("%q: exit %d, output %q; want a failure with Permission denied", tc.script, code, out)
			}
			for _, g := range tc.gone {
				if _, err := os.Lstat(filepath.Join(ws, g)); err == nil {
					t.Errorf("%q: %s exists on the host", tc.script, g)
				}
			}
		})
	}
	// The files the refused renames would have moved are still there.
	assertFile(t, filepath.Join(ws, "ok.txt"), "ok")
	assertFile(t, filepath.Join(ws, "dir/f.txt"), "f")

	allowed := []struct{ name, script, check string }{
		{"redirect", "echo hi > new.txt", "new.txt=hi\n"},
		{"append", "echo more >> in.txt", "in.txt=inmore\n"},
		{"mkdir", "mkdir -p a/b/c && touch a/b/c/f", "a/b/c/f="},
		{"rename", "echo r > r1 && mv r1 r2", "r2=r\n"},
		{"rename a directory", "mkdir -p mvd/x && mv mvd mvd2", ""},
		{"symlink", "ln -s ok.txt sym && cat sym > viasym", "viasym=ok"},
		{"hard link", "ln ok.txt hard", "hard=ok"},
		{"through a symlink to a new name", "ln -s made.txt dl && echo m > dl", "made.txt=m\n"},
		{"/dev/stdout and /dev/null", "echo so > /dev/stdout && echo x > /dev/null && echo se > /dev/stderr", ""},
		{"fd redirect", "exec 3> fd3.txt && echo three >&3 && echo four >> /dev/fd/3", "fd3.txt=three\nfour\n"},
		{"mkfifo", "mkfifo pipe.txt && (echo fifo > pipe.txt &) && cat pipe.txt > fromfifo", "fromfifo=fifo\n"},
		{"noclobber refuses an existing file", "set -C; echo x > in.txt; test $? -ne 0", ""},
		{"O_EXCL on an existing name", "set -C; echo x > ok.txt || echo refused > excl", "excl=refused\n"},
		{"directory target", "echo x > sub 2>/dev/null; test $? -ne 0", ""},
		// The init (the supervisor) exits with the command, taking what
		// it left running along: a hang fails the test.
		{"a background process outlives the command", "sleep 1000 & echo bg > bg.txt", "bg.txt=bg\n"},
	}
	for _, tc := range allowed {
		t.Run("allowed "+tc.name, func(t *testing.T) {
			code, out := runSh(t, p, ws, tc.script)
			if code != 0 {
				t.Fatalf("%q: exit %d, output %q", tc.script, code, out)
			}
			if name, want, ok := strings.Cut(tc.check, "="); ok {
				assertFile(t, filepath.Join(ws, name), want)
			}
		})
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func assertFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if !bytes.Equal(b, []byte(want)) {
		t.Errorf("%s = %q, want %q", path, b, want)
	}
}

func TestCommandDenyGlobUmask(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	p := denyPlan(t, ws)
	code, out := runSh(t, p, ws, "umask 077; touch f; mkdir d; umask 022; touch g")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for name, want := range map[string]os.FileMode{"f": 0o600, "d": os.ModeDir | 0o700, "g": 0o644} {
		st, err := os.Stat(filepath.Join(ws, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode(), want)
		}
	}
}

// pyResults starts the probe scripts: res runs a call and prints
// "name=ok" or "name=ERRNO" (see checkResults).
const pyResults = `
import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
def res(name, f):
    try:
        f()
        print(name + "=ok")
    except OSError as e:
        print(name + "=" + errno.errorcode[e.errno])
`

// pyCalls exercises what sh cannot: O_TMPFILE, linkat with AT_EMPTY_PATH
// and through /proc/self/fd with AT_SYMLINK_FOLLOW, openat2 with and without O_CREAT. Each line
// prints "name=ok" or "name=ERRNO".
const pyCalls = pyResults + `
def c(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def tmp():
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
    os.write(fd, b"t")
    return fd
def via_proc(dst):
    fd = tmp()
    c(libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100, dst.encode(), 0x400))
def empty_path(dst):
    fd = tmp()
    c(libc.linkat(fd, b"", -100, dst.encode(), 0x1000))
class How(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
def openat2(name, flags, resolve=0):
    how = How(flags, 0o644 if flags & os.O_CREAT else 0, resolve)
    libc.syscall.restype = ctypes.c_long
    fd = c(libc.syscall(437, -100, name.encode(), ctypes.byref(how), ctypes.c_size_t(24)))
    os.close(fd)
res("tmpfile", lambda: os.close(tmp()))
res("tmpfile-link-ok", lambda: via_proc("t1.txt"))
res("tmpfile-link-env", lambda: via_proc("t1.env"))
res("emptypath-ok", lambda: empty_path("t2.txt"))
res("emptypath-env", lambda: empty_path("t2.env"))
res("openat2-ok", lambda: openat2("o2.txt", os.O_CREAT | os.O_WRONLY))
res("openat2-env", lambda: openat2("o2.env", os.O_CREAT | os.O_WRONLY))
res("openat2-beneath-env", lambda: openat2("o3.env", os.O_CREAT | os.O_WRONLY, 0x08))
res("openat2-beneath-ok", lambda: openat2("o3.txt", os.O_CREAT | os.O_WRONLY, 0x08))
res("openat2-read", lambda: openat2("in.txt", os.O_RDONLY))
def bad_how(name, flags, mode):
    r = libc.syscall(437, -100, name.encode(), ctypes.byref(How(flags, mode, 0)), ctypes.c_size_t(24))
    os.close(c(r))
res("openat2-mode-type", lambda: bad_how("bm.txt", os.O_CREAT | os.O_WRONLY, 0o100644))
res("openat2-mode-nocreat", lambda: bad_how("in.txt", os.O_RDONLY, 0o644))
res("exchange-env", lambda: c(libc.renameat2(-100, b"ok.txt", -100, b"x.env", 2)))
res("noreplace-ok", lambda: c(libc.renameat2(-100, b"o2.txt", -100, b"o4.txt", 1)))
# The supervisor (the init, PID 1) may open its own /proc entries: it
# must never do so for the command (its memory, its listener).
def o(p, flags):
    os.close(os.open(p, flags))
res("init-mem", lambda: o("/proc/1/mem", os.O_RDWR | os.O_CREAT))
res("init-fds", lambda: [o("/proc/1/fd/%d" % n, os.O_RDWR | os.O_CREAT) for n in range(3, 12)])
res("init-task-mem", lambda: o("/proc/1/task/1/mem", os.O_RDWR | os.O_CREAT))
def from_cwd():
    os.chdir("/proc/1")
    try:
        o("mem", os.O_RDWR | os.O_CREAT)
    finally:
        os.chdir(os.environ["WS"])
res("init-cwd", from_cwd)
res("init-openat2", lambda: openat2("/proc/1/mem", os.O_RDWR))
res("init-openat2-beneath", lambda: c(libc.syscall(437, os.open("/proc/1", os.O_PATH), b"mem", ctypes.byref(How(os.O_RDWR, 0, 0x08)), ctypes.c_size_t(24))))
res("init-mem-reopened", lambda: o("/proc/self/fd/%d" % os.open("/proc/1/mem", os.O_PATH), os.O_RDWR | os.O_CREAT))
res("self-status", lambda: o("/proc/self/status", os.O_RDONLY | os.O_CREAT))
res("mknod-chr", lambda: os.mknod("chr.txt", 0o600 | 0o020000, os.makedev(1, 3)))
res("mkdir-outside-ok", lambda: os.mkdir("/usr/x.txt"))
`

func TestCommandDenyGlobCalls(t *testing.T) {
	needSandbox(t)
	needPython(t)
	ws := denyFixture(t)
	p := denyPlan(t, ws)
	code, out := runSh(t, p, ws, "WS=$PWD exec /usr/bin/python3 -c '"+pyCalls+"'")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := map[string]string{
		"tmpfile": "ok", "tmpfile-link-ok": "ok", "tmpfile-link-env": "EACCES",
		"emptypath-ok": "ok", "emptypath-env": "EACCES",
		"openat2-ok": "ok", "openat2-env": "EACCES", "openat2-beneath-env": "EACCES", "openat2-beneath-ok": "ok",
		"openat2-read": "ok", "exchange-env": "EACCES", "noreplace-ok": "ok",
		// As the kernel: a mode with a file type, or without O_CREAT.
		"openat2-mode-type": "EINVAL", "openat2-mode-nocreat": "EINVAL",
		// The lockdown filter's EPERM beats the notification; outside the
		// writable roots the view's EROFS stands (done by the supervisor).
		"mknod-chr": "EPERM", "mkdir-outside-ok": "EROFS",
		"init-mem": "EACCES", "init-fds": "EACCES", "init-task-mem": "EACCES", "init-cwd": "EACCES",
		"init-openat2": "EACCES", "init-openat2-beneath": "EACCES", "init-mem-reopened": "EACCES", "self-status": "ok",
	}
	checkResults(t, out, want)
	for _, name := range []string{"t1.env", "t2.env", "o2.env", "o3.env", "x.env", "bm.txt"} {
		if _, err := os.Lstat(filepath.Join(ws, name)); err == nil {
			t.Errorf("%s exists on the host", name)
		}
	}
	for _, name := range []string{"t1.txt", "t2.txt", "o3.txt", "o4.txt"} {
		if _, err := os.Lstat(filepath.Join(ws, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// pyRace opens (O_CREAT) a path whose buffer another thread keeps
// flipping between an allowed and a denied name: a supervisor that let the
// kernel read the path again after its check (CONTINUE) would let the
// denied name through. It prints how many opens succeeded and failed.
const pyRace = `
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(64)
good, bad = b"race_ok.txt\0", b"race_no.env\0"
ctypes.memmove(buf, good, len(good))
stop = []
def flip():
    while not stop:
        ctypes.memmove(buf, bad, len(bad))
        ctypes.memmove(buf, good, len(good))
t = threading.Thread(target=flip)
t.start()
ok = fail = 0
for i in range(3000):
    fd = libc.open(buf, os.O_WRONLY | os.O_CREAT, 0o644)
    if fd >= 0:
        os.close(fd)
        ok += 1
    else:
        fail += 1
stop.append(1)
t.join()
print("ok=%d fail=%d" % (ok, fail))
`

func TestCommandDenyGlobRace(t *testing.T) {
	needSandbox(t)
	needPython(t)
	ws := denyFixture(t)
	p := denyPlan(t, ws)
	code, out := runSh(t, p, ws, "exec /usr/bin/python3 -c '"+pyRace+"'")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var ok, fail int
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "ok=%d fail=%d", &ok, &fail); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	t.Logf("opens: %d allowed, %d refused", ok, fail)
	if _, err := os.Lstat(filepath.Join(ws, "race_no.env")); err == nil {
		t.Fatal("race_no.env exists on the host: the path changed between the check and the use")
	}
	if ok == 0 || fail == 0 {
		t.Skipf("the flipping thread never raced the opens (%d allowed, %d refused)", ok, fail)
	}
}

// BenchmarkCommandCreate1000 runs a command that creates 1000 files (a
// shell loop of redirections, no fork per file) without deny globs (no
// supervisor) and with them: the difference per file is the supervisor's
// cost per creation (ns/op / 1000).
func BenchmarkCommandCreate1000(b *testing.B) {
	if !Probe().Available {
		b.Skip(Probe().Missing)
	}
	ws := b.TempDir()
	script := `rm -rf d && mkdir d && i=0 && while [ $i -lt 1000 ]; do : > d/f$i.txt; i=$((i+1)); done`
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	for _, globs := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "denyGlobs"}[globs], func(b *testing.B) {
			p := denyPlan(b, ws)
			if !globs {
				p.DenyGlobs = nil
			}
			for b.Loop() {
				spec, err := Command(p, "/bin/sh", []string{"sh", "-c", script}, nil, ws)
				if err != nil {
					b.Fatal(err)
				}
				runSpecOK(b, spec, []*os.File{null, null, null})
			}
		})
	}
}

// BenchmarkCommandTrueDenyGlobs is BenchmarkCommandTrue's start-up with the
// supervisor (the stub's extra exec).
func BenchmarkCommandTrueDenyGlobs(b *testing.B) {
	if !Probe().Available {
		b.Skip(Probe().Missing)
	}
	ws := b.TempDir()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	p := denyPlan(b, ws)
	for b.Loop() {
		spec, err := Command(p, "/bin/true", []string{"true"}, nil, ws)
		if err != nil {
			b.Fatal(err)
		}
		runSpecOK(b, spec, []*os.File{null, null, null})
	}
}

// TestCommandDenyGlobEmptyRoot: with no root entry the server's binary is
// outside the view; the stub still starts (through /proc/self/exe).
func TestCommandDenyGlobEmptyRoot(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	p := resolve(t, plantest.Context([]string{plantest.Path(ws, "write"), plantest.Glob(ws+"/**/*.env", "deny")}, ""), policy.Env{})
	if p.Root != policy.AccessNone || !superviseCreation(p) {
		t.Fatalf("want an empty root with supervision: %s", dump(p))
	}
	code, out := runSh(t, p, ws, "echo ok > ok2.txt && echo x > e.env")
	if code == 0 || !strings.Contains(out, "Permission denied") {
		t.Errorf("exit %d, output %q; want Permission denied", code, out)
	}
	assertFile(t, filepath.Join(ws, "ok2.txt"), "ok\n")
	if _, err := os.Lstat(filepath.Join(ws, "e.env")); err == nil {
		t.Error("e.env exists on the host")
	}
}

// TestCommandDenyGlobPTY: under the supervisor a PTY command keeps its
// terminal and job control (the stub in between changes nothing), and an
// O_CREAT open of /dev/tty (done by the supervisor) reaches it.
func TestCommandDenyGlobPTY(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	script := "set -m; " + ptyJob + " & fg %1 >/dev/null; echo via-tty > /dev/tty; tty; echo x > t.env"
	code, out, ttyName := runOnPTY(t, denyPlan(t, ws), ws, script)
	for _, want := range []string{"fg=1 ctty=1\n", "via-tty\n", ttyName + "\n", "Permission denied"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q (exit %d)", out, want, code)
		}
	}
	if code == 0 {
		t.Errorf("exit 0 after a refused creation: %q", out)
	}
}

// pyOpenat2 is the start of the Python scripts that call openat2(2)
// directly (Python has no wrapper): openat2(name, flags) returns a
// descriptor or raises OSError with the errno.
const pyOpenat2 = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
class How(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
def openat2(name, flags):
    fd = libc.syscall(437, -100, name.encode(), ctypes.byref(How(flags, 0, 0)), ctypes.c_size_t(24))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), name)
    return fd
`

// pyFinalLink opens, with openat2 and no O_CREAT, symlinks (made by the
// test) to the caller's /proc/self/fd/N or /proc/self/status: the
// supervisor does the open, so a final symlink it left to its own kernel
// walk would
// resolve /proc/self as the init's and hand the command the init's
// descriptors (the Go runtime's, the target's /proc/PID/mem, the view's
// root). Each line names what went wrong, "done" ends.
const pyFinalLink = pyOpenat2 + `
import errno
mine = os.open("in.txt", os.O_RDONLY)
for n in range(0, 40):
    for name in ("fl%d" % n, "fl%d/" % n):
        try:
            st = os.fstat(n)
        except OSError:
            st = None
        try:
            fd = openat2(name, os.O_RDONLY)
        except OSError as e:
            if st is not None and not name.endswith("/") and e.errno != errno.ENXIO:
                print("%s: %s, want the fd of the command %d" % (name, errno.errorcode[e.errno], n))
            continue
        got = os.fstat(fd)
        if st is None or (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
            print("%s: opened %s, not the fd of the command %d" % (name, os.readlink("/proc/self/fd/%d" % fd), n))
        os.close(fd)
fd = openat2("flstatus", os.O_RDONLY)
pid = [l for l in os.read(fd, 4096).decode().split("\n") if l.startswith("Pid:")][0].split()[1]
if int(pid) != os.getpid():
    print("status of pid %s, not %d" % (pid, os.getpid()))
print("done")
`

func TestCommandDenyGlobFinalSymlink(t *testing.T) {
	needSandbox(t)
	needPython(t)
	ws := denyFixture(t)
	// Made on the host: the supervisor refuses a command's symlinks into
	// /proc under a deny glob's prefix (TestCommandDenyGlobSymlinkOut).
	for n := 0; n < 40; n++ {
		if err := os.Symlink(fmt.Sprintf("/proc/self/fd/%d", n), filepath.Join(ws, fmt.Sprintf("fl%d", n))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/proc/self/status", filepath.Join(ws, "flstatus")); err != nil {
		t.Fatal(err)
	}
	code, out := runSh(t, denyPlan(t, ws), ws, "exec /usr/bin/python3 -c '"+pyFinalLink+"'")
	if code != 0 || strings.TrimSpace(out) != "done" {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// TestCommandDenyGlobMoveMount: the kernel moves a mount along with a
// directory renamed above it, so a command that renamed the parent of a
// masked deny path (or of a read-only carve-out) could then make a new
// file at the denied path, or write where the policy says read-only. Under
// the supervisor such a rename is refused and the host keeps its files.
func TestCommandDenyGlobMoveMount(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	for name, body := range map[string]string{"sub/secret.txt": "SECRET", "a/ro/f.txt": "RO", "b/c/secret2.txt": "S2"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := resolve(t, plantest.Context([]string{
		plantest.Special("root", "read"),
		plantest.Path(ws, "write"),
		plantest.Glob(ws+"/**/*.env", "deny"),
		plantest.Path(filepath.Join(ws, "sub/secret.txt"), "deny"),
		plantest.Path(filepath.Join(ws, "b/c/secret2.txt"), "deny"),
		plantest.Path(filepath.Join(ws, "a/ro"), "read"),
	}, ""), policy.Env{})
	if !superviseCreation(p) {
		t.Fatalf("no supervision for %s", dump(p))
	}
	for _, tc := range []struct{ name, script string }{
		{"parent of a masked file", "mv sub sub2 && mkdir sub && echo NEW > sub/secret.txt"},
		{"grandparent of a masked file", "mv b b2 && mkdir -p b/c && echo NEW > b/c/secret2.txt"},
		{"exchanged away", "mkdir x && python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); sys.exit(l.renameat2(-100,b\"x\",-100,b\"b\",2) != 0)' && mkdir -p b/c && echo NEW > b/c/secret2.txt"},
		{"parent of a read-only carve-out", "mv a a2 && mkdir -p a/ro && echo NEW > a/ro/f.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runSh(t, p, ws, tc.script)
			if code == 0 {
				t.Errorf("%q: exit 0 (%q), want the rename refused", tc.script, out)
			}
		})
	}
	assertFile(t, filepath.Join(ws, "sub/secret.txt"), "SECRET")
	assertFile(t, filepath.Join(ws, "b/c/secret2.txt"), "S2")
	assertFile(t, filepath.Join(ws, "a/ro/f.txt"), "RO")
	for _, gone := range []string{"sub2", "b2", "a2"} {
		if _, err := os.Lstat(filepath.Join(ws, gone)); err == nil {
			t.Errorf("%s exists on the host", gone)
		}
	}
	// Moving a directory with no mount below it still works.
	if code, out := runSh(t, p, ws, "mkdir -p m/n && touch m/n/f && mv m m2"); code != 0 {
		t.Errorf("plain directory move: exit %d: %s", code, out)
	}
}

// pyBind binds sockets where a network is allowed: an AF_UNIX socket
// bound to a path makes that path, so the supervisor does bind too.
const pyBind = pyResults + `
import socket
def bind(addr, fam=socket.AF_UNIX):
    s = socket.socket(fam)
    s.bind(addr)
    return s
def served():
    s = bind("ok.sock")
    s.listen(1)
    c = socket.socket(socket.AF_UNIX)
    c.connect("ok.sock")
    a, _ = s.accept()
    c.sendall(b"hi")
    if a.recv(2) != b"hi":
        raise OSError(errno.EIO, "recv")
def inet():
    s = bind(("127.0.0.1", 0), socket.AF_INET)
    if s.getsockname()[1] == 0:
        raise OSError(errno.EIO, "no port")
def raw(fd, addr, n):
    if libc.bind(fd, addr, n) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
res("env", lambda: bind("b.env"))
res("secrets", lambda: (os.mkdir("secrets"), bind("secrets/s")))
res("dotdot-env", lambda: (os.chdir("sub"), bind("../rel.env")))
os.chdir(os.environ["WS"])
res("abs-env", lambda: bind(os.environ["WS"] + "/abs.env"))
res("ok", served)
res("abs-ok", lambda: (os.chdir("sub"), bind(os.environ["WS"] + "/abs.sock")))
os.chdir(os.environ["WS"])
res("rel-ok", lambda: (os.chdir("sub"), bind("rel.sock")))
os.chdir(os.environ["WS"])
res("umask", lambda: (os.umask(0o077), bind("mask.sock"), os.umask(0o022)))
res("existing", lambda: bind("in.txt"))
res("abstract", lambda: bind("\0exec-server-test-%d" % os.getpid()))
res("inet", inet)
res("notsock", lambda: raw(0, b"\x01\x00x.sock\x00", 9))
res("fault", lambda: raw(socket.socket(socket.AF_UNIX).detach(), ctypes.c_void_p(8), 9))
`

func TestCommandDenyGlobBind(t *testing.T) {
	needSandbox(t)
	needPython(t)
	ws := denyFixture(t)
	raw := strings.Replace(plantest.Context([]string{plantest.Special("root", "read"), plantest.Path(ws, "write"),
		plantest.Glob(ws+"/**/*.env", "deny"), plantest.Glob(ws+"/secrets/**", "deny")}, ""),
		`"network":"restricted"`, `"network":"enabled"`, 1)
	p := resolve(t, raw, policy.Env{})
	code, out := runSh(t, p, ws, "WS=$PWD exec /usr/bin/python3 -c '"+pyBind+"'")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := map[string]string{
		"env": "EACCES", "secrets": "EACCES", "dotdot-env": "EACCES", "abs-env": "EACCES",
		"ok": "ok", "abs-ok": "ok", "rel-ok": "ok", "umask": "ok", "existing": "EADDRINUSE",
		"abstract": "ok", "inet": "ok", "notsock": "ENOTSOCK", "fault": "EFAULT",
	}
	checkResults(t, out, want)
	for _, name := range []string{"b.env", "secrets/s", "rel.env", "abs.env"} {
		if _, err := os.Lstat(filepath.Join(ws, name)); err == nil {
			t.Errorf("%s exists on the host", name)
		}
	}
	for name, mode := range map[string]os.FileMode{"ok.sock": 0o755, "abs.sock": 0o755, "sub/rel.sock": 0o755, "mask.sock": 0o700} {
		st, err := os.Lstat(filepath.Join(ws, name))
		if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want a socket of mode %v", name, st, err, mode)
		}
	}
}

// pyInterrupted creates fresh names with O_EXCL while an interval timer
// keeps interrupting the process: a notification interrupted after the
// supervisor made the file restarts the call, which then finds the file
// its first attempt made (EEXIST for a name that never existed before).
// It prints how many creations failed.
const pyInterrupted = `
import os, signal, errno
signal.signal(signal.SIGALRM, lambda s, f: None)
signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
bad = 0
for i in range(3000):
    try:
        os.close(os.open("n%d" % i, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except OSError as e:
        bad += 1
        if bad < 4:
            print("n%d: %s" % (i, errno.errorcode[e.errno]))
signal.setitimer(signal.ITIMER_REAL, 0)
print("failed=%d" % bad)
`

func TestCommandDenyGlobInterrupted(t *testing.T) {
	runPyNoFailures(t, pyInterrupted)
}

// runPyNoFailures runs a Python script that ends by printing
// "failed=N" in the deny-glob fixture's workspace, confined by its plan
// (stdin /dev/null), and fails unless it exits 0 with N = 0.
func runPyNoFailures(t *testing.T, script string) {
	t.Helper()
	runPyHook(t, script, nil)
}

// runPyHook is runPyNoFailures with hook run beside the command (with
// the workspace: runShHook).
func runPyHook(t *testing.T, script string, hook func(ws string, init int, done <-chan struct{})) {
	t.Helper()
	needSandbox(t)
	needPython(t)
	ws := denyFixture(t)
	var h func(int, <-chan struct{})
	if hook != nil {
		h = func(init int, done <-chan struct{}) { hook(ws, init, done) }
	}
	code, out := runShHook(t, denyPlan(t, ws), ws, "exec /usr/bin/python3 -c '"+script+"' </dev/null", h)
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "failed=0") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// pySignalled creates fresh names from threads threads, per names each,
// while orphans keep exiting: each is reparented to the sandbox's init,
// whose SIGCHLD can interrupt the supervisor (on the init's main thread)
// while it hands the descriptor over. Every open must return the file it
// made, never another descriptor. It prints how many did not.
func pySignalled(threads, per int) string {
	return fmt.Sprintf("\nthreads, per = %d, %d", threads, per) + pySignalledBody
}

const pySignalledBody = `
import os, subprocess, threading
orphans = subprocess.Popen(["/bin/sh", "-c", "while :; do (/bin/true &); done"])
bad = []
def work(t):
    for i in range(per):
        name = "t%d.%d" % (t, i)
        try:
            fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            if os.fstat(fd).st_ino != os.stat(name).st_ino:
                raise OSError(0, "descriptor %d is not the file made" % fd)
            os.close(fd)
        except OSError as e:
            bad.append("%s: %s" % (name, e))
ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
orphans.kill()
for b in bad[:3]:
    print(b)
print("failed=%d" % len(bad))
`

// TestCommandCreateUnderSignals: a signal to the supervisor while it
// installs a created file's descriptor in the command must not leave the
// command's open with a descriptor it never opened (stdin, once).
func TestCommandCreateUnderSignals(t *testing.T) {
	runPyNoFailures(t, pySignalled(1, 3000))
}

// TestCommandDenyGlobFIFOStarved: an O_CREAT open of a FIFO for writing
// waits in the supervisor's pending list for a reader; another process
// creating files without pause must not keep it waiting once the reader
// is there.
func TestCommandDenyGlobFIFOStarved(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	script := `mkfifo p || exit 1; for f in b1 b2; do (while :; do : > $f; done) & P="$P $!"; done; (echo fifo > p &); sleep 0.3; cat p > got; kill $P`
	code, out := runSh(t, denyPlan(t, ws), ws, script)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	assertFile(t, filepath.Join(ws, "got"), "fifo\n")
}

// TestCommandDenyGlobSymlinkOut: deny globs are checked on canonical
// paths, so a symlink inside a glob's prefix to another writable root let
// the command make OTHER/x/.env (no glob matches) and leave it at
// W/cfg/.env (which **/*.env matches). Such symlinks are refused; ones
// inside the prefix, or to files on a read-only mount, still work.
func TestCommandDenyGlobSymlinkOut(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "f.txt"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := resolve(t, plantest.Context([]string{plantest.Special("root", "read"), plantest.Path(ws, "write"), plantest.Path(other, "write"),
		plantest.Glob(ws+"/**/*.env", "deny"), plantest.Glob(ws+"/secrets/**", "deny")}, ""), policy.Env{})
	refused := []struct{ name, script, gone string }{
		{"directory in another writable root", "mkdir " + other + "/x && ln -s " + other + "/x cfg && echo S=1 > cfg/.env", "cfg"},
		{"missing in another writable root", "ln -s " + other + "/y cfg2 && mkdir " + other + "/y && echo S=1 > cfg2/.env", "cfg2"},
		{"file in another writable root", "ln -s " + other + "/f.txt lf", "lf"},
		{"read-only directory", "ln -s / rootlink", "rootlink"},
		{"relative, out of the prefix", "test -d ../../" + filepath.Base(other) + " && ln -s ../../" + filepath.Base(other) + " rel", "rel"},
		{"procfs", "ln -s /proc/self/cwd pc", "pc"},
		{"the prefix of secrets/**", "mkdir real && ln -s real secrets", "secrets"},
		{"renamed into the prefix", "mkdir -p real2 && ln -s " + other + " " + "real2/l && mv real2/l moved", "moved"},
		{"hard link of a symlink", "ln -s " + other + " " + other + "/l2 2>/dev/null; ln -P " + other + "/l2 hl", "hl"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runSh(t, p, ws, tc.script)
			if code == 0 || !strings.Contains(out, "Permission denied") {
				t.Errorf("%q: exit %d, output %q; want Permission denied", tc.script, code, out)
			}
			if _, err := os.Lstat(filepath.Join(ws, tc.gone)); err == nil {
				t.Errorf("%q: %s exists on the host", tc.script, tc.gone)
			}
		})
	}
	for _, script := range []string{
		"ln -s sub sl && echo x > sl/f.txt",
		"ln -s not-yet.txt dl && echo m > dl",
		"ln -s /usr/bin/env venvpy && ./venvpy true",
		"mkdir -p a/b && ln -s ../in.txt a/b/up",
	} {
		if code, out := runSh(t, p, ws, script); code != 0 {
			t.Errorf("%q: exit %d: %s", script, code, out)
		}
	}
}

// needPython skips a test whose syscall probes are python3 (ctypes).
func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 to make the calls")
	}
}

// checkResults compares a probe script's "name=result" lines with want.
func checkResults(t *testing.T, out string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (output %q)", k, got[k], v, out)
		}
	}
}

// runProbesAsync is runProbes for concurrent commands: the probe output,
// or an error.
func runProbesAsync(p *policy.Plan, dir string, probes ...string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	spec, err := Command(p, self, append([]string{"probe"}, probes...), []string{probeEnv + "=1"}, dir)
	if err != nil {
		return "", err
	}
	defer spec.Release()
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); r.Close(); done <- b }()
	proc, err := startSpecProcess(spec, []*os.File{null, w, w}, nil)
	w.Close()
	if err != nil {
		<-done
		return "", err
	}
	timer := time.AfterFunc(120*time.Second, func() { _ = syscall.Kill(-proc.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	st, err := proc.Wait()
	out := string(<-done)
	if err == nil && st.ExitCode() != 0 {
		err = fmt.Errorf("exit %d: %s", st.ExitCode(), out)
	}
	return out, err
}

// TestCommandDenyGlobConcurrentRename: two sandboxed commands (two
// supervisors) on one workspace under secrets/**: one creates d/f in a
// loop, the other renames d to secrets and back. Each check alone holds;
// interleaved, a creation checked as d/f landed in secrets/f (within 2 000
// tries, every run) until creations and renames took the cross-process
// creation lock. The fs helper's creations (an fs/writeFile racing a
// command) hold it too (TestRunDenyGlobConcurrentRename).
func TestCommandDenyGlobConcurrentRename(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	if err := os.Mkdir(filepath.Join(ws, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	p := denyPlan(t, ws)
	const n = "3000"
	var wg sync.WaitGroup
	var created, renamed string
	var errC, errR error
	wg.Add(2)
	go func() { defer wg.Done(); created, errC = runProbesAsync(p, ws, "loop-create:"+n) }()
	go func() { defer wg.Done(); renamed, errR = runProbesAsync(p, ws, "loop-rename:"+n) }()
	wg.Wait()
	if errC != nil || errR != nil {
		t.Fatalf("probes: %v, %v", errC, errR)
	}
	t.Logf("%s; %s", strings.TrimSpace(created), strings.TrimSpace(renamed))
	if !strings.Contains(renamed, "secrets/f seen 0") {
		t.Errorf("HOLE: a creation checked as d/f landed in secrets/f: %s", renamed)
	}
	if _, err := os.Lstat(filepath.Join(ws, "secrets", "f")); err == nil {
		t.Errorf("HOLE: WORK/secrets/f is on the host")
	}
	if strings.Contains(created, "made 0") || strings.Contains(renamed, "moved 0,") {
		t.Errorf("the loops did not race: %s; %s", created, renamed)
	}
}

// TestRunDenyGlobConcurrentRename: an fs call (the fs helper: check, then
// create by path, as fsys does) racing a command that renames d to secrets
// and back: the helper's calls hold the shared creation lock, the
// supervisor's rename the exclusive one.
func TestRunDenyGlobConcurrentRename(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	if err := os.Mkdir(filepath.Join(ws, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	p := denyPlan(t, ws)
	done := make(chan struct{})
	var renamed string
	var errR error
	go func() { defer close(done); renamed, errR = runProbesAsync(p, ws, "loop-rename:3000") }()
	calls, made := 0, 0
	arg := filepath.Join(ws, "secrets/**") + "|" + filepath.Join(ws, "d", "f")
loop:
	for {
		select {
		case <-done:
			break loop
		default:
		}
		calls++
		if r := runOp(t, p, "guarded-create", arg); r == "ok" || r == "ENOENT" {
			made++ // created (ENOENT: created, then moved before the remove)
		}
		if calls > 20000 {
			break
		}
	}
	<-done
	if errR != nil {
		t.Fatal(errR)
	}
	t.Logf("%d fs calls, %d created; %s", calls, made, strings.TrimSpace(renamed))
	if !strings.Contains(renamed, "secrets/f seen 0") {
		t.Errorf("HOLE: an fs call's creation checked as d/f landed in secrets/f: %s", renamed)
	}
	if made == 0 || strings.Contains(renamed, "moved 0,") {
		t.Errorf("the loops did not race: %d created; %s", made, renamed)
	}
}

// pyFIFOs opens FIFOs with no partner through the supervisor, each in a
// child: openat2 (done there with or without O_CREAT), O_CREAT through a
// /proc/self/fd link, and O_CREAT on the name, for writing and for
// reading. Each open must wait for its partner as the kernel's does (a
// reader for a writer: one that says nothing yet, or one that comes and
// goes without a word), while the supervisor goes on serving the
// command's other calls (files created meanwhile), and be answered with
// the close-on-exec flag asked for and without O_NONBLOCK (added by the
// supervisor, never asked for here). It prints how many did not.
const pyFIFOs = pyOpenat2 + `
import fcntl, select, signal, time
signal.alarm(90)
def via_proc(name, flags):
    p = os.open(name, os.O_PATH)
    return os.open("/proc/self/fd/%d" % p, flags | os.O_CREAT)
W, R = os.O_WRONLY, os.O_RDONLY
cases = [
    ("openat2-w", lambda n: openat2(n, W), W, b"x"),
    ("openat2-r", lambda n: openat2(n, R), R, b"x"),
    ("proc-w", lambda n: via_proc(n, W), W, b"x"),
    ("proc-r", lambda n: via_proc(n, R), R, b"x"),
    ("creat-w", lambda n: os.open(n, W | os.O_CREAT), W, b"x"),
    ("creat-r", lambda n: os.open(n, R | os.O_CREAT), R, b"x"),
    ("creat-r-gone", lambda n: os.open(n, R | os.O_CREAT), R, b""),
    ("inherit-w", lambda n: libc.open(n.encode(), W | os.O_CREAT, 0o644), W, b"x"),
]
bad = 0
def fail(msg):
    global bad
    bad += 1
    print(msg, flush=True)
def readall(fd):
    out = b""
    while True:
        d = os.read(fd, 100)
        if not d:
            return out
        out += d
for name, opener, mode, want in cases:
    os.mkfifo(name)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            fd = opener(name)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "open")
            # Python asks for O_CLOEXEC, libc.open and openat2 here do not.
            got = b"o"
            if name.startswith(("inherit", "openat2")) == bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC):
                got += b"C"
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK:
                got += b"N"
            os.write(w, got)
            if mode == W:
                os.write(fd, b"x")
            else:
                os.write(w, b"=" + os.read(fd, 1))
        except OSError as e:
            os.write(w, b"E" + str(e).encode())
        os._exit(0)
    os.close(w)
    # Wait until the child is in its open (held by the supervisor), or
    # past it (a failure).
    for i in range(2000):
        try:
            with open("/proc/%d/wchan" % pid) as f:
                if "seccomp" in f.read():
                    break
        except OSError:
            pass
        if select.select([r], [], [], 0.005)[0]:
            break
    for i in range(20):
        os.close(os.open("%s.%d" % (name, i), os.O_CREAT | os.O_WRONLY, 0o644))
    os.set_blocking(r, False)
    try:
        got = os.read(r, 100)
        fail("%s: opened with no partner: %r" % (name, got))
    except BlockingIOError:
        pass
    os.set_blocking(r, True)
    if mode == W:
        p = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
        got = os.read(r, 100)
        os.set_blocking(p, True)
        data = os.read(p, 1)
        os.close(p)
        if got != b"o" or data != want:
            fail("%s: got %r and %r, want o and %r" % (name, got, data, want))
    else:
        # A writer (no O_CREAT: the kernel opens it) that says nothing
        # yet: the open of the reader returns once it is there.
        p = os.open(name, os.O_WRONLY)
        if not want:
            os.close(p)
        got = os.read(r, 1)
        if want:
            os.write(p, want)
            os.close(p)
        got += readall(r)
        if got != b"o=" + want:
            fail("%s: got %r, want %r" % (name, got, b"o=" + want))
    os.close(r)
    os.waitpid(pid, 0)
print("failed=%d" % bad)
`

// TestCommandFIFONoPartner: a FIFO opened by the supervisor in a command's
// place waits for its partner without stalling the supervisor: before,
// openat2 or an O_CREAT open through /proc/self/fd of a FIFO with no
// reader blocked it, and every other supervised call of the command with
// it, for good. Then a reader's open returned at once, before any writer
// (its reads saw end of file until one came).
func TestCommandFIFONoPartner(t *testing.T) {
	runPyNoFailures(t, pyFIFOs)
}

// shWaitPending defines waitpending PID: wait until process PID waits in
// the supervisor, or give up (status 1) after 30 s. A supervised call made
// after it returns is served after PID's (the supervisor receives the
// notifications in order, one at a time).
const shWaitPending = `waitpending() { i=0; until grep -q seccomp /proc/$1/wchan 2>/dev/null; do i=$((i+1)); [ $i -lt 3000 ] || return 1; sleep 0.01; done; }
`

// TestCommandPendingOpenKeepsItsFIFO: a FIFO's writer waiting in the
// supervisor for a reader completes on the FIFO it found, as the kernel's
// open waits on the inode its walk found, whatever becomes of the name
// meanwhile (removed, replaced by a symlink or by a file): a reader
// through another link gets the bytes. The retry used to open the name
// again with the supervisor's O_NOFOLLOW and without O_CREAT: ENOENT, ELOOP,
// or the bytes written into the new file.
func TestCommandPendingOpenKeepsItsFIFO(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	script := shWaitPending + `echo f > file
for c in removed symlink file; do
	mkfifo p && ln p q || exit 1
	(echo $c > p) & w=$!
	waitpending $w || { echo "$c: the writer did not wait"; exit 1; }
	: > made.$c # supervised after the writer's open: that is pending now
	rm p
	case $c in symlink) ln -s file p;; file) echo other > p;; esac
	timeout 30 cat q > got.$c
	wait $w || echo "$c: the writer failed"
	rm -f p q
done
echo other > p; cat p`
	code, out := runSh(t, denyPlan(t, ws), ws, script)
	if code != 0 || strings.TrimSpace(out) != "other" {
		t.Errorf("exit %d: %s", code, out)
	}
	for _, c := range []string{"removed", "symlink", "file"} {
		assertFile(t, filepath.Join(ws, "got."+c), c+"\n")
	}
	assertFile(t, filepath.Join(ws, "file"), "f\n")
}

// TestCommandPendingWritersTogether: 50 writers of one FIFO wait in the
// supervisor for a reader; when one comes the kernel lets them all in at
// once, so the reader sees end of file only after the last one has
// written. They were opened and answered one by one: a writer could run,
// write and close before the next was opened, and the reader end early.
// (9 runs in 9 without the fix: 6 to 43 lines of 50.)
func TestCommandPendingWritersTogether(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	script := shWaitPending + `mkfifo p || exit 1
i=0; while [ $i -lt 50 ]; do (echo $i > p) & pids="$pids $!"; i=$((i+1)); done
for w in $pids; do waitpending $w || { echo "$w did not wait"; exit 1; }; done
: > made # supervised after every writer: all are waiting
cat p | wc -l
kill $pids 2>/dev/null # any left waiting (a reader that ended early)
wait`
	code, out := runSh(t, denyPlan(t, ws), ws, script)
	if code != 0 || strings.TrimSpace(out) != "50" {
		t.Errorf("exit %d: %s (want 50 lines)", code, out)
	}
}

// pyPendingWriters defines writers(name, n): a FIFO made at name and n
// threads opening it for writing through the supervisor (O_CREAT), with no
// reader; it returns once each waits in the supervisor or was answered
// (their results in res: 0 or the errno), and the supervisor has served
// a later call.
const pyPendingWriters = `
import errno, os, signal, threading
signal.alarm(100)
threading.stack_size(256 * 1024)
def waiting(t, what):
    try:
        with open("/proc/self/task/%d/wchan" % t.native_id) as f:
            return what in f.read()
    except OSError:
        return False
def writers(name, n):
    os.mkfifo(name)
    res = {}
    def w(i):
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT))
            res[i] = 0
        except OSError as e:
            res[i] = e.errno
    ts = [threading.Thread(target=w, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    while any(t.is_alive() and not waiting(t, "seccomp") for t in ts):
        os.sched_yield()
    os.close(os.open("sync", os.O_CREAT | os.O_WRONLY)) # served after them all
    return res, ts
`

// pyPendingBound has 1030 threads open one FIFO for writing with no
// reader, through the supervisor (O_CREAT): 1024 wait (maxPendingOpens),
// the others fail with ENFILE; a reader then lets every waiting one
// through. It prints how many did not.
const pyPendingBound = pyPendingWriters + `
res, ts = writers("p", 1030)
r = os.open("p", os.O_RDONLY | os.O_NONBLOCK)
for t in ts:
    t.join()
os.close(r)
refused = [i for i, e in res.items() if e == errno.ENFILE]
bad = 0
if len(refused) != 6:
    print("%d refused with ENFILE, want 6" % len(refused))
    bad += 1
others = [e for e in res.values() if e not in (0, errno.ENFILE)]
if others or len(res) != 1030:
    print("%d answers, failures other than ENFILE: %r" % (len(res), others[:5]))
    bad += 1
print("failed=%d" % bad)
`

// TestCommandPendingOpensBounded: the opens waiting in one supervisor are
// bounded (each holds one of its descriptors): past maxPendingOpens an
// open fails with ENFILE, never waits unsupervised, and those waiting
// still complete. Without the bound all 1030 waited (none refused).
func TestCommandPendingOpensBounded(t *testing.T) {
	needPendingNofile(t)
	runPyNoFailures(t, pyPendingBound)
}

// needPendingNofile skips a test that fills the pending opens to
// maxPendingOpens where the supervisor's RLIMIT_NOFILE (the init's: this
// process's hard limit, up to which Go raises the soft one) bounds them
// first (pendingRoom): the test's count of refusals would not hold.
func needPendingNofile(t *testing.T) {
	t.Helper()
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if need := uint64(maxPendingOpens + fdReserve + 64); rl.Max < need {
		t.Skipf("hard RLIMIT_NOFILE %d is below %d: the supervisor's limit, not maxPendingOpens, would bound the pending opens", rl.Max, need)
	}
}

// pyPendingRlimit waits for the supervisor's (the init's, PID 1)
// RLIMIT_NOFILE to be 300, soft and hard (set from the host: the command
// may not, seccompProgram), then has 300
// threads open one FIFO for writing with no reader through the supervisor:
// fewer than 300 may wait (each holds a descriptor of the supervisor's),
// the others fail with ENFILE, and the supervisor keeps serving the
// tree's other calls (a creation, a rename) before a reader lets every
// waiting one through.
const pyPendingRlimit = pyPendingWriters + `
import resource, time
while resource.prlimit(1, resource.RLIMIT_NOFILE)[0] != 300:
    time.sleep(0.001)
res, ts = writers("p", 300)
bad = 0
try:
    os.mkdir("d1")
    os.rename("d1", "d2")
    os.close(os.open("d2/f", os.O_CREAT | os.O_WRONLY))
except OSError as e:
    print("with the pending opens full: %s" % e)
    bad += 1
r = os.open("p", os.O_RDONLY | os.O_NONBLOCK)
for t in ts:
    t.join()
os.close(r)
refused = [i for i, e in res.items() if e == errno.ENFILE]
waited = [i for i, e in res.items() if e == 0]
if not refused or not waited:
    print("%d refused with ENFILE, %d waited: want some of each" % (len(refused), len(waited)))
    bad += 1
others = [errno.errorcode.get(e, e) for e in res.values() if e not in (0, errno.ENFILE)]
if others or len(res) != 300:
    print("%d answers, failures other than ENFILE: %r" % (len(res), others[:5]))
    bad += 1
print("failed=%d" % bad)
`

// TestCommandPendingOpensRlimit: the pending opens are bounded by the
// supervisor's RLIMIT_NOFILE too, as it is when they come (lowered here
// from the host, as a deployment may start us). Bounded by the count
// alone, the supervisor ran out of descriptors at about 290 waiting:
// every later open, and the command's other supervised calls, failed
// (EACCES, EMFILE).
func TestCommandPendingOpensRlimit(t *testing.T) {
	runPyHook(t, pyPendingRlimit, func(_ string, init int, _ <-chan struct{}) {
		if err := unix.Prlimit(init, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 300, Max: 300}, nil); err != nil {
			t.Errorf("prlimit of the init: %v", err)
		}
	})
}

// pyRlimitZero marks ok.txt ("1": ready; "2": done) for the host side,
// which sets the supervisor's (the init's) soft RLIMIT_NOFILE to 0 at the
// first mark and restores it at the second; in between the command makes
// a supervised creation (which may fail: the supervisor has no descriptor
// to serve it with), after it another, which must succeed.
const pyRlimitZero = `
import os, resource, time
def mark(c):
    fd = os.open("ok.txt", os.O_WRONLY | os.O_APPEND)
    os.write(fd, c.encode())
    os.close(fd)
def soft():
    return resource.prlimit(1, resource.RLIMIT_NOFILE)[0]
bad = 0
mark("1")
while soft() != 0:
    time.sleep(0.001)
try:
    os.close(os.open("x1", os.O_CREAT | os.O_WRONLY))
except OSError as e:
    pass
mark("2")
while soft() == 0:
    time.sleep(0.001)
try:
    os.close(os.open("x2", os.O_CREAT | os.O_WRONLY))
except OSError as e:
    print("after the limit came back: %s" % e)
    bad += 1
print("failed=%d" % bad)
`

// TestCommandRlimitZeroKeepsServing: a soft RLIMIT_NOFILE of 0 on the
// supervisor (a deployment's, or one a command set when it still could)
// does not end its serving. It waited with poll, which fails with EINVAL
// when its descriptor count passes the limit: serve returned, and every
// later supervised call failed with ENOSYS.
func TestCommandRlimitZeroKeepsServing(t *testing.T) {
	runPyHook(t, pyRlimitZero, func(ws string, init int, done <-chan struct{}) {
		okTxt := filepath.Join(ws, "ok.txt")
		if !waitContent(okTxt, "ok1", done) {
			return
		}
		var old unix.Rlimit
		if err := unix.Prlimit(init, unix.RLIMIT_NOFILE, nil, &old); err != nil {
			t.Errorf("prlimit of the init: %v", err)
			return
		}
		if err := unix.Prlimit(init, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 0, Max: old.Max}, nil); err != nil {
			t.Errorf("prlimit of the init: %v", err)
			return
		}
		waitContent(okTxt, "ok12", done)
		if err := unix.Prlimit(init, unix.RLIMIT_NOFILE, &old, nil); err != nil {
			t.Errorf("prlimit of the init: %v", err)
		}
	})
}

// waitContent waits until the file at name holds want, or done is closed
// (then false).
func waitContent(name, want string, done <-chan struct{}) bool {
	for {
		if b, _ := os.ReadFile(name); string(b) == want {
			return true
		}
		select {
		case <-done:
			return false
		case <-time.After(time.Millisecond):
		}
	}
}

// pyNoPrlimitOthers: the command may not set another process's limits
// (the init's here), may read them, and still sets its own.
const pyNoPrlimitOthers = `
import errno, resource
bad = 0
try:
    resource.prlimit(1, resource.RLIMIT_NOFILE, (64, 64))
    print("set the limit of PID 1")
    bad += 1
except OSError as e:
    if e.errno != errno.EPERM:
        print("prlimit of PID 1: %s, want EPERM" % e)
        bad += 1
try:
    resource.prlimit(1, resource.RLIMIT_NOFILE)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] != soft - 1:
        print("setrlimit of itself did not take")
        bad += 1
except OSError as e:
    print("reading the init limit or setting its own: %s" % e)
    bad += 1
print("failed=%d" % bad)
`

// TestCommandNoPrlimitOthers: seccompProgram denies prlimit64 with a PID
// and a new limit (EPERM), so a command cannot lower its supervisor's
// RLIMIT_NOFILE; its own limits (pid 0) and reads stay allowed.
func TestCommandNoPrlimitOthers(t *testing.T) {
	runPyNoFailures(t, pyNoPrlimitOthers)
}

// pyPendingFullReader fills the pending opens (1024 writers of FIFO "a"
// with no reader), has a thread wait in the kernel (unsupervised: no
// O_CREAT) to open FIFO "b" for writing, then opens "b" for reading
// through the supervisor (O_CREAT): it must fail with ENFILE without any
// open of "b" done, so the writer still waits (and later gets its reader)
// rather than being let in to a reader closed at once (EPIPE).
const pyPendingFullReader = pyPendingWriters + `
os.mkfifo("b")
res, ts = writers("a", 1024)
go = threading.Event()
bres = []
def bw():
    fd = os.open("b", os.O_WRONLY)
    go.wait()
    try:
        os.write(fd, b"x")
        bres.append(0)
    except OSError as e:
        bres.append(e.errno)
    os.close(fd)
bt = threading.Thread(target=bw)
bt.start()
while bt.is_alive() and not waiting(bt, "partner"):
    os.sched_yield()
bad = 0
try:
    os.close(os.open("b", os.O_RDONLY | os.O_CREAT))
    print("reader of b opened with no room")
    bad += 1
except OSError as e:
    if e.errno != errno.ENFILE:
        print("reader of b: errno %d, want ENFILE" % e.errno)
        bad += 1
go.set()
while bt.is_alive() and not waiting(bt, "partner"):
    os.sched_yield()
if bt.is_alive():
    r = os.open("b", os.O_RDONLY | os.O_NONBLOCK)
    bt.join()
    os.close(r)
if bres != [0]:
    print("writer of b: %r, want [0] (let in to a reader closed at once)" % bres)
    bad += 1
r = os.open("a", os.O_RDONLY | os.O_NONBLOCK)
for t in ts:
    t.join()
os.close(r)
if len(res) != 1024 or any(res.values()):
    print("writers of a: %d answers, failures %r" % (len(res), [e for e in res.values() if e][:5]))
    bad += 1
print("failed=%d" % bad)
`

// TestCommandPendingFullReaderOpensNothing: with no room for another
// pending open, a FIFO reader's open is refused (ENFILE) before the
// supervisor opens anything: its non-blocking open would have let a
// writer waiting in the kernel in, then the reader closed, and the
// writer's write failed with EPIPE.
func TestCommandPendingFullReaderOpensNothing(t *testing.T) {
	needPendingNofile(t)
	runPyNoFailures(t, pyPendingFullReader)
}

// TestCommandCreateThreadsUnderSignals: every listener ioctl that can
// fail with EINTR is retried, and none is taken for a gone notification.
// With four threads creating at once the supervisor's ID_VALID and SEND
// wait for the listener's lock behind the threads' new notifications,
// where a signal (an orphan's SIGCHLD) makes them fail with EINTR. A SEND
// that failed so left its thread waiting for good; an ID_VALID answered
// ENOENT to a live call.
func TestCommandCreateThreadsUnderSignals(t *testing.T) {
	runPyNoFailures(t, pySignalled(4, 750))
}

// pyLeaseHolder takes a read lease on argv[1] and lets it go 0.2 s after
// the kernel signals a break (someone opened the file for writing).
const pyLeaseHolder = `
import fcntl, os, signal, sys, time
F_SETLEASE = 1024
fd = os.open(sys.argv[1], os.O_RDONLY)
def brk(sig, frm):
    time.sleep(0.2)
    fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
    print("released", flush=True)
    sys.exit(0)
signal.signal(signal.SIGIO, brk)
fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
print("held", flush=True)
while True:
    signal.pause()
`

// A supervised open (here the shell's O_CREAT|O_TRUNC of an existing file)
// of a file under a lease waits for the lease's break, as the kernel makes
// a blocking open wait. The supervisor opens without blocking (openNoWait),
// which a lease answers with EAGAIN at once: the command's open used to
// fail with "Resource temporarily unavailable".
func TestCommandOpenWaitsForLeaseBreak(t *testing.T) {
	needSandbox(t)
	needPython(t)
	ws := denyFixture(t)
	holder := exec.Command("/usr/bin/python3", "-c", pyLeaseHolder, filepath.Join(ws, "in.txt"))
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		holder.Process.Kill()
		holder.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Skipf("no lease here (%q, %v)", line, err)
	}
	code, got := runSh(t, denyPlan(t, ws), ws, "echo new > in.txt && cat in.txt")
	if code != 0 || strings.TrimSpace(got) != "new" {
		t.Fatalf("exit %d: %s", code, got)
	}
}

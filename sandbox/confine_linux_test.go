package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/internal/test/asnobody"
	"github.com/execgo/exec-server/internal/test/tcptest"
	"github.com/execgo/exec-server/internal/test/testbin"
	"github.com/execgo/exec-server/sandbox/policy"
)

// The test binary is also the sandbox helper (MaybeMain) and, with
// probeEnv set, a probe command run inside sandboxes: each argument
// "op:arg" prints "op:arg=RESULT" (ok, an errno name, or a value).
const probeEnv = "SANDBOX_TEST_PROBE"

// A timer started by a package's init makes the Go runtime create its
// poller's descriptors before MaybeMain: the helper must keep them while it
// closes leaked ones (closing them killed it with "netpoll failed").
var _ = time.AfterFunc(time.Hour, func() {})

func TestMain(m *testing.M) {
	if os.Getenv(noReexecEnv) != "1" {
		MaybeMain()
	}
	if os.Getenv(probeEnv) == "1" {
		for _, a := range os.Args[1:] {
			op, arg, _ := strings.Cut(a, ":")
			fmt.Printf("%s=%s\n", a, probe(op, arg))
		}
		os.Exit(0)
	}
	testbin.Run(m)
}

func errnoOf(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// probe runs one check (in the sandboxed command or in a Run op).
func probe(op, arg string) string {
	switch op {
	case "write":
		return errnoOf(os.WriteFile(arg, []byte("x"), 0o644))
	case "read":
		_, err := os.ReadFile(arg)
		return errnoOf(err)
	case "remove":
		return errnoOf(os.Remove(arg))
	case "mkdir":
		return errnoOf(os.Mkdir(arg, 0o755))
	case "chmod":
		return errnoOf(os.Chmod(arg, 0o600))
	case "mknod":
		return errnoOf(unix.Mknod(arg, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
	case "mknod-thread": // from another OS thread than the locked one
		res := make(chan string)
		go func() {
			runtime.LockOSThread() // a fresh thread: locked threads are not reused
			res <- probe("mknod", arg)
		}()
		return <-res
	case "socket":
		dom, typ, proto := unix.AF_INET, unix.SOCK_STREAM, 0
		switch arg {
		case "udp":
			typ = unix.SOCK_DGRAM
		case "mptcp":
			proto = 262
		case "unix":
			dom = unix.AF_UNIX
		}
		fd, err := unix.Socket(dom, typ, proto)
		if err == nil {
			unix.Close(fd)
		}
		return errnoOf(err)
	case "connect-unix": // connect, and send a byte
		c, err := net.DialTimeout("unix", arg, 2*time.Second)
		if err == nil {
			_, err = c.Write([]byte("x"))
			c.Close()
		}
		return errnoOf(err)
	case "connect":
		c, err := net.DialTimeout("tcp", arg, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return errnoOf(err)
	case "status": // the lines of /proc/self/status named by arg (comma list)
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return errnoOf(err)
		}
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(l, ":")
			for _, want := range strings.Split(arg, ",") {
				if k == want {
					out = append(out, k+"="+strings.TrimSpace(v))
				}
			}
		}
		return strings.Join(out, ";")
	case "openrw": // open for writing without creating (e.g. /proc/1/mem)
		f, err := os.OpenFile(arg, os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		return errnoOf(err)
	case "ppid":
		return fmt.Sprint(os.Getppid())
	case "fds": // the open descriptors whose target contains arg
		ents, _ := os.ReadDir("/proc/self/fd")
		var hits []string
		for _, e := range ents {
			if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(l, arg) {
				hits = append(hits, e.Name()+"->"+l)
			}
		}
		return strings.Join(hits, ";")
	case "userns":
		_, err := syscall.ForkExec("/bin/true", nil, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}})
		return errnoOf(err)
	case "mountro": // "ro" when the topmost mount at arg is read-only
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return errnoOf(err)
		}
		res := "not a mount point"
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 5 && f[4] == arg {
				res = "rw"
				if strings.HasPrefix(f[5], "ro") {
					res = "ro"
				}
			}
		}
		return res
	case "env":
		return strings.Join(os.Environ(), ";")
	case "self-serve": // listen on the pathname socket arg, connect to it
		ln, err := net.Listen("unix", arg)
		if err != nil {
			return "listen " + errnoOf(err)
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
			}
		}()
		c, err := net.DialTimeout("unix", arg, 5*time.Second)
		if err == nil {
			c.Close()
		}
		return errnoOf(err)
	case "dgram-unix": // a datagram to the pathname socket arg
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "socket " + errnoOf(err)
		}
		defer unix.Close(fd)
		return errnoOf(unix.Sendto(fd, []byte("x"), 0, &unix.SockaddrUnix{Name: arg}))
	case "dgram-pair": // the same from a datagram socketpair
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "socketpair " + errnoOf(err)
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		return errnoOf(unix.Sendmsg(fds[0], []byte("x"), nil, &unix.SockaddrUnix{Name: arg}, 0))
	case "seqpacket-name": // sendmsg with a destination on a seqpacket pair
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "socketpair " + errnoOf(err)
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		return errnoOf(unix.Sendmsg(fds[0], []byte("x"), nil, &unix.SockaddrUnix{Name: arg}, 0))
	case "loop-create": // arg times: create d/f exclusively, remove it
		n, _ := strconv.Atoi(arg)
		made := 0
		errs := map[string]int{}
		for i := 0; i < n; i++ {
			fd, err := unix.Open("d/f", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err != nil {
				errs[errnoOf(err)]++
				if err == unix.EEXIST { // left by a rename back: again
					_ = unix.Unlink("d/f")
				}
			}
			if err == nil {
				made++
				unix.Close(fd)
				_ = unix.Unlink("d/f")
			}
		}
		return fmt.Sprintf("made %d (failures %v)", made, errs)
	case "guarded-create": // "GLOB|PATH": as fsys: check, create, remove
		glob, path, _ := strings.Cut(arg, "|")
		parent, err := filepath.EvalSymlinks(filepath.Dir(path))
		if err != nil {
			return errnoOf(err)
		}
		if (&policy.Plan{DenyGlobs: []string{glob}}).DeniedByGlob(filepath.Join(parent, filepath.Base(path))) {
			return "EACCES"
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, os.ErrExist) {
			os.Remove(path) // left by a rename back: again
		}
		if err != nil {
			return errnoOf(err)
		}
		f.Close()
		return errnoOf(os.Remove(path))
	case "loop-rename": // arg times: d -> secrets, look for secrets/f, back
		n, _ := strconv.Atoi(arg)
		moved, seen := 0, 0
		errs := map[string]int{}
		for i := 0; i < n; i++ {
			if err := unix.Rename("d", "secrets"); err != nil {
				errs[errnoOf(err)]++
				continue
			}
			moved++
			var st unix.Stat_t
			if unix.Lstat("secrets/f", &st) == nil {
				seen++
			}
			_ = unix.Rename("secrets", "d")
		}
		return fmt.Sprintf("moved %d, secrets/f seen %d (failures %v)", moved, seen, errs)
	case "forkloop": // start /bin/sleep until refused (at most arg)
		n, _ := strconv.Atoi(arg)
		started := 0
		var last error
		for ; started < n; started++ {
			if _, last = syscall.ForkExec("/bin/sleep", []string{"sleep", "60"}, &syscall.ProcAttr{}); last != nil {
				break
			}
		}
		return fmt.Sprintf("%d %s", started, errnoOf(last))
	case "rlimit-core": // the core limits, and whether they can be raised
		var r unix.Rlimit
		_ = unix.Getrlimit(unix.RLIMIT_CORE, &r)
		err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY})
		return fmt.Sprintf("%d %d raise %s", r.Cur, r.Max, errnoOf(err))
	case "caps-all": // tasks of /proc/PID (arg, or self) with a capability
		pid := arg
		if pid == "" {
			pid = "self"
		}
		ents, err := os.ReadDir("/proc/" + pid + "/task")
		if err != nil {
			return errnoOf(err)
		}
		var bad []string
		for _, e := range ents {
			b, err := os.ReadFile("/proc/" + pid + "/task/" + e.Name() + "/status")
			if err != nil {
				continue // exited meanwhile
			}
			for _, l := range strings.Split(string(b), "\n") {
				k, v, _ := strings.Cut(l, ":")
				if (k == "CapEff" || k == "CapPrm") && strings.TrimSpace(v) != "0000000000000000" {
					bad = append(bad, e.Name()+" "+k+"="+strings.TrimSpace(v))
				}
			}
		}
		return fmt.Sprintf("%d tasks, with capabilities: %v", len(ents), bad)
	case "name_to_handle_at": // denied by seccomp: EPERM, not EFAULT
		path, _ := unix.BytePtrFromString("/")
		_, _, e := unix.Syscall6(unix.SYS_NAME_TO_HANDLE_AT, atFDCWD, uintptr(unsafe.Pointer(path)), 0, 0, 0, 0)
		return errnoOf(errnoIf(e))
	case "setid": // every way to make a set-user/group-ID file in dir arg
		return setIDProbe(arg)
	case "mountopts": // the per-mount options of the topmost mount at arg
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return errnoOf(err)
		}
		res := "not a mount point"
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 5 && f[4] == arg {
				res = f[5]
			}
		}
		return res
	}
	return "unknown op " + op
}

type fsReq struct {
	Op, Arg string
}

func init() {
	RegisterOp("test.probe", func(req []byte) ([]byte, *os.File) {
		var r fsReq
		if err := json.Unmarshal(req, &r); err != nil {
			return []byte(err.Error()), nil
		}
		if r.Op == "panic" {
			panic("on purpose")
		}
		if r.Op == "open" {
			f, err := os.Open(r.Arg)
			if err != nil {
				return []byte(errnoOf(err)), nil
			}
			return []byte("ok"), f
		}
		return []byte(probe(r.Op, r.Arg)), nil
	})
}

func needSandbox(t *testing.T) {
	t.Helper()
	if s := Probe(); !s.Available {
		if os.Getenv("SANDBOX_TEST_NONROOT") == "1" {
			t.Skip("sandbox not available: " + s.Missing)
		}
		t.Fatalf("sandbox not available: %s", s.Missing)
	}
}

// runOp runs the test.probe op confined by p.
func runOp(t *testing.T, p *policy.Plan, op, arg string) string {
	t.Helper()
	req, _ := json.Marshal(fsReq{op, arg})
	reply, f, err := Run(context.Background(), p, "test.probe", req)
	if err != nil {
		t.Fatalf("Run %s %s: %v", op, arg, err)
	}
	if f != nil {
		f.Close()
	}
	return string(reply)
}

// fixture makes ws (writable) and out (a sibling, outside every root)
// in a fresh temporary directory, with out/secret.txt.
func fixture(t *testing.T) (ws, out string) {
	t.Helper()
	dir := t.TempDir()
	ws, out = filepath.Join(dir, "ws"), filepath.Join(dir, "out")
	for _, d := range []string{ws, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(out, "secret.txt"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws, out
}

func workspaceWrite(ws string) *policy.Plan {
	return &policy.Plan{Root: policy.AccessRead, Mounts: []policy.Mount{{Path: ws, Access: policy.AccessWrite, Dir: true}}}
}

func TestRunWritableRoot(t *testing.T) {
	needSandbox(t)
	ws, out := fixture(t)
	p := workspaceWrite(ws)
	tests := []struct{ op, arg, want string }{
		{"write", filepath.Join(ws, "in.txt"), "ok"},
		{"mkdir", filepath.Join(ws, "sub"), "ok"},
		{"write", filepath.Join(out, "x.txt"), "EROFS"},
		{"write", filepath.Join(out, "secret.txt"), "EROFS"},
		{"chmod", filepath.Join(out, "secret.txt"), "EROFS"},
		{"mknod", filepath.Join(ws, "dev"), "EPERM"},
		{"mknod-thread", filepath.Join(ws, "dev2"), "EPERM"},
		{"read", filepath.Join(out, "secret.txt"), "ok"},
		{"write", "/dev/null", "ok"},
		{"socket", "tcp", "EPERM"},
		{"socket", "unix", "ok"},
		// Not written to: without its own UTS or network namespace, a
		// failure would change the host.
		{"mountro", "/proc/sys", "ro"},
	}
	if _, err := os.Stat("/proc/sysrq-trigger"); err == nil {
		tests = append(tests, struct{ op, arg, want string }{"mountro", "/proc/sysrq-trigger", "ro"})
	}
	for _, tc := range tests {
		if got := runOp(t, p, tc.op, tc.arg); got != tc.want {
			t.Errorf("%s %s = %s, want %s", tc.op, tc.arg, got, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "in.txt")); err != nil {
		t.Errorf("the write inside did not land: %v", err)
	}
	assertTree(t, out, "secret.txt")
}

// assertTree fails unless dir holds exactly names.
func assertTree(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}

func TestRunProtectedAndDenied(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("cfg"), 0o644)
	os.WriteFile(filepath.Join(ws, "denied.txt"), []byte("no"), 0o644)
	os.MkdirAll(filepath.Join(ws, "denydir"), 0o755)
	os.WriteFile(filepath.Join(ws, "denydir", "x.txt"), []byte("no"), 0o644)
	os.Mkdir(filepath.Join(ws, "decoy"), 0o755)
	os.Symlink("decoy", filepath.Join(ws, ".agents"))
	p := workspaceWrite(ws)
	p.Mounts = append(p.Mounts,
		policy.Mount{Path: filepath.Join(ws, ".agents"), Access: policy.AccessRead, Protected: true},
		policy.Mount{Path: filepath.Join(ws, "decoy"), Access: policy.AccessRead, Protected: true, Dir: true}, // a protected link's target (as Resolve does)
		policy.Mount{Path: filepath.Join(ws, ".codex"), Access: policy.AccessRead, Protected: true, Missing: true, Dir: true},
		policy.Mount{Path: filepath.Join(ws, ".git"), Access: policy.AccessRead, Protected: true, Dir: true},
		policy.Mount{Path: filepath.Join(ws, "denied.txt"), Access: policy.AccessNone},
		policy.Mount{Path: filepath.Join(ws, "denydir"), Access: policy.AccessNone, Dir: true},
	)
	tests := []struct{ op, arg, want string }{
		{"write", filepath.Join(ws, ".git", "config"), "EROFS"},
		{"mkdir", filepath.Join(ws, ".git", "hooks"), "EROFS"},
		{"read", filepath.Join(ws, ".git", "config"), "ok"},
		{"mkdir", filepath.Join(ws, ".codex", "x"), "EROFS"},
		{"write", filepath.Join(ws, ".codex", "config.toml"), "EROFS"},
		{"write", filepath.Join(ws, ".agents", "x"), "EROFS"}, // through the link, to its protected target
		{"remove", filepath.Join(ws, ".agents"), "EBUSY"},     // the link itself is a read-only mount
		{"read", filepath.Join(ws, "denied.txt"), "EACCES"},
		{"read", filepath.Join(ws, "denydir", "x.txt"), "EACCES"},
		{"write", filepath.Join(ws, "denydir", "new.txt"), "EACCES"},
		{"write", filepath.Join(ws, "ok.txt"), "ok"},
	}
	for _, tc := range tests {
		if got := runOp(t, p, tc.op, tc.arg); got != tc.want {
			t.Errorf("%s %s = %s, want %s", tc.op, tc.arg, got, tc.want)
		}
	}
	// The mount point of the missing .codex is gone once Run returned and
	// the helper is reaped.
	waitGone(t, filepath.Join(ws, ".codex"))
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(b) != "cfg" {
		t.Errorf(".git/config changed: %q", b)
	}
	assertTree(t, filepath.Join(ws, "decoy"))
}

// waitGone waits (the helper is reaped in the background) until path is
// no longer on the host.
func waitGone(t *testing.T, path string) {
	t.Helper()
	closeIdle() // a warm helper keeps its mount points
	for i := 0; ; i++ {
		_, err := os.Lstat(path)
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if i == 200 {
			t.Fatalf("%s left on the host (%v)", path, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunRestrictedRead(t *testing.T) {
	needSandbox(t)
	ws, out := fixture(t)
	os.WriteFile(filepath.Join(ws, "in.txt"), []byte("in"), 0o644)
	os.Symlink(out, filepath.Join(ws, "linkdir"))
	p := &policy.Plan{Root: policy.AccessNone, Mounts: []policy.Mount{{Path: ws, Access: policy.AccessRead, Dir: true}}}
	tests := []struct{ op, arg, want string }{
		{"read", filepath.Join(ws, "in.txt"), "ok"},
		{"read", filepath.Join(out, "secret.txt"), "ENOENT"},
		{"read", filepath.Join(ws, "linkdir", "secret.txt"), "ENOENT"},
		{"write", filepath.Join(ws, "new.txt"), "EROFS"},
		{"read", "/etc/passwd", "ok"}, // the platform minimum
	}
	for _, tc := range tests {
		if got := runOp(t, p, tc.op, tc.arg); got != tc.want {
			t.Errorf("%s %s = %s, want %s", tc.op, tc.arg, got, tc.want)
		}
	}
	assertTree(t, ws, "in.txt", "linkdir")
}

func TestRunReturnsFile(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	os.WriteFile(filepath.Join(ws, "in.txt"), []byte("content"), 0o644)
	req, _ := json.Marshal(fsReq{"open", filepath.Join(ws, "in.txt")})
	reply, f, err := Run(context.Background(), workspaceWrite(ws), "test.probe", req)
	if err != nil || string(reply) != "ok" || f == nil {
		t.Fatalf("Run = %q, %v, %v", reply, f, err)
	}
	defer f.Close()
	if b, _ := io.ReadAll(f); string(b) != "content" {
		t.Errorf("read %q through the returned file", b)
	}
}

func TestRunFailures(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	_, _, err := Run(context.Background(), workspaceWrite(ws), "no.such.op", nil)
	if err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Errorf("unknown op: %v", err)
	}
	bad := &policy.Plan{Root: policy.AccessRead, Mounts: []policy.Mount{{Path: "relative/path", Access: policy.AccessWrite}}}
	_, _, err = Run(context.Background(), bad, "test.probe", []byte(`{"Op":"pid"}`))
	if err == nil || !strings.Contains(err.Error(), "mount relative/path") {
		t.Errorf("bad plan: %v", err)
	}
	_, _, err = Run(context.Background(), workspaceWrite(ws), "test.probe", []byte(`{"Op":"panic"}`))
	if err == nil || !strings.Contains(err.Error(), "panicked: on purpose") {
		t.Errorf("panicking op: %v", err)
	}
	if got := runOp(t, workspaceWrite(ws), "write", filepath.Join(ws, "after.txt")); got != "ok" {
		t.Errorf("after a panic: %s", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err = Run(ctx, workspaceWrite(ws), "test.probe", []byte(`{"Op":"pid"}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v", err)
	}
}

func TestProbeSimulate(t *testing.T) {
	for _, f := range []string{"userns", "mountns", "landlock", "seccomp"} {
		t.Run(f, func(t *testing.T) {
			t.Setenv(SimulateEnv, f)
			s := Probe()
			if f == "userns" && os.Getuid() == 0 {
				if !s.Available || s.UserNS {
					t.Fatalf("root does not need a user namespace: %+v", s)
				}
				return
			}
			if s.Available || !strings.Contains(s.Missing, SimulateEnv) {
				t.Fatalf("Probe with %s=%s: %+v", SimulateEnv, f, s)
			}
			_, _, err := Run(context.Background(), (&policy.Plan{Root: policy.AccessRead}), "test.probe", nil)
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("Run: %v", err)
			}
			if _, err := Command((&policy.Plan{Root: policy.AccessRead}), "/bin/true", []string{"true"}, nil, "/"); !errors.Is(err, ErrUnavailable) {
				t.Errorf("Command: %v", err)
			}
		})
	}
	if s := Probe(); s.Available && (s.LandlockABI == 0 || !s.Seccomp) {
		t.Errorf("available without its layers: %+v", s)
	}
}

// startSpec starts spec as the process package does (directly), with
// files as fds 0, 1, 2 and extra after them, and waits for it.
func startSpec(t *testing.T, spec *Spec, files []*os.File, sys *syscall.SysProcAttr) int {
	t.Helper()
	defer spec.Release()
	proc, err := startSpecProcess(spec, files, sys)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	st, err := proc.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return st.ExitCode()
}

// startSpecProcess starts spec with files; sys (nil: a new process group)
// gets the spec's namespaces and id maps, and SIGKILL when the test dies.
// The caller waits for it and releases spec.
func startSpecProcess(spec *Spec, files []*os.File, sys *syscall.SysProcAttr) (*os.Process, error) {
	if sys == nil {
		sys = &syscall.SysProcAttr{Setpgid: true}
	}
	sys.Cloneflags = spec.Cloneflags
	sys.UidMappings, sys.GidMappings = sysMaps(spec.UidMappings), sysMaps(spec.GidMappings)
	sys.Pdeathsig = syscall.SIGKILL
	return os.StartProcess(spec.Path, spec.Argv, &os.ProcAttr{Env: spec.Env, Files: files, Sys: sys})
}

// runSpecOK runs spec with files to its end and releases it; it fails tb
// unless the command exits 0 (benchmarks).
func runSpecOK(tb testing.TB, spec *Spec, files []*os.File) {
	tb.Helper()
	defer spec.Release()
	proc, err := startSpecProcess(spec, files, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if st, err := proc.Wait(); err != nil || st.ExitCode() != 0 {
		tb.Fatal(st, err)
	}
}

// runProbes runs the test binary as a probe command under p in dir and
// returns its results by probe.
func runProbes(t *testing.T, p *policy.Plan, dir string, probes ...string) map[string]string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := Command(p, self, append([]string{"probe"}, probes...), []string{probeEnv + "=1", "ONLY=this"}, dir)
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	if strings.Contains(strings.Join(spec.Env, " "), "plan") {
		t.Errorf("the plan travels in the environment: %v", spec.Env)
	}
	r, w, _ := os.Pipe()
	leak, err := os.Open(filepath.Join(dir)) // a descriptor the command must not get
	if err != nil {
		t.Fatal(err)
	}
	defer leak.Close()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	code := startSpec(t, spec, []*os.File{null, w, w, leak}, nil)
	w.Close()
	out := <-done
	if code != 0 {
		t.Fatalf("probe command exited %d: %s", code, out)
	}
	res := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		res[k] = v
	}
	return res
}

func TestCommandConfined(t *testing.T) {
	needSandbox(t)
	ws, out := fixture(t)
	p := workspaceWrite(ws)
	p.Mounts = append(p.Mounts, policy.Mount{Path: filepath.Join(ws, ".git"), Access: policy.AccessRead, Protected: true, Missing: true, Dir: true})
	want := map[string]string{
		"write:" + filepath.Join(ws, "in.txt"):      "ok",
		"write:" + filepath.Join(out, "x.txt"):      "EROFS",
		"chmod:" + filepath.Join(out, "secret.txt"): "EROFS",
		"mkdir:" + filepath.Join(ws, ".git"):        "EEXIST",
		"write:" + filepath.Join(ws, ".git", "x"):   "EROFS",
		"mknod:" + filepath.Join(ws, "dev"):         "EPERM", // seccomp, before Landlock and the missing CAP_MKNOD
		"ppid:":                                     "1",
		"openrw:/proc/1/mem":                        "EACCES", // the init's other threads keep capabilities
		"fds:" + ws:                                 "",
		"socket:tcp":                                "EPERM",
		"socket:udp":                                "EPERM",
		"socket:mptcp":                              "EPERM",
		"socket:unix":                               "ok",
		"userns:":                                   "EPERM",
		"name_to_handle_at:":                        "EPERM",
		"write:/proc/sys/kernel/hostname":           "EROFS", // its own UTS namespace: harmless if it failed
		"env:":                                      probeEnv + "=1;ONLY=this",
		"status:CapInh,CapPrm,CapEff,CapBnd,CapAmb,NoNewPrivs,Seccomp": "CapInh=0000000000000000;CapPrm=0000000000000000;CapEff=0000000000000000;CapBnd=0000000000000000;CapAmb=0000000000000000;NoNewPrivs=1;Seccomp=2",
	}
	var probes []string
	for k := range want {
		probes = append(probes, k)
	}
	got := runProbes(t, p, ws, probes...)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	waitGone(t, filepath.Join(ws, ".git"))
	assertTree(t, out, "secret.txt")
	assertTree(t, ws, "in.txt")
}

func TestCommandNetworkEnabled(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	ln := tcptest.Serve(t, "tcp", "127.0.0.1:0", tcptest.Close)
	p := workspaceWrite(ws)
	p.Network = policy.NetworkEnabled
	got := runProbes(t, p, ws, "connect:"+ln.Addr().String(), "socket:udp")
	if got["connect:"+ln.Addr().String()] != "ok" || got["socket:udp"] != "ok" {
		t.Errorf("network enabled: %v", got)
	}
	p.Network = policy.NetworkRestricted
	if got := runProbes(t, p, ws, "connect:"+ln.Addr().String()); got["connect:"+ln.Addr().String()] == "ok" {
		t.Errorf("network restricted: connected")
	}
	// An abstract unix socket of the host (a daemon's): the same network
	// namespace, but outside the Landlock domain (scoped from ABI 6).
	if landlockABI() >= 6 {
		name := fmt.Sprintf("@exec-server-sandbox-test-%d", os.Getpid())
		ul, err := net.Listen("unix", name)
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		p.Network = policy.NetworkEnabled
		if got := runProbes(t, p, ws, "connect-unix:"+name); got["connect-unix:"+name] != "EPERM" {
			t.Errorf("abstract unix socket of the host: %v", got)
		}
	}
}

func TestCommandFreshProc(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	spec, err := Command(workspaceWrite(ws), "/bin/sh", []string{"sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '; echo; ls /proc | grep -c '^[0-9]'"}, nil, ws)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	r, w, _ := os.Pipe()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	done := make(chan struct{})
	go func() { io.Copy(&buf, r); close(done) }()
	code := startSpec(t, spec, []*os.File{null, w, w}, nil)
	w.Close()
	<-done
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "exec-server-sandbox") {
		t.Fatalf("exit %d, output %q", code, buf.String())
	}
	// init, sh, cat or ls: a handful, not the host's processes.
	if n := strings.TrimSpace(lines[1]); len(n) != 1 {
		t.Errorf("%s processes visible in /proc", n)
	}
}

func TestCommandExitStatus(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	for _, tc := range []struct {
		script string
		want   int
	}{{"exit 3", 3}, {"kill -TERM $$", 128 + 15}, {"true", 0}} {
		spec, err := Command(workspaceWrite(ws), "/bin/sh", []string{"sh", "-c", tc.script}, nil, ws)
		if err != nil {
			t.Fatal(err)
		}
		null, _ := os.Open(os.DevNull)
		if got := startSpec(t, spec, []*os.File{null, null, null}, nil); got != tc.want {
			t.Errorf("%q exited %d, want %d", tc.script, got, tc.want)
		}
		null.Close()
	}
	// A directory or program the view does not show fails the start.
	_, out := fixture(t)
	p := &policy.Plan{Root: policy.AccessNone, Mounts: []policy.Mount{{Path: ws, Access: policy.AccessWrite, Dir: true}}}
	if _, err := Command(p, "/bin/sh", []string{"sh"}, nil, out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("invisible dir: %v", err)
	}
	if _, err := Command(p, filepath.Join(out, "prog"), []string{"prog"}, nil, ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("invisible program: %v", err)
	}
}

func TestCommandPTY(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	script := "set -m; " + ptyJob + " & fg %1 >/dev/null; tty; stty size; ls /dev/pts"
	code, out, ttyName := runOnPTY(t, workspaceWrite(ws), ws, script)
	if code != 0 || !strings.Contains(out, "fg=1 ctty=1\n") || !strings.Contains(out, ttyName+"\n") || !strings.Contains(out, "33 77") {
		t.Errorf("exit %d, output %q (tty %s)", code, out, ttyName)
	}
	if want := filepath.Base(ttyName) + "\n"; !strings.HasSuffix(out, "\n"+want) {
		t.Errorf("/dev/pts shows more than the session's terminal: %q", out)
	}
}

// ptyJob is a job for `set -m; ptyJob & fg %1`: set -m puts the job in a
// process group of its own, and fg hands it the terminal (TIOCSPGRP) and
// waits for it. The job checks from /proc/self/stat that it has a
// controlling terminal whose foreground process group is its own.
const ptyJob = `bash -c 'sleep 0.2; read -r _ _ _ _ pg _ tty tp _ </proc/self/stat; echo "fg=$((pg == tp)) ctty=$((tty != 0))"'`

// runOnPTY runs a bash script under p in dir on a new 33x77 PTY as its
// controlling terminal; it returns the exit code, the output (without CR)
// and the terminal's name.
func runOnPTY(t *testing.T, p *policy.Plan, dir, script string) (int, string, string) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skip("no pty: ", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 33, Cols: 77}); err != nil {
		t.Fatal(err)
	}
	spec, err := Command(p, "/bin/bash", []string{"bash", "-c", script}, []string{"PATH=/usr/bin:/bin"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&buf, ptmx); close(done) }()
	code := startSpec(t, spec, []*os.File{tty, tty, tty}, &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0})
	tty.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	return code, strings.ReplaceAll(buf.String(), "\r", ""), tty.Name()
}

// TestNonRoot re-runs these tests as an unprivileged user (nobody), for
// which the sandbox needs an unprivileged user namespace.
func TestNonRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	asnobody.Run(t, "", "^Test(Run|Command|Probe)", []string{"SANDBOX_TEST_NONROOT=1"}, "sandbox not available")
}

// BenchmarkRunNoop is a whole sandboxed fs operation but the operation
// itself: cold (helper start, view, lockdown, request and reply) and warm
// (request and reply to a helper kept for the plan).
func BenchmarkRunNoop(b *testing.B) {
	if !Probe().Available {
		b.Skip(Probe().Missing)
	}
	dir := b.TempDir()
	p := workspaceWrite(dir)
	p.Mounts = append(p.Mounts, policy.Mount{Path: filepath.Join(dir, ".git"), Access: policy.AccessRead, Protected: true, Missing: true, Dir: true})
	for _, warm := range []bool{false, true} {
		b.Run(map[bool]string{false: "cold", true: "warm"}[warm], func(b *testing.B) {
			for b.Loop() {
				if !warm {
					closeIdle()
				}
				if _, _, err := Run(context.Background(), p, probeOp, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	closeIdle()
}

// BenchmarkCommandTrue starts /bin/true confined and waits for it.
func BenchmarkCommandTrue(b *testing.B) {
	if !Probe().Available {
		b.Skip(Probe().Missing)
	}
	dir := b.TempDir()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	for _, network := range []policy.Network{policy.NetworkRestricted, policy.NetworkEnabled} {
		b.Run(map[policy.Network]string{policy.NetworkRestricted: "restricted", policy.NetworkEnabled: "enabled"}[network], func(b *testing.B) {
			p := workspaceWrite(dir)
			p.Network = network
			for b.Loop() {
				spec, err := Command(p, "/bin/true", []string{"true"}, nil, dir)
				if err != nil {
					b.Fatal(err)
				}
				runSpecOK(b, spec, []*os.File{null, null, null})
			}
		})
	}
}

// BenchmarkTrueUnconfined is the baseline: /bin/true started directly.
func BenchmarkTrueUnconfined(b *testing.B) {
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	for b.Loop() {
		proc, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{Files: []*os.File{null, null, null}})
		if err != nil {
			b.Fatal(err)
		}
		proc.Wait()
	}
}

func TestRunWarmHelper(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	p := workspaceWrite(ws)
	if got := runOp(t, p, "write", filepath.Join(ws, "old.txt")); got != "ok" {
		t.Fatalf("write = %s", got)
	}
	// A workspace made again under the same name: the warm helper's view
	// shows the old one, so it must not be reused.
	if err := os.RemoveAll(ws); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := runOp(t, p, "write", filepath.Join(ws, "new.txt")); got != "ok" {
		t.Fatalf("write in the new workspace = %s", got)
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); err != nil {
		t.Errorf("the write went to the old workspace: %v", err)
	}
	// Calls at once: each gets its own helper or a free warm one.
	errs := make(chan string, 16)
	for i := range 16 {
		go func() {
			req, _ := json.Marshal(fsReq{"write", filepath.Join(ws, fmt.Sprint(i))})
			reply, _, err := Run(context.Background(), p, "test.probe", req)
			if err != nil {
				errs <- err.Error()
				return
			}
			errs <- string(reply)
		}()
	}
	for range 16 {
		if got := <-errs; got != "ok" {
			t.Errorf("concurrent write = %s", got)
		}
	}
	closeIdle()
}

func TestCommandViews(t *testing.T) {
	needSandbox(t)
	ws, out := fixture(t)
	self, _ := os.Executable()
	none := &policy.Plan{Root: policy.AccessNone, Mounts: []policy.Mount{
		{Path: self, Access: policy.AccessRead}, // the probe command itself
		{Path: ws, Access: policy.AccessWrite, Dir: true},
	}}
	got := runProbes(t, none, ws, "write:"+filepath.Join(ws, "a.txt"), "read:"+filepath.Join(out, "secret.txt"), "read:/etc/passwd", "write:/x")
	for k, v := range map[string]string{
		"write:" + filepath.Join(ws, "a.txt"):      "ok",
		"read:" + filepath.Join(out, "secret.txt"): "ENOENT",
		"read:/etc/passwd":                         "ok",
		"write:/x":                                 "EROFS",
	} {
		if got[k] != v {
			t.Errorf("empty root: %s = %q, want %q", k, got[k], v)
		}
	}
	all := &policy.Plan{Root: policy.AccessWrite, Network: policy.NetworkEnabled}
	got = runProbes(t, all, ws, "write:"+filepath.Join(out, "w.txt"), "mountro:/proc/sys")
	if got["write:"+filepath.Join(out, "w.txt")] != "ok" || got["mountro:/proc/sys"] != "ro" {
		t.Errorf("writable root: %v", got)
	}
	assertTree(t, out, "secret.txt", "w.txt")
}

// TestCommandEnvNotTheInits: the command's environment must not act on
// the init, which runs unconfined until the view is built: an LD_PRELOAD
// library (written by an earlier sandboxed command, say) would run in it.
func TestCommandEnvNotTheInits(t *testing.T) {
	needSandbox(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to build the preload library")
	}
	ws, out := fixture(t)
	src := filepath.Join(ws, "pwn.c")
	so := filepath.Join(ws, "pwn.so")
	code := fmt.Sprintf(`#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void pwn(void) {
	int fd = open("%s/pwned", O_CREAT|O_WRONLY, 0644);
	if (fd >= 0) close(fd);
}`, out)
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(gcc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v %s", err, b)
	}
	spec, err := Command(workspaceWrite(ws), "/bin/true", []string{"true"}, []string{"LD_PRELOAD=" + so}, ws)
	if err != nil {
		t.Fatal(err)
	}
	// Nor may it be in the init's argv, which every local user can read.
	for _, a := range spec.Argv {
		if strings.Contains(a, "LD_PRELOAD") {
			t.Errorf("the command's environment is in the init's argv: %q", a)
		}
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	if code := startSpec(t, spec, []*os.File{null, null, null}, nil); code != 0 {
		t.Errorf("exit %d", code)
	}
	assertTree(t, out, "secret.txt")
}

// TestProtectedMountPointShared: a missing protected path's mount point
// may be in use by another server (it holds a shared flock on it): it
// stays until the last user is gone; a directory no exec-server made stays.
func TestProtectedMountPointShared(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	codex := filepath.Join(ws, ".codex")
	p := workspaceWrite(ws)
	p.Mounts = append(p.Mounts, policy.Mount{Path: codex, Access: policy.AccessRead, Protected: true, Missing: true, Dir: true})
	run := func() {
		t.Helper()
		if got := runOp(t, p, "write", filepath.Join(codex, "x")); got != "EROFS" {
			t.Fatalf("write under the mask = %s", got)
		}
		closeIdle()
		// The helper's exit releases the mount point.
		for i := 0; ; i++ {
			protMu.Lock()
			_, held := protReg[codex]
			protMu.Unlock()
			if !held {
				break
			}
			if i == 500 {
				t.Fatal("the mount point is still held")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// waitTree waits until codex holds exactly names.
	waitTree := func(names ...string) {
		t.Helper()
		for i := 0; ; i++ {
			ents, _ := os.ReadDir(codex)
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			if strings.Join(got, ",") == strings.Join(names, ",") {
				return
			}
			if i == 200 {
				t.Fatalf("%s holds %v, want %v", codex, got, names)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Another server's: made by an exec-server, in use (flocked) by another.
	os.Mkdir(codex, 0o755)
	os.WriteFile(filepath.Join(codex, protMadeMarker), nil, 0o400)
	other, err := os.Open(codex)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(other.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	run()
	waitTree(protMadeMarker)
	other.Close() // that server is done
	run()
	waitGone(t, codex)
	// A directory the user made (no made marker) stays.
	os.Mkdir(codex, 0o755)
	run()
	waitTree()
}

// setIDProbe tries every call that can set S_ISUID or S_ISGID on a file in
// dir, each on a fresh file made 0755 first; "name=errno" pairs, then
// "left=" the files that ended up set-ID.
func setIDProbe(dir string) string {
	var out []string
	n := 0
	fresh := func() string {
		n++
		f := filepath.Join(dir, fmt.Sprintf("setid%d", n))
		_ = os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755)
		return f
	}
	try := func(name string, err error) { out = append(out, name+"="+errnoOf(err)) }
	try("chmod4755", unix.Chmod(fresh(), 0o4755))
	try("chmod2755", unix.Chmod(fresh(), 0o2755))
	try("fchmodat", unix.Fchmodat(unix.AT_FDCWD, fresh(), 0o6755, 0))
	name, _ := unix.BytePtrFromString(fresh())
	_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, atFDCWD, uintptr(unsafe.Pointer(name)), 0o4755, 0, 0, 0)
	try("fchmodat2", errnoIf(e))
	if fd, err := unix.Open(fresh(), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		try("fchmod", unix.Fchmod(fd, 0o4755))
		unix.Close(fd)
	}
	n++
	fd, err := unix.Open(filepath.Join(dir, fmt.Sprintf("setid%d", n)), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755)
	try("open", err)
	if err == nil {
		unix.Close(fd)
	}
	n++
	fd, err = unix.Openat2(unix.AT_FDCWD, filepath.Join(dir, fmt.Sprintf("setid%d", n)), &unix.OpenHow{Flags: unix.O_CREAT | unix.O_WRONLY | unix.O_CLOEXEC, Mode: 0o4755})
	try("openat2", err)
	if err == nil {
		unix.Close(fd)
	}
	n++
	fd, err = unix.Creat(filepath.Join(dir, fmt.Sprintf("setid%d", n)), 0o2755)
	try("creat", err)
	if err == nil {
		unix.Close(fd)
	}
	n++
	try("mknod", unix.Mknod(filepath.Join(dir, fmt.Sprintf("setid%d", n)), unix.S_IFREG|0o4755, 0))
	// A file capability needs CAP_SETFCAP, which no sandbox has.
	capV2 := []byte{0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	try("setxattr-cap", unix.Setxattr(fresh(), "security.capability", capV2, 0))
	try("control-chmod0700", unix.Chmod(fresh(), 0o700))
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, e.Name()), &st) == nil && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			left = append(left, e.Name())
		}
		if _, err := unix.Getxattr(filepath.Join(dir, e.Name()), "security.capability", nil); err == nil {
			left = append(left, e.Name()+"(cap)")
		}
	}
	return strings.Join(out, ",") + ",left=" + strings.Join(left, " ")
}

var atFDCWD = func() uintptr { fd := unix.AT_FDCWD; return uintptr(fd) }()

func errnoIf(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

const setIDWant = "chmod4755=EPERM,chmod2755=EPERM,fchmodat=EPERM,fchmodat2=EPERM,fchmod=EPERM,open=EPERM,openat2=ENOSYS,creat=EPERM,mknod=EPERM,setxattr-cap=EPERM,control-chmod0700=ok,left="

// TestCommandNoSetID: a sandboxed command (of a root server: root-owned
// files) makes no set-user-ID or set-group-ID file and no file capability
// in its writable root, by any call; the writable root is mounted nosuid.
// The supervised command (deny globs) gets openat2 through the supervisor,
// which refuses the mode itself.
func TestCommandNoSetID(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	for _, tc := range []struct {
		name string
		plan *policy.Plan
		want string
	}{
		{"plain", workspaceWrite(ws), setIDWant},
		{"supervised", denyPlan(t, ws), strings.Replace(setIDWant, "openat2=ENOSYS", "openat2=EPERM", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(ws, tc.name)
			if err := os.Mkdir(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			got := runProbes(t, tc.plan, ws, "setid:"+dir, "mountopts:"+ws)
			if g := got["setid:"+dir]; g != tc.want {
				t.Errorf("setid probe:\n got %s\nwant %s", g, tc.want)
			}
			if o := got["mountopts:"+ws]; !strings.Contains(","+o+",", ",nosuid,") {
				t.Errorf("the writable root is mounted %q, want nosuid", o)
			}
		})
	}
}

// unixListener serves path (stream or datagram) and counts what arrives
// (datagrams; connections that deliver a byte).
func unixListener(t *testing.T, network, path string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	if network == "unixgram" {
		c, err := net.ListenPacket(network, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		go func() {
			buf := make([]byte, 64)
			for {
				if _, _, err := c.ReadFrom(buf); err != nil {
					return
				}
				n.Add(1)
			}
		}()
		return &n
	}
	tcptest.Serve(t, network, path, func(c net.Conn) {
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if m, _ := c.Read(make([]byte, 1)); m > 0 {
			n.Add(1)
		}
	})
	return &n
}

// TestCommandUnixSockets: a host daemon's pathname AF_UNIX socket outside
// the writable roots (here out/daemon.sock, and the datagram out/log as
// /dev/log) is out of reach: with the network enabled connect fails with
// EACCES (directly, through a symlink in the writable root, relatively),
// unless the server allows that socket by name; a socket in the writable
// root works only when a process of the sandbox listens on it (a host
// daemon's socket in /tmp is in a writable root under workspace-write).
// Datagram sockets, whose sendmsg takes a destination, are
// refused in both network modes; a seqpacket pair ignores one.
func TestCommandUnixSockets(t *testing.T) {
	needSandbox(t)
	ws, out := fixture(t)
	daemon := unixListener(t, "unix", filepath.Join(out, "daemon.sock"))
	logged := unixListener(t, "unixgram", filepath.Join(out, "log"))
	inRoot := unixListener(t, "unix", filepath.Join(ws, "host.sock"))
	if err := os.Symlink(filepath.Join(out, "daemon.sock"), filepath.Join(ws, "link.sock")); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(ws, filepath.Join(out, "daemon.sock"))
	for _, network := range []policy.Network{policy.NetworkEnabled, policy.NetworkRestricted} {
		t.Run(map[policy.Network]string{policy.NetworkEnabled: "enabled", policy.NetworkRestricted: "restricted"}[network], func(t *testing.T) {
			p := workspaceWrite(ws)
			p.Network = network
			want := map[string]string{
				"connect-unix:" + filepath.Join(out, "daemon.sock"): "EACCES",
				"connect-unix:" + filepath.Join(ws, "link.sock"):    "EACCES",
				"connect-unix:" + rel:                               "EACCES",
				"connect-unix:" + filepath.Join(ws, "host.sock"):    "EACCES", // a host daemon's in a writable root
				"self-serve:" + filepath.Join(ws, "own.sock"):       "ok",
				"connect-unix:" + filepath.Join(ws, "in.txt"):       "ECONNREFUSED",
				"dgram-unix:" + filepath.Join(out, "log"):           "socket EACCES",
				"dgram-pair:" + filepath.Join(out, "log"):           "socketpair EACCES",
				"seqpacket-name:" + filepath.Join(out, "log"):       "ok",
			}
			if network == policy.NetworkRestricted {
				for k := range want {
					if strings.HasPrefix(k, "connect-unix:") {
						want[k] = "EPERM" // no connect at all
					}
					if strings.HasPrefix(k, "self-serve:") {
						want[k] = "listen EPERM" // nor bind
					}
				}
			}
			if err := os.WriteFile(filepath.Join(ws, "in.txt"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var probes []string
			for k := range want {
				probes = append(probes, k)
			}
			got := runProbes(t, p, ws, probes...)
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
	if n := daemon.Load(); n != 0 {
		t.Errorf("the host daemon accepted %d connections", n)
	}
	if n := logged.Load(); n != 0 {
		t.Errorf("the host datagram socket got %d datagrams", n)
	}
	if n := inRoot.Load(); n != 0 {
		t.Errorf("the host daemon in the writable root accepted %d connections", n)
	}
	// Allowed by name (the server's setting): connects.
	t.Setenv(AllowUnixSocketsEnv, filepath.Join(out, "daemon.sock"))
	p := workspaceWrite(ws)
	p.Network = policy.NetworkEnabled
	if got := runProbes(t, p, ws, "connect-unix:"+filepath.Join(ws, "link.sock")); got["connect-unix:"+filepath.Join(ws, "link.sock")] != "ok" {
		t.Errorf("an allowed socket: %v", got)
	}
	for deadline := time.Now().Add(10 * time.Second); daemon.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // the listener counts after its read
	}
	if daemon.Load() != 1 {
		t.Errorf("the allowed daemon accepted %d connections, want 1", daemon.Load())
	}
}

// TestCommandProcessLimit: a fork loop in a sandbox stops at the bound
// (its own pids cgroup for a root server, RLIMIT_NPROC in its user
// namespace otherwise), and no core file appears: RLIMIT_CORE is 0, soft
// and hard.
func TestCommandProcessLimit(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	t.Setenv(PidsMaxEnv, "64")
	p := workspaceWrite(ws)
	got := runProbes(t, p, ws, "forkloop:500", "rlimit-core:")
	var n int
	var errno string
	fmt.Sscanf(got["forkloop:500"], "%d %s", &n, &errno)
	if n >= 64 || errno != "EAGAIN" {
		t.Errorf("fork loop: %q, want fewer than 64 processes, then EAGAIN", got["forkloop:500"])
	}
	if got["rlimit-core:"] != "0 0 raise EPERM" {
		t.Errorf("core limit: %q, want 0 0 raise EPERM", got["rlimit-core:"])
	}
	code, out := runSh(t, p, ws, "ulimit -c unlimited; kill -SEGV $$")
	t.Logf("a crash: exit %d %q", code, out)
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the crash left %v in the workspace", names)
	}
}

// TestCommandCapabilitiesEveryThread: no task of a running sandbox, the init's
// and the fs helper's Go runtime threads included, has a capability
// (they kept every one while only the locked thread dropped them). A
// binary built with cgo cannot reach its threads (syscall.AllThreadsSyscall
// refuses): go test -race needs cgo, so this runs in a CGO_ENABLED=0 test
// binary, and the hostile suite (its server is built without cgo) checks
// the same.
func TestCommandCapabilitiesEveryThread(t *testing.T) {
	needSandbox(t)
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0); e == syscall.ENOTSUP {
		t.Skip("a cgo build: its threads cannot all drop capabilities (covered by the hostile suite)")
	}
	ws, _ := fixture(t)
	for _, tc := range []struct {
		name string
		plan *policy.Plan
	}{{"plain", workspaceWrite(ws)}, {"supervised", denyPlan(t, ws)}} {
		got := runProbes(t, tc.plan, ws, "caps-all:1", "caps-all:")
		for k, v := range got {
			if !strings.HasSuffix(v, "with capabilities: []") {
				t.Errorf("%s: %s = %s", tc.name, k, v)
			}
		}
		if r := runOp(t, tc.plan, "caps-all", ""); !strings.HasSuffix(r, "with capabilities: []") {
			t.Errorf("%s: fs helper: %s", tc.name, r)
		}
	}
}

// noReexecEnv makes TestMain skip MaybeMain, as a program embedding the
// server without calling reexec.Main would.
const noReexecEnv = "SANDBOX_TEST_NO_REEXEC"

// TestProbeNeedsReexecMain: in a program whose main did not call
// reexec.Main, the sandbox is unavailable and says why, rather than
// re-executing /proc/self/exe (which would run that program's main).
func TestProbeNeedsReexecMain(t *testing.T) {
	if os.Getenv(noReexecEnv) == "1" {
		if s := Probe(); s.Available || !strings.Contains(s.Missing, "reexec.Main") {
			t.Fatalf("Probe without reexec.Main = %+v", s)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProbeNeedsReexecMain$", "-test.count=1")
	cmd.Env = append(os.Environ(), noReexecEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

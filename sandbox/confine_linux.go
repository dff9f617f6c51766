package sandbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The helper is this binary re-executed with helperArg as argv[1]
// (MaybeMain dispatches it). Two modes:
//
//   - "run": the fs helper. Its only descriptors are /dev/null, stderr and
//     a socket (fd 3) on which the server sends the plan and the request;
//     it builds the view, locks itself down, runs the registered OpFunc,
//     answers on the socket (with the optional file as SCM_RIGHTS), exits.
//   - "init": the process/start init (PID 1 of its namespaces). The plan
//     travels in argv (Spec has no extra descriptor), never in the
//     environment, which is exactly the command's.

const helperArg = "--exec-server-sandbox"

// SimulateEnv names the variable that, for tests, makes Probe report
// features missing: a comma list of userns, mountns, landlock, seccomp.
// It can only take confinement away from what is available (the sandbox
// then refuses to run), never weaken a sandbox.
const SimulateEnv = "EXEC_SERVER_SANDBOX_SIMULATE_MISSING"

// ErrUnavailable is wrapped by every Run and Command error caused by a
// missing kernel feature (the message names it).
var ErrUnavailable = errors.New("sandbox not available")

var (
	opsMu sync.RWMutex
	ops   = map[string]OpFunc{}
)

func registerOp(name string, fn OpFunc) {
	opsMu.Lock()
	defer opsMu.Unlock()
	if _, dup := ops[name]; dup {
		panic("sandbox: op registered twice: " + name)
	}
	ops[name] = fn
}

const probeOp = "sandbox.probe"

func init() {
	registerOp(probeOp, func([]byte) ([]byte, *os.File) { return []byte("ok"), nil })
}

// ---- Probe ----

var (
	probeOnce sync.Once
	probed    Support
)

// Probe reports what the kernel offers. The real probe (which starts one
// helper) runs once; SimulateEnv is applied on every call.
func Probe() Support {
	probeOnce.Do(func() { probed = probeKernel() })
	return simulate(probed, os.Getenv(SimulateEnv))
}

func simulate(s Support, list string) Support {
	for _, f := range strings.Split(list, ",") {
		var what string
		switch strings.TrimSpace(f) {
		case "userns":
			s.UserNS, what = false, "user namespaces"
		case "mountns":
			what = "mount namespaces"
		case "landlock":
			s.LandlockABI, what = 0, "Landlock"
		case "seccomp":
			s.Seccomp, what = false, "seccomp"
		default:
			continue
		}
		s.Available = false
		if s.Missing != "" {
			s.Missing += ", "
		}
		s.Missing += what + " (simulated by " + SimulateEnv + ")"
	}
	return s
}

func readSysctl(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

func probeKernel() Support {
	s := Support{LandlockABI: landlockABI()}
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err == nil && seccompArch != 0 {
		s.Seccomp = true
	}
	var missing []string
	userns := os.Getuid() != 0
	if userns {
		if n, ok := readSysctl("/proc/sys/user/max_user_namespaces"); ok && n == 0 {
			missing = append(missing, "user namespaces (user.max_user_namespaces=0)")
		}
		if n, ok := readSysctl("/proc/sys/kernel/unprivileged_userns_clone"); ok && n == 0 {
			missing = append(missing, "user namespaces (kernel.unprivileged_userns_clone=0)")
		}
	}
	if s.LandlockABI == 0 {
		missing = append(missing, "Landlock")
	}
	if !s.Seccomp {
		missing = append(missing, "seccomp filters ("+runtime.GOARCH+")")
	}
	if len(missing) == 0 {
		// The only proof that counts: build a real view and lock down.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		reply, f, err := (&Plan{Root: AccessRead}).runHelper(ctx, probeOp, nil)
		if f != nil {
			f.Close()
		}
		switch {
		case err == nil && string(reply) == "ok":
			s.UserNS = userns
		case err == nil:
			missing = append(missing, fmt.Sprintf("a working sandbox helper (reply %q)", reply))
		default:
			missing = append(missing, classify(err, userns))
		}
	}
	if len(missing) == 0 {
		s.Available = true
	} else {
		s.Missing = strings.Join(missing, ", ")
	}
	return s
}

// classify names the kernel feature a failed trial points at.
func classify(err error, userns bool) string {
	var se *stepError
	if errors.As(err, &se) && se.step == "start the helper" {
		if userns {
			why := ""
			if n, ok := readSysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); ok && n == 1 {
				why = "kernel.apparmor_restrict_unprivileged_userns=1: "
			}
			return "user namespaces (" + why + err.Error() + ")"
		}
		return "namespaces (" + err.Error() + ")"
	}
	msg := err.Error()
	for _, s := range []string{"make / private", "clone /", "attach the view", "pivot_root", "/proc", "/dev", "empty root", "masks"} {
		if strings.Contains(msg, s+":") {
			return "mount namespaces (" + msg + ")"
		}
	}
	return "a working sandbox helper (" + msg + ")"
}

func unavailable(s Support) error {
	return fmt.Errorf("%w: missing %s", ErrUnavailable, s.Missing)
}

// ---- namespaces ----

// cloneflags are the helper's namespaces: a user namespace when the
// server is not root (it maps the server's uid and gid to 0 inside, as the
// reference does: the view needs root in the namespace after exec).
func cloneflags(command bool, network Network) uintptr {
	f := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID)
	if command {
		f |= unix.CLONE_NEWIPC | unix.CLONE_NEWUTS
		if network == NetworkRestricted {
			f |= unix.CLONE_NEWNET
		}
	}
	if os.Getuid() != 0 {
		f |= unix.CLONE_NEWUSER
	}
	return f
}

func idMaps() (uid, gid []IDMap) {
	if os.Getuid() == 0 {
		return nil, nil
	}
	return []IDMap{{0, os.Getuid(), 1}}, []IDMap{{0, os.Getgid(), 1}}
}

func sysMaps(m []IDMap) []syscall.SysProcIDMap {
	var out []syscall.SysProcIDMap
	for _, e := range m {
		out = append(out, syscall.SysProcIDMap{ContainerID: e.ContainerID, HostID: e.HostID, Size: e.Size})
	}
	return out
}

// ---- missing protected paths ----

// Mount points of missing protected paths are created on the host for the
// life of the sandboxes that need them, shared (refcounted) by concurrent
// sandboxes, and removed by the last one if this process created them and
// they are still empty.
var (
	protMu  sync.Mutex
	protReg = map[string]*protEntry{}
)

type protEntry struct {
	n       int
	created bool
}

func acquireProtected(p *Plan) func() {
	var paths []string
	protMu.Lock()
	for _, m := range p.Mounts {
		if !m.Protected || !m.Missing {
			continue
		}
		e := protReg[m.Path]
		if e == nil {
			e = &protEntry{}
			// Another error (a missing parent) leaves it to the helper,
			// which fails closed if the path could be created inside.
			e.created = unix.Mkdir(m.Path, 0o755) == nil
			protReg[m.Path] = e
		}
		e.n++
		paths = append(paths, m.Path)
	}
	protMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			protMu.Lock()
			defer protMu.Unlock()
			for _, path := range paths {
				e := protReg[path]
				if e.n--; e.n > 0 {
					continue
				}
				delete(protReg, path)
				if e.created {
					_ = unix.Rmdir(path) // only if still empty
				}
			}
		})
	}
}

// ---- Run ----

type runRequest struct {
	Op   string `json:"op"`
	Plan *Plan  `json:"plan"`
}

// Reply status bytes.
const (
	replyOK    = 'O'
	replyError = 'E'
)

func (p *Plan) run(ctx context.Context, name string, req []byte) ([]byte, *os.File, error) {
	if s := Probe(); !s.Available {
		return nil, nil, unavailable(s)
	}
	return p.runHelper(ctx, name, req)
}

func (p *Plan) runHelper(ctx context.Context, name string, req []byte) (reply []byte, file *os.File, err error) {
	head, err := json.Marshal(runRequest{Op: name, Plan: p})
	if err != nil {
		return nil, nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, stepErr("socketpair", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, stepErr("socketpair", err)
	}
	f := os.NewFile(uintptr(fds[0]), "sandbox-helper")
	c, err := net.FileConn(f)
	f.Close()
	child := os.NewFile(uintptr(fds[1]), "sandbox-helper")
	if err != nil {
		child.Close()
		return nil, nil, stepErr("socketpair", err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		child.Close()
		return nil, nil, err
	}
	release := acquireProtected(p)
	uid, gid := idMaps()
	proc, err := os.StartProcess("/proc/self/exe", []string{"exec-server-sandbox", helperArg, "run"}, &os.ProcAttr{
		Env:   []string{},
		Files: []*os.File{null, null, null, child}, // failures travel on the socket
		Sys: &syscall.SysProcAttr{
			Cloneflags:  cloneflags(false, NetworkRestricted),
			UidMappings: sysMaps(uid),
			GidMappings: sysMaps(gid),
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	child.Close()
	null.Close()
	if err != nil {
		release()
		return nil, nil, stepErr("start the helper", err)
	}
	// The reply is used as soon as it is complete; the exit (namespace
	// teardown) is waited for in the background, then the mount points go.
	exited := make(chan *os.ProcessState, 1)
	go func() {
		st, _ := proc.Wait()
		release()
		exited <- st
	}()
	stop := context.AfterFunc(ctx, func() {
		_ = proc.Kill()
		_ = conn.SetDeadline(time.Now())
	})
	defer stop()
	var lens [8]byte
	binary.LittleEndian.PutUint32(lens[:4], uint32(len(head)))
	binary.LittleEndian.PutUint32(lens[4:], uint32(len(req)))
	bufs := net.Buffers{lens[:4], head, lens[4:], req}
	if _, err := bufs.WriteTo(conn); err != nil {
		return nil, nil, p.helperFailed(ctx, "send the request", err, exited)
	}
	status, body, fd, err := readReply(conn)
	if err != nil {
		return nil, nil, p.helperFailed(ctx, "read the reply", err, exited)
	}
	if fd >= 0 {
		file = os.NewFile(uintptr(fd), "sandbox-file")
	}
	if status == replyError {
		if file != nil {
			file.Close()
		}
		return nil, nil, fmt.Errorf("sandbox helper: %s", body)
	}
	return body, file, nil
}

// helperFailed makes the error of a helper that did not answer: ctx's if
// it ended, else the helper's exit status.
func (p *Plan) helperFailed(ctx context.Context, step string, err error, exited <-chan *os.ProcessState) error {
	if ctx.Err() != nil {
		return fmt.Errorf("sandbox helper: %w", ctx.Err())
	}
	select {
	case st := <-exited:
		if st != nil {
			return fmt.Errorf("sandbox helper exited before answering (%v): is sandbox.MaybeMain called first in main?", st)
		}
	case <-time.After(5 * time.Second):
	}
	return stepErr("sandbox helper: "+step, err)
}

// readReply reads [status][u32 len][body] with an optional descriptor
// attached to the first bytes.
func readReply(conn *net.UnixConn) (byte, []byte, int, error) {
	var hdr [5]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := conn.ReadMsgUnix(hdr[:], oob)
	fd := -1
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, m := range msgs {
				if fds, perr := unix.ParseUnixRights(&m); perr == nil {
					for _, x := range fds {
						if fd < 0 {
							fd = x
						} else {
							unix.Close(x)
						}
					}
				}
			}
		}
	}
	fail := func(err error) (byte, []byte, int, error) {
		if fd >= 0 {
			unix.Close(fd)
		}
		return 0, nil, -1, err
	}
	if err != nil {
		return fail(err)
	}
	if n < len(hdr) {
		if _, err := io.ReadFull(conn, hdr[n:]); err != nil {
			return fail(err)
		}
	}
	body := make([]byte, binary.LittleEndian.Uint32(hdr[1:]))
	if _, err := io.ReadFull(conn, body); err != nil {
		return fail(err)
	}
	if hdr[0] != replyOK && hdr[0] != replyError {
		return fail(fmt.Errorf("bad reply status %q", hdr[0]))
	}
	return hdr[0], body, fd, nil
}

// ---- Command ----

// accessOf is the access path has in p's view (ignoring symlinks).
func (p *Plan) accessOf(path string) Access {
	acc := p.Root
	if acc == AccessNone {
		for _, d := range platformMinimum {
			if path == d || strings.HasPrefix(path, d+"/") {
				acc = AccessRead
			}
		}
	}
	for _, m := range p.Mounts {
		if m.Missing && !m.Protected {
			continue
		}
		if path == m.Path || strings.HasPrefix(path, m.Path+"/") {
			acc = m.Access
			if m.Protected {
				acc = AccessRead
			}
		}
	}
	return acc
}

// visible fails with ENOENT when path does not exist or the view hides it.
func (p *Plan) visible(path string) error {
	if !filepath.IsAbs(path) {
		return &os.PathError{Op: "sandbox", Path: path, Err: syscall.EINVAL}
	}
	path = filepath.Clean(path)
	if _, err := os.Stat(path); err != nil {
		return err
	}
	if p.accessOf(path) == AccessNone {
		return &os.PathError{Op: "sandbox", Path: path, Err: syscall.ENOENT}
	}
	return nil
}

// planArgMax keeps each argv string under the kernel's MAX_ARG_STRLEN.
const planArgMax = 64 << 10

func (p *Plan) command(path string, argv, env []string, dir string) (*Spec, error) {
	if s := Probe(); !s.Available {
		return nil, unavailable(s)
	}
	if err := p.visible(path); err != nil {
		return nil, err
	}
	if err := p.visible(dir); err != nil {
		return nil, err
	}
	plan, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var chunks []string
	for s := string(plan); len(s) > 0; {
		n := min(len(s), planArgMax)
		chunks, s = append(chunks, s[:n]), s[n:]
	}
	args := []string{"exec-server-sandbox", helperArg, "init", strconv.Itoa(len(chunks))}
	args = append(args, chunks...)
	args = append(args, path, filepath.Clean(dir))
	args = append(args, argv...)
	uid, gid := idMaps()
	return &Spec{
		Path:        "/proc/self/exe",
		Argv:        args,
		Env:         env,
		Cloneflags:  cloneflags(true, p.Network),
		UidMappings: uid,
		GidMappings: gid,
		Release:     acquireProtected(p),
	}, nil
}

// ---- the helper ----

// MaybeMain runs the sandbox helper, and never returns, when this process
// was started as one; call it first in main, right after
// childinit.MaybeMain.
func MaybeMain() {
	if len(os.Args) < 3 || os.Args[1] != helperArg {
		return
	}
	runtime.LockOSThread() // everything below runs on this thread
	switch os.Args[2] {
	case "run":
		helperRun()
	case "init":
		helperInit(os.Args[3:])
	}
	fmt.Fprintln(os.Stderr, "exec-server sandbox: unknown helper mode")
	os.Exit(125)
}

const helperSock = 3

func helperRun() {
	// Descriptors leaked to the server without O_CLOEXEC go. The Go
	// runtime has none yet: fds 0-3 are blocking, so nothing initialized
	// its poller.
	_ = unix.CloseRange(helperSock+1, ^uint(0), 0)
	sock := os.NewFile(helperSock, "sandbox-server")
	fail := func(err error) {
		msg := []byte(err.Error())
		hdr := []byte{replyError, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(hdr[1:], uint32(len(msg)))
		_, _ = sock.Write(append(hdr, msg...))
		os.Exit(1)
	}
	var lens [4]byte
	read := func() []byte {
		if _, err := io.ReadFull(sock, lens[:]); err != nil {
			fail(stepErr("read the request", err))
		}
		b := make([]byte, binary.LittleEndian.Uint32(lens[:]))
		if _, err := io.ReadFull(sock, b); err != nil {
			fail(stepErr("read the request", err))
		}
		return b
	}
	var rr runRequest
	if err := json.Unmarshal(read(), &rr); err != nil || rr.Plan == nil {
		fail(fmt.Errorf("read the request: bad header: %v", err))
	}
	req := read()
	opsMu.RLock()
	fn := ops[rr.Op]
	opsMu.RUnlock()
	if fn == nil {
		fail(fmt.Errorf("unknown op %q (is its package linked in?)", rr.Op))
	}
	rules, err := buildView(rr.Plan, viewOpts{})
	if err != nil {
		fail(err)
	}
	if err := lockdown(rules, NetworkRestricted); err != nil {
		fail(err)
	}
	reply, file := fn(req)
	hdr := []byte{replyOK, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(hdr[1:], uint32(len(reply)))
	if file != nil {
		if err := unix.Sendmsg(helperSock, hdr, unix.UnixRights(int(file.Fd())), nil, 0); err != nil {
			os.Exit(1)
		}
	} else if _, err := sock.Write(hdr); err != nil {
		os.Exit(1)
	}
	if _, err := sock.Write(reply); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// initFail reports a failure of the init on the command's stderr and exits
// with 125 (the command never ran).
func initFail(err error) {
	fmt.Fprintf(os.Stderr, "exec-server sandbox: %v\n", err)
	os.Exit(125)
}

func helperInit(args []string) {
	// A signal sent to the process group reaches the command directly;
	// the init only must not die of it.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	go func() {
		for range sigs {
		}
	}()
	n, err := strconv.Atoi(firstOr(args, ""))
	if err != nil || len(args) < 1+n+3 {
		initFail(errors.New("bad arguments"))
	}
	var p Plan
	if err := json.Unmarshal([]byte(strings.Join(args[1:1+n], "")), &p); err != nil {
		initFail(fmt.Errorf("bad plan: %w", err))
	}
	path, dir, argv := args[1+n], args[2+n], args[3+n:]
	rules, err := buildView(&p, viewOpts{command: true, ptys: findPTYs()})
	if err != nil {
		initFail(err)
	}
	if err := unix.Chdir(dir); err != nil {
		initFail(fmt.Errorf("chdir %s: %w", dir, err))
	}
	if err := lockdown(rules, p.Network); err != nil {
		initFail(err)
	}
	// Nothing above 2 reaches the command.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		initFail(stepErr("close descriptors", err))
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
		if errors.Is(err, syscall.ENOENT) {
			os.Exit(127)
		}
		os.Exit(126)
	}
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			os.Exit(125)
		}
		if wpid != pid {
			continue // an orphan of the namespace, reaped
		}
		switch {
		case ws.Exited():
			os.Exit(ws.ExitStatus())
		case ws.Signaled():
			os.Exit(128 + int(ws.Signal()))
		}
	}
}

func firstOr(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return s[0]
}

// findPTYs returns the host paths of the PTY slaves on fds 0-2.
func findPTYs() []string {
	var out []string
	for fd := 0; fd <= 2; fd++ {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		if maj := unix.Major(uint64(st.Rdev)); maj < 136 || maj > 143 {
			continue
		}
		l, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil || !strings.HasPrefix(l, "/dev/pts/") {
			continue
		}
		dup := false
		for _, o := range out {
			dup = dup || o == l
		}
		if !dup {
			out = append(out, l)
		}
	}
	return out
}

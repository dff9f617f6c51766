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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/internal/reexec"
	"github.com/execgo/exec-server/sandbox/policy"
)

// The helper is this binary re-executed with helperArg as argv[1]
// (MaybeMain dispatches it). Two modes:
//
//   - "run": the fs helper, in new mount and PID namespaces (and a user
//     namespace when the server is not root). Its descriptors are
//     /dev/null and a socket (fd 3) on which the server sends the plan,
//     then calls (op name and request); it builds the view, locks itself
//     down, then runs each call's OpFunc on its locked thread and answers
//     on the socket (the optional file as SCM_RIGHTS, closed after). It
//     stays warm for the next call of the same plan (see warmIdle) and
//     exits at EOF. OpFuncs must keep no state between calls and make
//     their syscalls on their own goroutine: other threads of the helper
//     keep the capabilities the locked one dropped (seccomp, which covers
//     every thread, denies what they could do harm with).
//   - "init": the process/start init (PID 1 of its namespaces, plus IPC,
//     UTS, and a network namespace when the network is restricted). The
//     plan travels in argv (Spec has no extra descriptor), never in the
//     environment, which is exactly the command's. A failure before the
//     command runs is reported on its stderr as "exec-server sandbox:
//     <step>: <error>" with exit status 125; an exec failure as
//     "<path>: <error>" with 127 (ENOENT) or 126.
//
// As the reference, a server that is not root maps its uid and gid to 0
// in the user namespace: the command runs as root there, with no
// capabilities; files it makes belong to the server's uid on the host.
const helperArg = "--exec-server-sandbox"

// SimulateEnv names the variable that, for tests, makes Probe report
// features missing: a comma list of userns, mountns, landlock, seccomp.
// It can only take confinement away from what is available (the sandbox
// then refuses to run), never weaken a sandbox. userns makes a difference
// only to a server that is not root (root needs no user namespace).
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
	if !reexec.Ready() {
		// The kernel probe starts a helper: in a program whose main did not
		// call reexec.Main, that would be main again.
		return Support{Missing: "a re-executable binary (main does not call reexec.Main)"}
	}
	probeOnce.Do(func() { probed = probeKernel() })
	return simulate(probed, os.Getenv(SimulateEnv))
}

func simulate(s Support, list string) Support {
	for _, f := range strings.Split(list, ",") {
		var what string
		switch strings.TrimSpace(f) {
		case "userns":
			s.UserNS = false
			if os.Getuid() == 0 {
				continue // root does not use one
			}
			what = "user namespaces"
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
		reply, f, err := runHelper(ctx, &policy.Plan{Root: policy.AccessRead}, probeOp, nil)
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
func cloneflags(command bool, network policy.Network) uintptr {
	f := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID)
	if command {
		f |= unix.CLONE_NEWIPC | unix.CLONE_NEWUTS
		if network == policy.NetworkRestricted || network == policy.NetworkProxied {
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

// ---- missing protected paths: protected_linux.go ----

// ---- Run ----

// Reply status bytes.
const (
	replyOK    = 'O'
	replyError = 'E'
)

func run(ctx context.Context, p *policy.Plan, name string, req []byte) ([]byte, *os.File, error) {
	if s := Probe(); !s.Available {
		return nil, nil, unavailable(s)
	}
	return runHelper(ctx, p, name, req)
}

// A helper serves calls one at a time, for one plan. After a call it waits
// (warm) for another of the same plan, for at most warmIdle, so that a
// burst of operations (an apply_patch) pays the start-up (~4 ms: exec,
// the Go runtime, the view) once. Its view is checked before reuse: if a
// path of the plan now names another file (a workspace deleted and made
// again), the helper is dropped. The idle time is short because a warm
// helper keeps the host mount points of missing protected paths (empty
// directories such as W/.codex, removed when it exits): a server that
// exits leaves them behind for at most that long after its last call.
const (
	warmIdle       = 500 * time.Millisecond
	warmPerPlan    = 2       // idle helpers kept per plan
	warmTotal      = 16      // idle helpers kept in all
	warmRequestMax = 1 << 30 // bytes of a request or a reply
)

type helper struct {
	key     string
	conn    *net.UnixConn
	proc    *os.Process
	exited  chan *os.ProcessState // the exit status, once reaped
	inodes  map[string][2]uint64  // dev and inode of the plan's paths at start
	timer   *time.Timer           // idle timer, while in the pool
	started bool                  // served a call: the view was built
}

var (
	warmMu   sync.Mutex
	warmPool = map[string][]*helper{}
	warmN    int
)

func runHelper(ctx context.Context, p *policy.Plan, name string, req []byte) (reply []byte, file *os.File, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("sandbox helper: %w", err)
	}
	// The view does not depend on the context's cwd: plans that differ
	// only there share helpers.
	q := *p
	q.Cwd = ""
	if len(q.DenyGlobs) > 0 {
		q.CreationLock = creationLockPath()
	}
	key, err := json.Marshal(&q)
	if err != nil {
		return nil, nil, err
	}
	start := time.Now()
	h := takeWarm(string(key), p)
	defer observeHelper(ctx, start, h != nil)
	if h == nil {
		if h, err = startHelper(p, string(key)); err != nil {
			return nil, nil, err
		}
	}
	reply, file, err = h.call(ctx, name, req)
	if err != nil {
		h.close(true)
		return nil, nil, err
	}
	h.started = true
	putWarm(h)
	return reply, file, nil
}

// inodesOf records what p's paths are now.
func inodesOf(p *policy.Plan) map[string][2]uint64 {
	m := map[string][2]uint64{}
	for _, mt := range p.Mounts {
		var st unix.Stat_t
		if unix.Lstat(mt.Path, &st) == nil {
			m[mt.Path] = [2]uint64{st.Dev, st.Ino}
		}
	}
	return m
}

func takeWarm(key string, p *policy.Plan) *helper {
	warmMu.Lock()
	defer warmMu.Unlock()
	for hs := warmPool[key]; len(hs) > 0; hs = warmPool[key] {
		h := hs[len(hs)-1]
		warmPool[key] = hs[:len(hs)-1]
		warmN--
		if len(warmPool[key]) == 0 {
			delete(warmPool, key)
		}
		if !h.timer.Stop() {
			continue // its idle timer is closing it
		}
		select {
		case st := <-h.exited: // died idle (Pdeathsig follows the thread that started it)
			h.exited <- st
			go h.close(false)
			continue
		default:
		}
		now := inodesOf(p)
		same := len(now) == len(h.inodes)
		for k, v := range now {
			same = same && h.inodes[k] == v
		}
		if !same {
			go h.close(false)
			continue
		}
		return h
	}
	return nil
}

func putWarm(h *helper) {
	warmMu.Lock()
	defer warmMu.Unlock()
	if warmN >= warmTotal || len(warmPool[h.key]) >= warmPerPlan {
		go h.close(false)
		return
	}
	warmN++
	warmPool[h.key] = append(warmPool[h.key], h)
	h.timer = time.AfterFunc(warmIdle, func() {
		warmMu.Lock()
		hs := warmPool[h.key]
		for i, x := range hs {
			if x == h {
				warmPool[h.key] = append(hs[:i:i], hs[i+1:]...)
				warmN--
				break
			}
		}
		if len(warmPool[h.key]) == 0 {
			delete(warmPool, h.key)
		}
		warmMu.Unlock()
		h.close(false)
	})
}

// closeIdle ends every idle helper now (tests; a server shutting down).
func closeIdle() {
	warmMu.Lock()
	var hs []*helper
	for k, list := range warmPool {
		for _, h := range list {
			if h.timer.Stop() {
				hs = append(hs, h)
			}
		}
		delete(warmPool, k)
	}
	warmN = 0
	warmMu.Unlock()
	for _, h := range hs {
		h.close(false)
	}
}

// close ends the helper: EOF makes an idle one exit; kill for one in an
// unknown state. Its reaping releases its host mount points.
func (h *helper) close(kill bool) {
	if kill {
		_ = h.proc.Kill()
	}
	h.conn.Close()
}

func startHelper(p *policy.Plan, key string) (*helper, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, stepErr("socketpair", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, stepErr("socketpair", err)
	}
	f := os.NewFile(uintptr(fds[0]), "sandbox-helper")
	c, err := net.FileConn(f)
	f.Close()
	child := os.NewFile(uintptr(fds[1]), "sandbox-helper")
	if err != nil {
		child.Close()
		return nil, stepErr("socketpair", err)
	}
	conn := c.(*net.UnixConn)
	null, err := os.Open(os.DevNull)
	if err != nil {
		child.Close()
		conn.Close()
		return nil, err
	}
	h := &helper{key: key, conn: conn, exited: make(chan *os.ProcessState, 1), inodes: inodesOf(p)}
	release, err := acquireProtected(p)
	if err != nil {
		child.Close()
		null.Close()
		conn.Close()
		return nil, err
	}
	// Quiesce waits for the helper's exit and the release after it.
	live := track(false)
	uid, gid := idMaps()
	h.proc, err = os.StartProcess("/proc/self/exe", []string{"exec-server-sandbox", helperArg, "run"}, &os.ProcAttr{
		Env:   []string{},
		Files: []*os.File{null, null, null, child}, // failures travel on the socket
		Sys: &syscall.SysProcAttr{
			Cloneflags:  cloneflags(false, policy.NetworkRestricted),
			UidMappings: sysMaps(uid),
			GidMappings: sysMaps(gid),
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	child.Close()
	null.Close()
	if err != nil {
		release()
		live.end()
		conn.Close()
		return nil, stepErr("start the helper", err)
	}
	// The exit (namespace teardown) is waited for in the background; the
	// host mount points go after it.
	go func() {
		st, _ := h.proc.Wait()
		release()
		live.end()
		h.exited <- st
	}()
	// The plan goes first: the helper builds its view while the call is
	// being written.
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(key)))
	bufs := net.Buffers{n[:], []byte(key)}
	if _, err := bufs.WriteTo(conn); err != nil {
		h.close(true)
		return nil, stepErr("sandbox helper: send the plan", err)
	}
	return h, nil
}

// call runs one operation in the helper.
func (h *helper) call(ctx context.Context, name string, req []byte) ([]byte, *os.File, error) {
	if len(req) > warmRequestMax {
		return nil, nil, fmt.Errorf("sandbox helper: request of %d bytes", len(req))
	}
	stop := context.AfterFunc(ctx, func() {
		_ = h.proc.Kill()
		_ = h.conn.SetDeadline(time.Now())
	})
	defer stop()
	var lens [8]byte
	binary.LittleEndian.PutUint32(lens[:4], uint32(len(name)))
	binary.LittleEndian.PutUint32(lens[4:], uint32(len(req)))
	bufs := net.Buffers{lens[:4], []byte(name), lens[4:], req}
	if _, err := bufs.WriteTo(h.conn); err != nil {
		// A helper that failed to build its view said why before exiting.
		if status, body, _, rerr := readReply(h.conn); rerr == nil && status == replyError {
			return nil, nil, fmt.Errorf("sandbox helper: %s", body)
		}
		return nil, nil, h.failed(ctx, "send the request", err)
	}
	status, body, fd, err := readReply(h.conn)
	if err != nil {
		return nil, nil, h.failed(ctx, "read the reply", err)
	}
	var file *os.File
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

// failed makes the error of a helper that did not answer: ctx's if it
// ended, else the helper's exit status.
func (h *helper) failed(ctx context.Context, step string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("sandbox helper: %w", ctx.Err())
	}
	select {
	case st := <-h.exited:
		h.exited <- st
		if st != nil && !h.started {
			return fmt.Errorf("sandbox helper exited before answering (%v): is sandbox.MaybeMain called first in main?", st)
		}
		if st != nil {
			return fmt.Errorf("sandbox helper exited before answering (%v)", st)
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
	if hdr[0] != replyOK && hdr[0] != replyError {
		return fail(fmt.Errorf("bad reply status %q", hdr[0]))
	}
	size := binary.LittleEndian.Uint32(hdr[1:])
	if size > warmRequestMax {
		return fail(fmt.Errorf("reply of %d bytes", size))
	}
	// Grown as the bytes arrive: a header alone allocates nothing.
	body, err := io.ReadAll(io.LimitReader(conn, int64(size)))
	if err == nil && len(body) < int(size) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return fail(err)
	}
	return hdr[0], body, fd, nil
}

// ---- Command ----

// accessOf is the access path has in p's view (ignoring symlinks).
func accessOf(p *policy.Plan, path string) policy.Access {
	acc := p.Root
	if acc == policy.AccessNone {
		for _, d := range platformMinimum {
			if path == d || strings.HasPrefix(path, d+"/") {
				acc = policy.AccessRead
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
				acc = policy.AccessRead
			}
		}
	}
	return acc
}

// visible fails with ENOENT when path does not exist or the view hides it.
func visibleIn(p *policy.Plan, path string) error {
	if !filepath.IsAbs(path) {
		return &os.PathError{Op: "sandbox", Path: path, Err: syscall.EINVAL}
	}
	path = filepath.Clean(path)
	if _, err := os.Stat(path); err != nil {
		return err
	}
	if accessOf(p, path) == policy.AccessNone {
		return &os.PathError{Op: "sandbox", Path: path, Err: syscall.ENOENT}
	}
	return nil
}

// planArgMax keeps each argv string under the kernel's MAX_ARG_STRLEN.
const planArgMax = 64 << 10

func command(p *policy.Plan, path string, argv, env []string, dir string) (*Spec, error) {
	if s := Probe(); !s.Available {
		return nil, unavailable(s)
	}
	if err := visibleIn(p, path); err != nil {
		return nil, err
	}
	if err := visibleIn(p, dir); err != nil {
		return nil, err
	}
	q := *p
	if q.Network != policy.NetworkRestricted {
		q.AllowUnixSockets = allowedUnixSockets()
	}
	if len(q.DenyGlobs) > 0 {
		q.CreationLock = creationLockPath()
	}
	q.PidsMax = pidsMax()
	removeCgroup := func() {}
	if q.PidsMax > 0 {
		q.PidsCgroup, removeCgroup = makePidsCgroup(q.PidsMax)
	}
	plan, err := json.Marshal(&q)
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
	releaseProtected, err := acquireProtected(p)
	if err != nil {
		removeCgroup()
		return nil, err
	}
	release := func() {
		releaseProtected()
		removeCgroup()
	}
	return &Spec{
		Path:        "/proc/self/exe",
		Argv:        args,
		Env:         wrapEnv(env),
		Cloneflags:  cloneflags(true, p.Network),
		UidMappings: uid,
		GidMappings: gid,
		Release:     release,
	}, nil
}

// ---- process limit and core dumps ----

// PidsMaxEnv names the server setting that bounds the processes (and
// threads) of each sandboxed command; DefaultPidsMax without it, 0 for no
// bound.
const PidsMaxEnv = "EXEC_SERVER_SANDBOX_PIDS_MAX"

// DefaultPidsMax is the default bound: far above a build's needs (a make
// -j on a large machine), far below what exhausts a host (a fork loop
// reached 378 processes in a second without it).
const DefaultPidsMax = 4096

func pidsMax() int {
	v := os.Getenv(PidsMaxEnv)
	if v == "" {
		return DefaultPidsMax
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return DefaultPidsMax
	}
	return n
}

var cgroupSeq struct {
	sync.Mutex
	n int
}

// makePidsCgroup makes a child pids cgroup of this server's own (cgroup
// v1), with pids.max = max, for one sandbox: it returns the child's
// cgroup.procs (the init moves itself there before anything forks) and a
// func that removes the child once the sandbox is gone. "" when there is
// no v1 pids hierarchy this server may write (a server that is not root
// usually may not).
func makePidsCgroup(max int) (string, func()) {
	none := func() {}
	dir := pidsCgroupDir()
	if dir == "" {
		return "", none
	}
	cgroupSeq.Lock()
	cgroupSeq.n++
	n := cgroupSeq.n
	cgroupSeq.Unlock()
	child := filepath.Join(dir, fmt.Sprintf("exec-server-sandbox-%d-%d", os.Getpid(), n))
	if err := os.Mkdir(child, 0o755); err != nil {
		return "", none
	}
	remove := func() {
		// The init exits after its command; the kernel ends the rest of
		// the PID namespace, which takes a moment: retry for a while.
		go func() {
			for delay := 10 * time.Millisecond; delay < 10*time.Second; delay *= 2 {
				if err := unix.Rmdir(child); err == nil || err == unix.ENOENT {
					return
				}
				time.Sleep(delay)
			}
		}()
	}
	if os.WriteFile(filepath.Join(child, "pids.max"), []byte(strconv.Itoa(max)), 0) != nil {
		_ = unix.Rmdir(child)
		return "", none
	}
	return filepath.Join(child, "cgroup.procs"), remove
}

// pidsCgroupDir is this process's own cgroup directory in cgroup v1's pids
// hierarchy, "" when there is none it may make children in. Never a cgroup
// v2 one: there the process package's spawner starts each child in a
// cgroup of its own, which it kills whole; the init must not leave it
// (limitProcesses sets pids.max on it instead).
func pidsCgroupDir() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || !slices.Contains(strings.Split(f[1], ","), "pids") {
			continue
		}
		d := filepath.Join("/sys/fs/cgroup/pids", f[2])
		if unix.Access(d, unix.W_OK) == nil {
			return d
		}
	}
	return ""
}

// spawnerCgroupPidsMax is the pids.max file of the cgroup v2 cgroup the
// init was started in when it is the spawner's cgroup of this child alone
// (exec-server-spawner-PID/N, docs/security.md) and has the pids
// controller; "" otherwise.
func spawnerCgroupPidsMax() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		path, ok := strings.CutPrefix(l, "0::")
		if !ok || !strings.HasPrefix(filepath.Base(filepath.Dir(path)), "exec-server-spawner-") {
			continue
		}
		for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			f := filepath.Join(root, path, "pids.max")
			if unix.Access(f, unix.W_OK) == nil {
				return f
			}
		}
	}
	return ""
}

// limitProcesses runs in the init before anything forks: no core file
// (RLIMIT_CORE 0, soft and hard: a core in a writable root is a file no
// deny glob stops, and may hold the command's secrets), and the process
// bound: the sandbox's own pids cgroup (cgroup v1: a child of the
// server's; cgroup v2: pids.max of the spawner's cgroup of this child,
// where pids is enabled), or where there is none and the server is not
// root, RLIMIT_NPROC, which the kernel counts per user and user namespace
// (each sandbox has its own); global root is exempt from RLIMIT_NPROC, so
// a root server without a pids controller has no bound (docs/sandbox.md).
//
// Moving a process into a cgroup waits for an RCU grace period (5 to 15 ms
// on a loaded machine): the move runs on another thread while the view is
// built, and joined says when it is done (the init waits for it before
// anything forks).
func limitProcesses(p *policy.Plan) (joined <-chan error, err error) {
	done := make(chan error, 1)
	done <- nil
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return nil, fmt.Errorf("RLIMIT_CORE: %w", err)
	}
	if p.PidsMax <= 0 {
		return done, nil
	}
	if p.PidsCgroup != "" {
		// Opened now: the view (a chroot of the whole process) hides it.
		f, err := os.OpenFile(p.PidsCgroup, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("join %s: %w", p.PidsCgroup, err)
		}
		<-done
		go func() {
			defer f.Close()
			// "0" is the writer's whole thread group: the init.
			if _, err := f.Write([]byte("0")); err != nil {
				done <- fmt.Errorf("join %s: %w", p.PidsCgroup, err)
				return
			}
			done <- nil
		}()
		return done, nil
	}
	if f := spawnerCgroupPidsMax(); f != "" {
		if os.WriteFile(f, []byte(strconv.Itoa(p.PidsMax)), 0) == nil {
			return done, nil
		}
	}
	if os.Getuid() == 0 && !inUserNS() {
		return done, nil
	}
	lim := uint64(p.PidsMax)
	return done, unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: lim, Max: lim})
}

// inUserNS reports whether this process is in a user namespace other than
// the initial one (its uid map is not the identity of every uid).
func inUserNS() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return !(len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295")
}

// AllowUnixSocketsEnv names the server setting that lets sandboxed
// commands with the network enabled connect to the listed pathname AF_UNIX
// sockets (a colon-separated list of absolute paths) outside their
// writable roots; by default such a connect fails with EACCES.
const AllowUnixSocketsEnv = "EXEC_SERVER_SANDBOX_ALLOW_UNIX_SOCKETS"

// allowedUnixSockets is AllowUnixSocketsEnv's list, canonical (the
// supervisor compares the socket's path in the view, which is the host's).
func allowedUnixSockets() []string {
	var out []string
	for _, s := range strings.Split(os.Getenv(AllowUnixSocketsEnv), ":") {
		if !filepath.IsAbs(s) {
			continue
		}
		if real, err := filepath.EvalSymlinks(s); err == nil {
			s = real
		}
		out = append(out, filepath.Clean(s))
	}
	return out
}

// ---- the helper ----

// MaybeMain is reexec.Main: it runs the sandbox helper (or another
// registered helper), and never returns, when this process was started as
// one. Call it (or reexec.Main) first in main; until then Probe reports
// the sandbox unavailable, as re-executing the binary would run main.
func MaybeMain() { reexec.Main() }

func init() { reexec.Register(helperArg, helperMain) }

// helperMain is the helper: this binary re-executed with helperArg, then
// its mode.
func helperMain() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "exec-server sandbox: no helper mode")
		os.Exit(125)
	}
	runtime.LockOSThread() // everything below runs on this thread
	// Not dumpable: its memory and descriptors (/proc/1/mem, /proc/1/fd)
	// stay out of reach of the command, which has the same uid, while its
	// other threads keep the capabilities the locked one drops.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "exec-server sandbox: not dumpable:", err)
		os.Exit(125)
	}
	switch os.Args[2] {
	case "run":
		helperRun()
	case "init":
		helperInit(os.Args[3:])
	case notifyStubMode:
		stubMain(os.Args[3:])
	}
	fmt.Fprintln(os.Stderr, "exec-server sandbox: unknown helper mode")
	os.Exit(125)
}

const helperSock = 3

// closeLeaked closes the descriptors above the helper's socket: any the
// server leaked to it (opened without O_CLOEXEC) would reach host files
// past the view. The Go runtime's own poller descriptors stay: it creates
// them as soon as any timer starts (a package's init may start one), and
// closing them kills the helper with "netpoll failed" (seen: 1 helper
// start in 3 in a test binary that links the metrics packages).
func closeLeaked() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		// No /proc to tell them apart: keep the poller's, mark the rest
		// close-on-exec at least.
		_ = unix.CloseRange(helperSock+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= helperSock {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		if target == "anon_inode:[eventpoll]" || target == "anon_inode:[eventfd]" {
			continue
		}
		_ = unix.Close(fd)
	}
}

func helperRun() {
	closeLeaked()
	sock := os.NewFile(helperSock, "sandbox-server")
	reply := func(status byte, body []byte, file *os.File) {
		hdr := []byte{status, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(hdr[1:], uint32(len(body)))
		var err error
		if file != nil {
			err = unix.Sendmsg(helperSock, hdr, unix.UnixRights(int(file.Fd())), nil, 0)
			file.Close()
		} else {
			_, err = sock.Write(hdr)
		}
		if err == nil {
			_, err = sock.Write(body)
		}
		if err != nil {
			os.Exit(1)
		}
	}
	fail := func(err error) {
		reply(replyError, []byte(err.Error()), nil)
		os.Exit(1)
	}
	read := func(max uint32) ([]byte, error) { return readMsg(sock, max) }
	b, err := read(64 << 20)
	if err != nil {
		fail(stepErr("read the plan", err))
	}
	var p policy.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		fail(stepErr("read the plan", err))
	}
	lock := -1
	if len(p.DenyGlobs) > 0 {
		// Every call of a plan with deny globs checks and makes its new
		// paths under the shared creation lock (notify_linux.go): no
		// supervised rename moves a directory meanwhile.
		if lock, err = openCreationLock(p.CreationLock); err != nil {
			fail(stepErr("deny globs", err))
		}
	}
	rules, err := buildView(&p, viewOpts{})
	if err != nil {
		fail(err)
	}
	if err := lockdown(rules, policy.NetworkRestricted, false); err != nil {
		fail(err)
	}
	for {
		name, err := read(4096)
		if err == io.EOF {
			os.Exit(0)
		}
		if err != nil {
			fail(stepErr("read the request", err))
		}
		req, err := read(warmRequestMax)
		if err != nil {
			fail(stepErr("read the request", err))
		}
		opsMu.RLock()
		fn := ops[string(name)]
		opsMu.RUnlock()
		if fn == nil {
			reply(replyError, []byte(fmt.Sprintf("unknown op %q (is its package linked in?)", name)), nil)
			continue
		}
		unlock, errno := lockCreation(lock, false)
		if errno != 0 {
			reply(replyError, []byte(fmt.Sprintf("the creation lock: %v", errno)), nil)
			continue
		}
		out, file, err := callOp(fn, req)
		unlock()
		if err != nil {
			fail(err) // its state is unknown: no further call
		}
		reply(replyOK, out, file)
	}
}

// callOp runs fn, turning a panic into an error for the server.
func callOp(fn OpFunc, req []byte) (out []byte, f *os.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the operation panicked: %v", r)
		}
	}()
	out, f = fn(req)
	return out, f, nil
}

// readMsg reads one [u32 length][bytes] message of at most max bytes,
// growing its buffer as the bytes arrive. A clean EOF before a message is
// io.EOF.
func readMsg(r io.Reader, max uint32) ([]byte, error) {
	var lens [4]byte
	if _, err := io.ReadFull(r, lens[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(lens[:])
	if n > max {
		return nil, fmt.Errorf("message of %d bytes", n)
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err == nil && len(b) < int(n) {
		err = io.ErrUnexpectedEOF
	}
	return b, err
}

// initFail reports a failure of the init on the command's stderr and exits
// with 125 (the command never ran).
func initFail(err error) {
	fmt.Fprintf(os.Stderr, "exec-server sandbox: %v\n", err)
	os.Exit(125)
}

// initSignals are the signals a process group or terminal gets whose
// default action would end or stop the init (SIGKILL and SIGSTOP cannot be
// caught). Each Notify is a round trip to the runtime's signal thread
// (about 50 us on a busy host), hence a short list, registered while the
// view is built.
var initSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGPIPE, unix.SIGALRM, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU,
}

func helperInit(args []string) {
	// A signal sent to the process group reaches the command directly;
	// the init only must not die of it.
	notified := make(chan struct{})
	go func() {
		sigs := make(chan os.Signal, 16)
		signal.Notify(sigs, initSignals...)
		close(notified)
		for range sigs {
		}
	}()
	ia, err := parseInitArgs(args)
	if err != nil {
		initFail(err)
	}
	p := ia.plan
	path, dir, argv := ia.path, ia.dir, ia.argv
	if err := proxyListen(&p); err != nil { // netns_linux.go
		initFail(err)
	}
	lock := -1
	if superviseCreation(&p) {
		// Opened on the host, before the view hides it.
		if lock, err = openCreationLock(p.CreationLock); err != nil {
			initFail(stepErr("deny globs", err))
		}
	}
	joined, err := limitProcesses(&p)
	if err != nil {
		initFail(stepErr("process limit", err))
	}
	rules, err := buildView(&p, viewOpts{command: true, ptys: findPTYs()})
	if err != nil {
		initFail(err)
	}
	if err := <-joined; err != nil {
		initFail(stepErr("process limit", err))
	}
	if err := unix.Chdir(dir); err != nil {
		initFail(fmt.Errorf("chdir %s: %w", dir, err))
	}
	supervise := superviseCreation(&p) || superviseConnect(&p)
	if supervise {
		// The stub (this binary) must be executable (exec opens it for
		// reading too) even where the view does not show it. This grants
		// the command nothing: no path of the view reaches the file but
		// the ones that already grant it, and /proc/PID/exe of the init
		// and of the stub is closed to it (neither is dumpable).
		rules = append(rules, landlockRule{"/proc/self/exe", llExecute | llReadFile})
	}
	if err := lockdown(rules, p.Network, writableEverywhere(&p)); err != nil {
		initFail(err)
	}
	// Nothing above 2 reaches the command.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		initFail(stepErr("close descriptors", err))
	}
	<-notified
	if supervise {
		superviseInit(&p, lock, path, argv)
	}
	if err := installCommandFilter(); err != nil {
		initFail(stepErr("seccomp", err))
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: unwrapEnv(os.Environ()), Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
		if errors.Is(err, syscall.ENOENT) {
			os.Exit(127)
		}
		os.Exit(126)
	}
	os.Exit(waitCommand(pid))
}

// waitCommand reaps the namespace's processes until pid exits and returns
// the init's exit status for it (128+N for a signal N).
func waitCommand(pid int) int {
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 125
		}
		if wpid != pid {
			continue // an orphan of the namespace, reaped
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

// The command's environment reaches the init as its own, each entry
// renamed envPrefix+index: as it is, it would act on the init before the
// sandbox exists (LD_PRELOAD or GLIBC_TUNABLES on this dynamically linked
// binary's loader, GODEBUG on its runtime); in argv it would be readable by
// every local user (/proc/PID/cmdline, where environ is the owner's only).
const envPrefix = "EXEC_SERVER_SANDBOX_ENV_"

// wrapEnv renames env's entries for the init; never nil (nil would mean
// the caller's environment).
func wrapEnv(env []string) []string {
	out := make([]string, len(env))
	for i, e := range env {
		out[i] = envPrefix + strconv.Itoa(i) + "=" + e
	}
	return out
}

// unwrapEnv is wrapEnv's inverse over the init's environment, in order.
func unwrapEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, entry, ok := strings.Cut(kv, "=")
		rest, found := strings.CutPrefix(name, envPrefix)
		if !ok || !found {
			continue
		}
		i, err := strconv.Atoi(rest)
		if err != nil || i < 0 || i >= len(environ) {
			continue
		}
		for len(out) <= i {
			out = append(out, "")
		}
		out[i] = entry
	}
	return slices.DeleteFunc(out, func(e string) bool { return e == "" })
}

type initArgs struct {
	plan      policy.Plan
	path, dir string
	argv      []string
}

// parseInitArgs decodes the init's arguments (after "init"): the count of
// plan chunks and the chunks, the program, the directory, the command's
// argv.
func parseInitArgs(args []string) (*initArgs, error) {
	count := func() (int, error) {
		if len(args) == 0 {
			return 0, errors.New("bad arguments: too few")
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 0 || n > len(args)-1 {
			return 0, fmt.Errorf("bad arguments: count %q", args[0])
		}
		args = args[1:]
		return n, nil
	}
	n, err := count()
	if err != nil {
		return nil, err
	}
	ia := &initArgs{}
	if err := json.Unmarshal([]byte(strings.Join(args[:n], "")), &ia.plan); err != nil {
		return nil, fmt.Errorf("bad plan: %w", err)
	}
	args = args[n:]
	if len(args) < 2 {
		return nil, errors.New("bad arguments: no program or directory")
	}
	ia.path, ia.dir, ia.argv = args[0], args[1], args[2:]
	return ia, nil
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

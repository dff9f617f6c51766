package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

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
//
// The kernel side, one file per part: confine_linux.go (the helper's modes,
// run in the re-executed binary), probe_linux.go, pool_linux.go (Run),
// command_linux.go (Command), limits_linux.go, protected_linux.go and
// registry_linux.go (mount points of missing protected paths),
// view_linux.go (the mount view), lockdown_linux.go (capabilities,
// Landlock), seccomp_linux.go (the filter), netns_linux.go (the proxied
// network), notify_*_linux.go (the deny-glob supervisor) and abi_linux.go
// (the structures and every unsafe call).
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
	case transparentProbeMode: // transparent_linux.go
		transparentProbeMain()
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
		// paths under the shared creation lock (notify_lock_linux.go): no
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

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// Deny globs for commands. A mount can mask only what exists when the view
// is built; a *new* path matching a deny glob (or a missing deny path, which
// sandbox/policy/resolve.go turns into a literal glob) can only be refused when it is
// made. When the plan has deny globs and something writable, the init
// supervises the command's path-creating syscalls with a seccomp user
// notification filter and does each of them itself, after checking the
// new name, relative to directories it resolved itself: never
// SECCOMP_USER_NOTIF_FLAG_CONTINUE, whose path the command could change
// between the check and the kernel's read of it.
//
// Who is where:
//   - the init's locked thread holds the Landlock domain and has no
//     capabilities (its other threads keep them: see lockdown); it is the
//     supervisor, so it is confined exactly like the command and doing the
//     work for it grants nothing the command could not do itself;
//   - a filter with a listener must be installed by the task it filters, and
//     a thread inherits the Landlock domain of the thread that made it, which
//     for a Go thread is never the locked one. So the init starts a stub,
//     this binary again ("notify" mode), from its locked thread (the stub
//     is in the same Landlock domain, which the supervisor needs to read
//     its memory: Landlock refuses /proc/PID/mem across sibling domains);
//     the stub installs the filter on itself, hands the listener to the
//     init over a socket and execs the command.
//
// The command's syscalls that the filter does not name run at full speed.
//
// The layers, one file each:
//   - notify_linux.go: when to supervise, the filter (notifyProgram), the
//     stub and the init's start of the supervised command;
//   - abi_linux.go: the kernel structures;
//   - notify_supervisor_linux.go: the loop (serve), decodeCall and handle;
//   - notify_target_linux.go: the task's memory and the walk in its place;
//   - notify_open_linux.go, notify_create_linux.go, notify_socket_linux.go:
//     the calls done in the command's place;
//   - notify_lock_linux.go: the machine-wide creation lock.

// notifyStubMode is the helper mode of the stub (argv[2]).
const notifyStubMode = "notify"

// legacyCreate names the legacy path-creating syscalls of the arch (amd64:
// open, creat, mkdir, mknod, link, symlink, rename; arm64 has none).
var legacyCreate = map[string]uintptr{}

// Supervision bounds: a directory moved under a new name is walked to
// check its descendants' new paths; past these it is refused.
const (
	renameWalkMax   = 10000
	renameWalkDepth = 64
	maxSymlinkHops  = 40
)

// superviseCreation reports whether a command under p needs the supervisor:
// deny globs and something a command could create in.
func superviseCreation(p *policy.Plan) bool {
	if len(p.DenyGlobs) == 0 {
		return false
	}
	if p.Root == policy.AccessWrite {
		return true
	}
	for _, m := range p.Mounts {
		if m.Access == policy.AccessWrite && !m.Protected && !m.Missing {
			return true
		}
	}
	return false
}

// superviseConnect reports whether a command under p needs the supervisor
// for connect(2): with the network enabled (or proxied: connect is
// allowed there too), a connect to a pathname
// AF_UNIX socket outside the writable roots (a host daemon's: docker,
// tmux, ssh-agent, systemd) is refused, and only the supervisor can read
// the address (it is in memory) and make the connection itself.
func superviseConnect(p *policy.Plan) bool {
	return p.Network != policy.NetworkRestricted && !writableEverywhere(p)
}

// writableEverywhere reports whether every path of p's view is writable
// (nothing outside a writable root: no socket to keep a command from).
func writableEverywhere(p *policy.Plan) bool {
	if p.Root != policy.AccessWrite {
		return false
	}
	for _, m := range p.Mounts {
		if m.Access != policy.AccessWrite || m.Protected {
			return false
		}
	}
	return true
}

// notifyProgram is the filter of the command: USER_NOTIF for the
// path-creating calls (open and openat only with O_CREAT: BPF reads their
// flags; openat2 always, its flags are in memory), ALLOW for everything
// else. The TSYNC filter of lockdown still applies first: its ERRNO and
// KILL beat USER_NOTIF.
//
// create supervises the path-creating calls (deny globs), connect
// connect(2) (network enabled).
func notifyProgram(create, connect bool) []unix.SockFilter {
	const retNotif = unix.SECCOMP_RET_USER_NOTIF
	p := []unix.SockFilter{
		bpfStmt(ldW, offArch),
		bpfJump(jeqK, seccompArch, 1, 0),
		bpfStmt(retK, retAllow), // the other filter kills foreign arches
		bpfStmt(ldW, offNr),
	}
	if connect {
		p = append(p, bpfJump(jeqK, unix.SYS_CONNECT, 0, 1), bpfStmt(retK, retNotif))
	}
	if !create {
		return append(p, bpfStmt(retK, retAllow))
	}
	// bind: an AF_UNIX socket bound to a path makes that path (its
	// address is in memory; with a restricted network the other filter's
	// EPERM comes first).
	always := []uintptr{unix.SYS_OPENAT2, unix.SYS_MKDIRAT, unix.SYS_MKNODAT, unix.SYS_LINKAT,
		unix.SYS_SYMLINKAT, unix.SYS_RENAMEAT, unix.SYS_RENAMEAT2, unix.SYS_BIND}
	for _, n := range []string{"creat", "mkdir", "mknod", "link", "symlink", "rename"} {
		if nr, ok := legacyCreate[n]; ok {
			always = append(always, nr)
		}
	}
	for _, nr := range always {
		p = append(p, bpfJump(jeqK, uint32(nr), 0, 1), bpfStmt(retK, retNotif))
	}
	withCreat := func(nr uintptr, off uint32) {
		p = append(p,
			bpfJump(jeqK, uint32(nr), 0, 4),
			bpfStmt(ldW, off),
			bpfJump(jsetK, unix.O_CREAT, 0, 1),
			bpfStmt(retK, retNotif),
			bpfStmt(retK, retAllow))
	}
	withCreat(unix.SYS_OPENAT, offArg2)
	if nr, ok := legacyCreate["open"]; ok {
		withCreat(nr, offArg1)
	}
	return append(p, bpfStmt(retK, retAllow))
}

// stubMain is the "notify" helper mode: installs the notification filter
// on its (locked) thread, sends the listener on fd 3, execs the command.
func stubMain(args []string) {
	if len(args) < 1 {
		initFail(errors.New("notify: bad arguments"))
	}
	if len(args) < 2 {
		initFail(errors.New("notify: bad arguments"))
	}
	path, argv := args[1], args[2:]
	prog := notifyProgram(strings.Contains(args[0], "c"), strings.Contains(args[0], "n"))
	// WAIT_KILLABLE_RECV (Linux 5.19): once the supervisor has a
	// notification, only a fatal signal interrupts the call. Otherwise a
	// signal (Go's preemption, a timer) restarts a call the supervisor
	// already did: an O_EXCL creation then fails with EEXIST on its own
	// file, a mkdir on its own directory. Older kernels go without.
	lfd, e := seccompSetFilter(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, prog)
	if e == unix.EINVAL {
		lfd, e = seccompSetFilter(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, prog)
	}
	if e != 0 {
		initFail(stepErr("seccomp listener", e))
	}
	if err := unix.Sendmsg(helperSock, []byte{1}, unix.UnixRights(int(lfd)), nil, 0); err != nil {
		initFail(stepErr("seccomp listener: send", err))
	}
	unix.Close(int(lfd))
	unix.Close(helperSock)
	err := syscall.Exec(path, argv, unwrapEnv(os.Environ()))
	fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
	if errors.Is(err, syscall.ENOENT) {
		os.Exit(127)
	}
	os.Exit(126)
}

// startSupervised starts the command through the stub from the calling
// (locked, confined) thread and returns its pid and the listener (-1 when
// the stub failed before sending it: its exit status then says why).
func startSupervised(p *policy.Plan, path string, argv []string) (int, int, error) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, -1, stepErr("seccomp listener: socketpair", err)
	}
	defer unix.Close(sp[0])
	what := "-" // what the stub's filter supervises: c creations, n connect
	if superviseCreation(p) {
		what += "c"
	}
	if superviseConnect(p) {
		what += "n"
	}
	args := append([]string{"exec-server-sandbox", helperArg, notifyStubMode, what, path}, argv...)
	// The stub gets the init's environment as it is (wrapped: nothing of it
	// acts on the stub) and unwraps it for the command.
	pid, err := syscall.ForkExec("/proc/self/exe", args, &syscall.ProcAttr{
		Env: os.Environ(), Files: []uintptr{0, 1, 2, uintptr(sp[1])}})
	unix.Close(sp[1])
	if err != nil {
		return 0, -1, stepErr("start the command", err)
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sp[0], buf, oob, unix.MSG_CMSG_CLOEXEC)
	for err == unix.EINTR {
		_, oobn, _, _, err = unix.Recvmsg(sp[0], buf, oob, unix.MSG_CMSG_CLOEXEC)
	}
	if err != nil || oobn == 0 {
		return pid, -1, nil
	}
	lfd := -1
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if fds, perr := unix.ParseUnixRights(&m); perr == nil {
				for _, fd := range fds {
					if lfd < 0 {
						lfd = fd
					} else {
						unix.Close(fd)
					}
				}
			}
		}
	}
	return pid, lfd, nil
}

// The init counts in the sandbox's process bound, so once the command
// has filled it the init's Go runtime cannot start a thread, and it
// aborts when it needs one (runtime/cgo: pthread_create failed), ending
// the sandbox. The supervisor's calls need none of their own (a blocking
// connect waits in its epoll: notify_connect_linux.go), but the runtime
// starts one whenever a goroutine is runnable while every thread it has
// is busy or blocked in a call (the supervisor's, the reaper's wait4, the
// signal loop's), the garbage collector's workers included. So the init
// runs on initProcs Ps, and starts initThreads threads before the command
// exists, which the runtime keeps idle for later (it never ends an idle
// thread): more than it can use at once (a P each, the three blocked
// goroutines, sysmon).
const (
	initProcs   = 2
	initThreads = 8
)

// reserveThreads caps GOMAXPROCS at initProcs (on a machine with many
// CPUs the collector could want a thread for each) and makes the runtime
// start initThreads threads: each goroutine wires the thread it runs on
// and waits, so the next needs a new one; all then let theirs go idle.
func reserveThreads() {
	runtime.GOMAXPROCS(initProcs)
	var wired sync.WaitGroup
	release := make(chan struct{})
	for range initThreads {
		wired.Add(1)
		go func() {
			runtime.LockOSThread()
			wired.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	wired.Wait()
	close(release)
}

// superviseInit runs the command under the supervisor: it never returns
// (the init exits with the command's status).
func superviseInit(p *policy.Plan, lock int, path string, argv []string) {
	reserveThreads()
	pid, lfd, err := startSupervised(p, path, argv)
	if err != nil {
		initFail(err)
	}
	go func() {
		os.Exit(waitCommand(pid))
	}()
	if lfd < 0 {
		select {} // the stub failed and says why; its status is the init's
	}
	s := &supervisor{listener: lfd, p: p, cwd: -1, lock: lock}
	// A bind to a path is made relative to its directory: this thread's
	// working directory must be its own to change.
	if unix.Unshare(unix.CLONE_FS) == nil {
		if fd, err := unix.Open(".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			s.cwd = fd
		}
	}
	s.serve()
	// Every command process is gone (or the listener broke: the pending
	// and future calls then fail with ENOSYS). The wait goroutine exits.
	unix.Close(lfd)
	for {
		time.Sleep(time.Hour)
	}
}

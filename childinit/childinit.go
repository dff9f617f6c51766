// Package childinit runs a child process under a small init, so that no
// descendant of the child outlives the server, even when the server is
// killed with SIGKILL.
//
// PR_SET_PDEATHSIG reaches only a direct child: when the server dies, the
// child's own children are reparented to PID 1 and live on, and a
// descendant that called setsid escapes every process-group kill. The init
// closes both holes. It is the server's own binary, re-executed with Arg as
// its first argument (call MaybeMain first thing in main), that:
//
//   - becomes a child subreaper (PR_SET_CHILD_SUBREAPER), so every orphan of
//     the tree is reparented to it rather than to PID 1, and starts the
//     real child exactly as the server would have (Setsid, Setctty for a
//     PTY, Pdeathsig), so the child is still a session leader and signals
//     the server sends to the child's process group reach it as before;
//   - reaps every orphan, and reports the child's pid when it starts and
//     its wait status on a lifeline socket the moment it exits; it then
//     lets go of the child's streams, so EOF on them still means that the
//     child and its descendants are done with them;
//   - kills every descendant with SIGKILL, then exits, when the server asks
//     (KillTree) or when the lifeline reaches EOF: the kernel closes the
//     server's end when the server dies, however it dies.
//
// A Spawner also puts each child in a cgroup of its own (cgroup v2, when
// the server may create cgroups below its own; see cgroup.go), so that
// killing one child's tree kills every descendant at once, even one that
// started its own session after its parent died, and needs no /proc scan.
// Without cgroups it freezes the tree (SIGSTOP) and scans /proc, which
// misses a descendant that both left the session and was orphaned before
// the kill.
//
// Two ways to use it. Spawner (recommended) is one init per session that
// starts every child of the session on request: the init's start-up is paid
// once, and a start costs about as much as a direct one. Prepare and
// Control put one init in front of each child instead: simpler to wire (the
// server still starts a process per child), but each start pays the init's
// start-up (several milliseconds) and each live child costs an extra
// process (about 1 MiB).
package childinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Arg is the first argument that makes the server binary act as the init.
const Arg = "--exec-server-child-init"

// lifelineFD is the init's descriptor of its end of the lifeline.
const lifelineFD = 3

// Messages on the lifeline: one byte, then a little-endian uint32 for the
// ones that carry a value.
const (
	msgStarted  = 'S' // + child pid (in the server's PID namespace)
	msgFailed   = 'F' // + errno of the failed exec
	msgExited   = 'E' // + the child's wait status
	msgKillTree = 'K' // server to init: kill everything, then exit
)

// IsInit reports whether this process was started as an init.
func IsInit() bool { return len(os.Args) > 1 && os.Args[1] == Arg }

// MaybeMain runs the init, and never returns, when this process was
// started as one; otherwise it returns at once, and from then on Available
// reports true. Call it first in main.
func MaybeMain() {
	if IsInit() {
		if len(os.Args) > 2 && os.Args[2] == spawnerArg {
			os.Exit(runSpawner())
		}
		os.Exit(run(os.Args[2:]))
	}
	available.Store(true)
}

var available atomic.Bool

// Available reports whether this binary can be re-executed as an init:
// its main called MaybeMain. A program that embeds the server without
// doing so must not be re-executed (its own main would run again), so it
// gets no init and its children are started directly.
func Available() bool { return available.Load() }

// Prepare turns the start of path with argv, files (the child's stdin,
// stdout and stderr) and sys into the start of an init that will run it:
// start initPath with initArgv, initFiles and initSys instead, with the
// same Dir and Env. The child itself still gets what sys asked for among
// Setsid, Setctty (with the terminal on fd 0) and Pdeathsig, so it looks
// exactly as if started directly (session leader, own process group,
// controlling terminal); the init gets its own process group and no
// Pdeathsig, since it must outlive the server long enough to kill the tree.
// The caller must call Control.Started after the start succeeded, and
// Control.Abort if it failed.
func Prepare(path string, argv []string, files []*os.File, sys *syscall.SysProcAttr) (initPath string, initArgv []string, initFiles []*os.File, initSys *syscall.SysProcAttr, ctl *Control, err error) {
	if len(files) != 3 {
		return "", nil, nil, nil, nil, errors.New("childinit: Prepare needs exactly the 3 standard files")
	}
	self, err := os.Executable()
	if err != nil {
		return "", nil, nil, nil, nil, fmt.Errorf("childinit: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", nil, nil, nil, nil, fmt.Errorf("childinit: lifeline: %w", err)
	}
	// The server's end is non-blocking so that reads park in the netpoller,
	// not on an OS thread per child.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return "", nil, nil, nil, nil, fmt.Errorf("childinit: lifeline: %w", err)
	}
	mode := "plain"
	if sys != nil && sys.Setsid {
		mode = "setsid"
		if sys.Setctty {
			mode = "setsid-ctty"
		}
	}
	if sys != nil && sys.Pdeathsig != 0 {
		mode += ",pdeathsig"
	}
	initSys = &syscall.SysProcAttr{Setpgid: true}
	if sys != nil {
		initSys.PidFD = sys.PidFD
	}
	ctl = &Control{f: os.NewFile(uintptr(fds[0]), "childinit-lifeline"), initEnd: os.NewFile(uintptr(fds[1]), "childinit-lifeline-init")}
	initArgv = append([]string{argv0(argv), Arg, mode, path}, argv...)
	initFiles = append(append([]*os.File(nil), files...), ctl.initEnd)
	return self, initArgv, initFiles, initSys, ctl, nil
}

func argv0(argv []string) string {
	if len(argv) > 0 {
		return argv[0]
	}
	return "exec-server-init"
}

// Control is the server's end of one init's lifeline.
type Control struct {
	f       *os.File
	initEnd *os.File // closed in the server once the init started
	pid     int
}

// Pid is the child's pid (also its process group and session id when it
// was started with Setsid), known once Started has returned.
func (c *Control) Pid() int { return c.pid }

// Abort releases the lifeline after a failed start of the init.
func (c *Control) Abort() {
	c.initEnd.Close()
	c.f.Close()
}

// Started waits until the init has started the child and returns the
// child's pid, or the exec error (a syscall.Errno, as os.StartProcess would
// have returned) when the child could not be started; the init then exits
// on its own.
func (c *Control) Started() (int, error) {
	c.initEnd.Close()
	_ = c.f.SetReadDeadline(time.Now().Add(30 * time.Second))
	kind, v, err := c.read()
	_ = c.f.SetReadDeadline(time.Time{})
	if err != nil {
		return 0, fmt.Errorf("childinit: the init did not report: %w", err)
	}
	switch kind {
	case msgStarted:
		c.pid = int(v)
		return c.pid, nil
	case msgFailed:
		return 0, syscall.Errno(v)
	}
	return 0, fmt.Errorf("childinit: unexpected message %q", kind)
}

// Wait returns the child's wait status as soon as the child exits; the
// init itself may live on while descendants of the child run. An error
// means the init died without reporting (it was SIGKILLed): the caller
// should use the init's own exit status.
func (c *Control) Wait() (syscall.WaitStatus, error) {
	for {
		kind, v, err := c.read()
		if err != nil {
			return 0, err
		}
		if kind == msgExited {
			return syscall.WaitStatus(v), nil
		}
	}
}

// KillTree asks the init to SIGKILL every descendant and exit. Writing to
// an init that is already gone is not an error.
func (c *Control) KillTree() error {
	_, err := c.f.Write([]byte{msgKillTree})
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// Close closes the server's end: the init kills the tree and exits.
func (c *Control) Close() error { return c.f.Close() }

func (c *Control) read() (byte, uint32, error) {
	var b [5]byte
	if _, err := io.ReadFull(c.f, b[:1]); err != nil {
		return 0, 0, err
	}
	if b[0] == msgKillTree {
		return b[0], 0, nil
	}
	if _, err := io.ReadFull(c.f, b[1:]); err != nil {
		return 0, 0, err
	}
	return b[0], binary.LittleEndian.Uint32(b[1:]), nil
}

// ---- the init ----

// run is the init: args are the mode, the child's path and its argv.
func run(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "exec-server child init: missing program")
		return 127
	}
	mode, path, argv := args[0], args[1], args[2:]
	sys := &syscall.SysProcAttr{}
	for _, m := range strings.Split(mode, ",") {
		switch m {
		case "setsid":
			sys.Setsid = true
		case "setsid-ctty":
			sys.Setsid, sys.Setctty, sys.Ctty = true, true, 0
		case "pdeathsig":
			// If the init itself is SIGKILLed, the child goes with it.
			sys.Pdeathsig = syscall.SIGKILL
		}
	}
	lifeline := os.NewFile(lifelineFD, "lifeline")
	unix.CloseOnExec(lifelineFD)
	send := func(kind byte, v uint32) {
		var b [5]byte
		b[0] = kind
		binary.LittleEndian.PutUint32(b[1:], v)
		_, _ = lifeline.Write(b[:])
	}
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

	// Catch every signal before the child exists: signals sent to the
	// process group must not kill the init (the child gets them itself),
	// and SIGCHLD drives reaping. Caught signals are reset to their default
	// in the child by exec.
	sigs := make(chan os.Signal, 128)
	signal.Notify(sigs)

	ppid := os.Getppid()
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   sys,
	})
	if err != nil {
		errno, _ := err.(syscall.Errno)
		if errno == 0 {
			errno = syscall.EINVAL
		}
		send(msgFailed, uint32(errno))
		return 127
	}
	// The server may have died before the child existed; the lifeline
	// reports that too, but do not even start counting on it.
	if os.Getppid() != ppid {
		killTree(nil, nil)
		return 137
	}
	send(msgStarted, uint32(pid))
	// The init must not hold the child's streams: the server sees EOF on
	// them when the child and its descendants are done with them, and a
	// terminal must hang up when the child's session ends.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for fd := 0; fd < 3; fd++ {
			_ = unix.Dup2(int(null.Fd()), fd)
		}
		null.Close()
	}

	ctl := make(chan struct{})
	go func() {
		// Any byte is a kill request; EOF is the server's death.
		var b [1]byte
		_, _ = lifeline.Read(b[:])
		close(ctl)
	}()

	// A full signal channel drops signals, SIGCHLD included: a slow tick
	// makes sure reaping never stalls for good.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	exitCode := -1
	reap := func() {
		reapExited(func(wpid int, st syscall.WaitStatus) {
			if wpid == pid {
				send(msgExited, uint32(st))
				exitCode = st.ExitStatus()
				if st.Signaled() {
					exitCode = 128 + int(st.Signal())
				}
			}
		})
	}
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGCHLD {
				reap()
			}
		case <-tick.C:
			reap()
		case <-ctl:
			var kill func()
			if exitCode < 0 {
				kill = func() { _ = syscall.Kill(-pid, syscall.SIGKILL); _ = syscall.Kill(pid, syscall.SIGKILL) }
			}
			killTree(kill, func(reaped map[int]bool) bool { return reaped[pid] })
			if exitCode < 0 {
				exitCode = 128 + int(syscall.SIGKILL)
			}
			return exitCode
		}
		if exitCode >= 0 && !hasChildren() {
			// The child is gone and so is every descendant: nothing left
			// to guard.
			return exitCode
		}
	}
}

// hasChildren reports whether the init still has a child (alive or not
// yet reaped); as a subreaper, every live descendant is below one of them.
// reapExited reaps every exited child (orphans included, as a subreaper)
// without blocking, calling f for each.
func reapExited(f func(pid int, st syscall.WaitStatus)) {
	for {
		var st syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || wpid <= 0 {
			return
		}
		f(wpid, st)
	}
}

func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != unix.ECHILD
}

// killTree SIGKILLs every descendant and reaps them all (this process is
// their subreaper). kill, when not nil, kills the known part of the tree
// first (a cgroup, process groups), and settled reports when that part is
// gone (given the pids reaped so far): when nothing else is left, the tree
// is gone without a /proc scan, which reads one file per process on the
// machine; with one spawner per session, a scan per spawner made shutdown
// quadratic in the number of sessions. Whatever survives is found by
// scanning, pass after pass: a descendant forked during a pass is
// reparented here when its parent dies and is found by the next one.
func killTree(kill func(), settled func(reaped map[int]bool) bool) {
	if kill != nil {
		kill()
		// Killed processes can take a while to die when many die at once
		// (a server shutting down): wait for them rather than scan.
		reaped := map[int]bool{}
		if reapUntil(3*time.Second, func() bool { return settled(reaped) }, reaped) {
			return
		}
		if reapUntil(100*time.Millisecond, nil, nil) {
			return
		}
	}
	self := os.Getpid()
	deadline := time.Now().Add(5 * time.Second)
	wait := 2 * time.Millisecond
	for time.Now().Before(deadline) {
		for _, p := range descendants(self, scanProcs()) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if reapUntil(wait, nil, nil) {
			return
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// reapUntil reaps children until there is none left (true), or until done
// (when not nil) reports true or wait has passed (false). It records the
// reaped pids in reaped, when not nil.
func reapUntil(wait time.Duration, done func() bool, reaped map[int]bool) bool {
	deadline := time.Now().Add(wait)
	pause := 200 * time.Microsecond
	for {
		var st syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case wpid > 0:
			if reaped != nil {
				reaped[wpid] = true
			}
			continue
		case err == syscall.ECHILD:
			return true
		case err != nil:
			return false
		}
		if (done != nil && done()) || time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}

// procStat is one process's links, from /proc/PID/stat.
type procStat struct {
	pid, ppid, pgid, sid int
}

// scanProcs reads every process's links from /proc.
func scanProcs() []procStat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procStat, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		// state ppid pgrp session ...
		f := strings.Fields(s[i+1:])
		if len(f) < 4 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		sid, _ := strconv.Atoi(f[3])
		out = append(out, procStat{pid: pid, ppid: ppid, pgid: pgid, sid: sid})
	}
	return out
}

// descendants lists every process below the roots, from the parent links
// in procs.
func descendants(root int, procs []procStat, more ...int) []int {
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	seen := map[int]bool{root: true}
	queue := []int{root}
	var out []int
	for _, m := range more {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
			queue = append(queue, m)
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}

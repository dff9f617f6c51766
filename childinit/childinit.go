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
// A Spawner is one init per session that starts every child of the
// session on request: the init's start-up is paid once, and a start costs
// about as much as a direct one.
package childinit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/execgo/exec-server/internal/reexec"
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

func init() { reexec.Register(Arg, initMain) }

// initMain is the init: this binary re-executed with Arg.
func initMain() {
	if len(os.Args) > 2 && os.Args[2] == spawnerArg {
		os.Exit(runSpawner())
	}
	fmt.Fprintln(os.Stderr, "exec-server child init: unknown mode")
	os.Exit(127)
}

// MaybeMain is reexec.Main: it runs the init, and never returns, when this
// process was started as one (or another registered helper); otherwise it
// returns at once, and from then on Available reports true. Call it (or
// reexec.Main) first in main.
func MaybeMain() { reexec.Main() }

// Available reports whether this binary can be re-executed as an init:
// its main called reexec.Main. A program that embeds the server without
// doing so must not be re-executed (its own main would run again), so it
// gets no init and its children are started directly.
func Available() bool { return reexec.Ready() }

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

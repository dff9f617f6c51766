package process

import (
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/execgo/exec-server/protocol"
)

// extState is what this server's extensions keep per process: process/list's
// description, a graceful terminate's pending kill and process/start's
// timeout. Guarded by the Proc's mu, except argv and startedAt, which are set
// before the Proc is shared.
type extState struct {
	argv      []string
	startedAt time.Time
	exitedAt  time.Time
	timedOut  bool        // the timeout killed it
	deadline  *time.Timer // timeoutMs
	grace     *time.Timer // a graceful terminate's SIGKILL
}

// exitedLocked records the exit; the timers have nothing left to do.
func (e *extState) exitedLocked() {
	e.exitedAt = time.Now()
	e.stopLocked()
}

func (e *extState) stopLocked() {
	if e.deadline != nil {
		e.deadline.Stop()
	}
	if e.grace != nil {
		e.grace.Stop()
	}
}

// checkTimeout refuses a timeoutMs out of 1..MaxTimeoutMs.
func checkTimeout(p *protocol.StartParams) error {
	if p.TimeoutMs != nil && (*p.TimeoutMs == 0 || *p.TimeoutMs > protocol.MaxTimeoutMs) {
		return protocol.InvalidParams("timeoutMs %d is out of range: it must be between 1 and %d", *p.TimeoutMs, protocol.MaxTimeoutMs)
	}
	return nil
}

// CheckGrace refuses a graceMs above MaxGraceMs (for the server, which
// answers -32602; Terminate clamps it for library callers).
func CheckGrace(p *protocol.TerminateParams) error {
	if p.GraceMs != nil && *p.GraceMs > protocol.MaxGraceMs {
		return protocol.InvalidParams("graceMs %d is out of range: it must be at most %d", *p.GraceMs, protocol.MaxGraceMs)
	}
	return nil
}

// armTimeout kills the process's tree once timeoutMs has passed, as
// process/terminate does, and marks its exit timedOut.
func (p *Proc) armTimeout(ms *uint64) {
	if ms == nil {
		return
	}
	d := time.Duration(*ms) * time.Millisecond
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	p.ext.deadline = time.AfterFunc(d, func() {
		p.mu.Lock()
		// Not once reaped: an exit of its own is not a timeout.
		live := p.pid > 0 && !p.exited
		if live {
			p.ext.timedOut = true
		}
		p.mu.Unlock()
		if live {
			p.signal(syscall.SIGKILL)
		}
	})
}

// terminateGrace sends SIGTERM to the group now and the whole-tree SIGKILL
// after grace if the process has not exited by then. It reports whether the
// process was running.
func (p *Proc) terminateGrace(grace time.Duration) bool {
	running := p.signal(syscall.SIGTERM)
	if !running {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited || p.ext.grace != nil {
		// Exited meanwhile, or an earlier graceful terminate's kill is
		// already due (it is not postponed).
		return running
	}
	p.ext.grace = time.AfterFunc(grace, func() { p.signal(syscall.SIGKILL) })
	return running
}

// List describes the session's processes, the closed ones still retained
// included, in start order.
func (m *Manager) List() *protocol.ListResult {
	m.mu.Lock()
	procs := make([]*Proc, 0, len(m.procs))
	for _, p := range m.procs {
		procs = append(procs, p)
	}
	m.mu.Unlock()
	res := &protocol.ListResult{Processes: make([]protocol.ProcessInfo, 0, len(procs))}
	for _, p := range procs {
		res.Processes = append(res.Processes, p.info())
	}
	slices.SortFunc(res.Processes, func(a, b protocol.ProcessInfo) int {
		if c := a.StartedAtMs - b.StartedAtMs; c != 0 {
			return int(min(max(c, -1), 1))
		}
		return strings.Compare(a.ProcessID, b.ProcessID)
	})
	return res
}

func (p *Proc) info() protocol.ProcessInfo {
	in := protocol.ProcessInfo{
		ProcessID:   p.id,
		Argv:        p.ext.argv,
		State:       protocol.StateStarting,
		StartedAtMs: p.ext.startedAt.UnixMilli(),
	}
	if !p.started() || p.pgid == 0 {
		// Still spawning, or the spawn failed and the id is about to be
		// freed.
		return in
	}
	// pgid, tty and sandboxed are set before ready is closed; pgid keeps
	// the pid after the reap.
	in.Pid, in.TTY, in.Sandboxed = p.pgid, p.tty, p.sandboxed
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		in.State = protocol.StateClosed
	case p.exited:
		in.State = protocol.StateExited
	default:
		in.State = protocol.StateRunning
	}
	if p.exited {
		at, code := p.ext.exitedAt.UnixMilli(), p.exitCode
		in.ExitedAtMs, in.ExitCode, in.TimedOut = &at, &code, p.ext.timedOut
	}
	return in
}

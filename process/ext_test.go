package process

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/protocol"
)

// infoOf finds a process in List's result.
func infoOf(t *testing.T, m *Manager, id string) protocol.ProcessInfo {
	t.Helper()
	for _, in := range m.List().Processes {
		if in.ProcessID == id {
			return in
		}
	}
	t.Fatalf("process %s not listed: %+v", id, m.List().Processes)
	return protocol.ProcessInfo{}
}

func TestList(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	if got := m.List().Processes; got == nil || len(got) != 0 {
		t.Fatalf("empty session lists %#v, want an empty non-nil slice", got)
	}
	before := time.Now().UnixMilli()
	pid := startPid(t, m, sink, "run", "echo $$; exec sleep 30")
	p := params(t, "done", "sh", "-c", "exit 3")
	p.TTY = true
	mustStart(t, m, p)
	sink.waitClosed(t, "done")

	run := infoOf(t, m, "run")
	if run.State != protocol.StateRunning || run.Pid != pid || run.TTY || run.ExitCode != nil || run.ExitedAtMs != nil || run.Sandboxed {
		t.Errorf("running process: %+v, want running with pid %d, no exit", run, pid)
	}
	if !slices.Equal(run.Argv, []string{"sh", "-c", "echo $$; exec sleep 30"}) {
		t.Errorf("argv %q", run.Argv)
	}
	if run.StartedAtMs < before || run.StartedAtMs > time.Now().UnixMilli() {
		t.Errorf("startedAtMs %d not between %d and now", run.StartedAtMs, before)
	}
	done := infoOf(t, m, "done")
	if done.State != protocol.StateClosed || !done.TTY || done.Pid <= 0 || done.ExitCode == nil || *done.ExitCode != 3 ||
		done.ExitedAtMs == nil || *done.ExitedAtMs < done.StartedAtMs || done.TimedOut {
		t.Errorf("closed process: %+v", done)
	}
	// Start order.
	if l := m.List().Processes; len(l) != 2 || l[0].ProcessID != "run" || l[1].ProcessID != "done" {
		t.Errorf("order: %+v", l)
	}

	m.Terminate(protocol.TerminateParams{ProcessID: "run"})
	sink.waitClosed(t, "run")
	if run := infoOf(t, m, "run"); run.State != protocol.StateClosed || run.Pid != pid || *run.ExitCode != 137 {
		t.Errorf("killed process: %+v", run)
	}
}

// TestListStates covers the states a running session rarely stays in long
// enough to observe: starting (spawn under way) and exited (not yet closed).
func TestListStates(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{})
	p := newProc(m, "x")
	p.ext.argv = []string{"x"}
	if in := p.info(); in.State != protocol.StateStarting || in.Pid != 0 {
		t.Errorf("not started: %+v", in)
	}
	close(p.ready)
	if in := p.info(); in.State != protocol.StateStarting {
		t.Errorf("failed spawn, not yet forgotten: %+v", in)
	}
	p.pgid = 42
	if in := p.info(); in.State != protocol.StateRunning || in.Pid != 42 {
		t.Errorf("started: %+v", in)
	}
	p.exited, p.exitCode = true, 5
	p.ext.exitedLocked()
	if in := p.info(); in.State != protocol.StateExited || *in.ExitCode != 5 || in.ExitedAtMs == nil {
		t.Errorf("exited: %+v", in)
	}
	p.closed = true
	if in := p.info(); in.State != protocol.StateClosed {
		t.Errorf("closed: %+v", in)
	}
}

func TestListSandboxed(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	m, sink := newTestManager(t, Options{})
	ws := workspace(t)
	startSandboxed(t, m, sandboxParams(t, "sb", codexWorkspaceWrite, ws, "sh", "-c", "echo ready; exec sleep 30"))
	sink.waitOutput(t, "sb", "ready")
	if in := infoOf(t, m, "sb"); in.State != protocol.StateRunning || !in.Sandboxed || in.Pid <= 0 {
		t.Errorf("sandboxed process: %+v", in)
	}
	m.Terminate(protocol.TerminateParams{ProcessID: "sb"})
	sink.waitClosed(t, "sb")
}

func TestTerminateGrace(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	// Handles SIGTERM: it exits on its own with its own code, long before
	// the grace period ends.
	mustStart(t, m, params(t, "polite", "sh", "-c", "trap 'echo bye; exit 7' TERM; echo ready; while :; do sleep 0.05; done"))
	sink.waitOutput(t, "polite", "ready")
	if res := m.Terminate(protocol.TerminateParams{ProcessID: "polite", GraceMs: u64(protocol.MaxGraceMs)}); !res.Running {
		t.Error("graceful terminate of a running process: running false")
	}
	evs := sink.waitClosed(t, "polite")
	if code := exitCode(t, evs); code != 7 || !strings.Contains(output(evs, ""), "bye") {
		t.Errorf("polite: exit %d output %q, want 7 and bye (SIGTERM handled)", code, output(evs, ""))
	}

	// Ignores SIGTERM (so do its children): the SIGKILL follows the grace
	// period, and it takes the background child too.
	child := startPid(t, m, sink, "stubborn", "trap '' TERM; sleep 30 & echo $!; while :; do sleep 0.05; done")
	if res := m.Terminate(protocol.TerminateParams{ProcessID: "stubborn", GraceMs: u64(100)}); !res.Running {
		t.Error("graceful terminate of a running process: running false")
	}
	if code := exitCode(t, sink.waitClosed(t, "stubborn")); code != 137 {
		t.Errorf("stubborn: exit %d, want 137", code)
	}
	waitDead(t, child)

	// A graceful terminate of a finished or unknown process.
	if res := m.Terminate(protocol.TerminateParams{ProcessID: "polite", GraceMs: u64(10)}); res.Running {
		t.Error("graceful terminate of an exited process: running true")
	}
	if res := m.Terminate(protocol.TerminateParams{ProcessID: "nope", GraceMs: u64(10)}); res.Running {
		t.Error("graceful terminate of an unknown process: running true")
	}
}

func TestCheckGrace(t *testing.T) {
	for _, tc := range []struct {
		grace *uint64
		ok    bool
	}{{nil, true}, {u64(0), true}, {u64(protocol.MaxGraceMs), true}, {u64(protocol.MaxGraceMs + 1), false}, {u64(1 << 63), false}} {
		err := CheckGrace(&protocol.TerminateParams{ProcessID: "x", GraceMs: tc.grace})
		if tc.ok && err != nil {
			t.Errorf("graceMs %v: %v", tc.grace, err)
		}
		if !tc.ok {
			wantErr(t, err, protocol.CodeInvalidParams, "graceMs")
		}
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	for _, tty := range []bool{false, true} {
		id := "slow-" + map[bool]string{false: "pipe", true: "pty"}[tty]
		p := params(t, id, "sh", "-c", "sleep 30 & echo $!; wait")
		p.TTY, p.TimeoutMs = tty, u64(200)
		mustStart(t, m, p)
		evs := sink.waitClosed(t, id)
		var ex Event
		for _, ev := range evs {
			if ev.Kind == EventExited {
				ex = ev
			}
		}
		if ex.Kind != EventExited || ex.ExitCode != 137 || !ex.TimedOut {
			t.Errorf("%s: exited event %+v, want 137 timed out", id, ex)
		}
		res, err := m.Read(t.Context(), protocol.ReadParams{ProcessID: id})
		if err != nil || !res.TimedOut || *res.ExitCode != 137 {
			t.Errorf("%s: read %+v %v, want timedOut", id, res, err)
		}
		if in := infoOf(t, m, id); !in.TimedOut {
			t.Errorf("%s: listed %+v, want timedOut", id, in)
		}
		pid, _ := stringsPid(output(evs, ""))
		waitDead(t, pid)
	}

	// Done before its time: not timed out.
	p := params(t, "quick", "true")
	p.TimeoutMs = u64(60_000)
	mustStart(t, m, p)
	for _, ev := range sink.waitClosed(t, "quick") {
		if ev.Kind == EventExited && (ev.TimedOut || ev.ExitCode != 0) {
			t.Errorf("quick: %+v", ev)
		}
	}
	if res, _ := m.Read(t.Context(), protocol.ReadParams{ProcessID: "quick"}); res.TimedOut {
		t.Error("quick: read says timed out")
	}
}

// stringsPid parses the first line of out as a pid.
func stringsPid(out string) (int, bool) {
	var pid int
	for _, c := range strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]) {
		if c < '0' || c > '9' {
			return pid, false
		}
		pid = pid*10 + int(c-'0')
	}
	return pid, pid > 0
}

func TestTimeoutBounds(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{})
	for _, ms := range []uint64{0, protocol.MaxTimeoutMs + 1} {
		p := params(t, "b", "true")
		p.TimeoutMs = u64(ms)
		_, err := m.Start(p)
		wantErr(t, err, protocol.CodeInvalidParams, "timeoutMs")
	}
	if l := m.List().Processes; len(l) != 0 {
		t.Errorf("refused starts listed: %+v", l)
	}
}

// TestTerminateGraceSandboxed: the SIGTERM reaches a sandboxed command too
// (through the sandbox's init), and the kill still follows for one that
// ignores it.
func TestTerminateGraceSandboxed(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	modes(t, func(t *testing.T, opts Options) {
		m, sink := newTestManager(t, opts)
		ws := workspace(t)
		for _, tc := range []struct {
			id, trap string
			grace    uint64
			code     int
		}{{"polite", "trap 'exit 7' TERM", protocol.MaxGraceMs, 7}, {"stubborn", "trap '' TERM", 100, 137}} {
			startSandboxed(t, m, sandboxParams(t, tc.id, codexWorkspaceWrite, ws, "sh", "-c", tc.trap+"; echo ready; while :; do sleep 0.05; done"))
			sink.waitOutput(t, tc.id, "ready")
			if res := m.Terminate(protocol.TerminateParams{ProcessID: tc.id, GraceMs: u64(tc.grace)}); !res.Running {
				t.Errorf("%s: running false", tc.id)
			}
			if ex := exitedEvent(t, sink.waitClosed(t, tc.id)); ex.ExitCode != tc.code || ex.SandboxDenied {
				t.Errorf("%s: exit %d denied %v, want %d", tc.id, ex.ExitCode, ex.SandboxDenied, tc.code)
			}
		}
		checkNoTraces(t, ws)
	})
}

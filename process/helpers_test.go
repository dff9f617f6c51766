package process

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/protocol"
)

// recSink records every event it is given.
type recSink struct {
	mu      sync.Mutex
	events  []Event
	times   []time.Time   // when each event was delivered
	changed chan struct{} // closed and replaced on every event
}

func newRecSink() *recSink { return &recSink{changed: make(chan struct{})} }

func (s *recSink) Deliver(ev Event) {
	ev.Data = append([]byte(nil), ev.Data...)
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.times = append(s.times, time.Now())
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// of returns the events of one process so far.
func (s *recSink) of(id string) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	for _, ev := range s.events {
		if ev.ProcessID == id {
			out = append(out, ev)
		}
	}
	return out
}

// deliveredAt returns when the process's first event of kind was delivered.
func (s *recSink) deliveredAt(t *testing.T, id string, kind EventKind) time.Time {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ev := range s.events {
		if ev.ProcessID == id && ev.Kind == kind {
			return s.times[i]
		}
	}
	t.Fatalf("process %s: no event of kind %d", id, kind)
	return time.Time{}
}

// waitFor waits until cond holds for the process's events.
func (s *recSink) waitFor(t *testing.T, id string, what string, cond func([]Event) bool) []Event {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		evs := s.of(id)
		if cond(evs) {
			return evs
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("process %s: %s did not happen within 15s; events: %s", id, what, describeEvents(evs))
		}
	}
}

// waitClosed waits for the closed event and checks the event sequence.
func (s *recSink) waitClosed(t *testing.T, id string) []Event {
	t.Helper()
	evs := s.waitFor(t, id, "closed", func(evs []Event) bool {
		return len(evs) > 0 && evs[len(evs)-1].Kind == EventClosed
	})
	checkSequence(t, evs)
	return evs
}

// waitOutput waits until the process's output contains want.
func (s *recSink) waitOutput(t *testing.T, id, want string) []Event {
	t.Helper()
	return s.waitFor(t, id, fmt.Sprintf("output %q", want), func(evs []Event) bool {
		return strings.Contains(output(evs, ""), want)
	})
}

// checkSequence checks the invariants of one process's events: seq 1..n
// without gaps, exactly one exited, closed last.
func checkSequence(t *testing.T, evs []Event) {
	t.Helper()
	exited := 0
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d, want %d: %s", i, ev.Seq, i+1, describeEvents(evs))
		}
		switch ev.Kind {
		case EventExited:
			exited++
		case EventClosed:
			if i != len(evs)-1 {
				t.Fatalf("closed is not the last event: %s", describeEvents(evs))
			}
		case EventOutput:
			if len(ev.Data) == 0 {
				t.Errorf("empty output chunk at seq %d", ev.Seq)
			}
		}
	}
	if exited != 1 {
		t.Fatalf("%d exited events: %s", exited, describeEvents(evs))
	}
}

func describeEvents(evs []Event) string {
	var b strings.Builder
	for _, ev := range evs {
		switch ev.Kind {
		case EventOutput:
			fmt.Fprintf(&b, "[%d %s %.40q]", ev.Seq, ev.Stream, ev.Data)
		case EventExited:
			fmt.Fprintf(&b, "[%d exited %d]", ev.Seq, ev.ExitCode)
		case EventClosed:
			fmt.Fprintf(&b, "[%d closed]", ev.Seq)
		}
	}
	return b.String()
}

// output concatenates the output of one stream ("" for every stream).
func output(evs []Event, stream string) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Kind == EventOutput && (stream == "" || ev.Stream == stream) {
			b.Write(ev.Data)
		}
	}
	return b.String()
}

func exitCode(t *testing.T, evs []Event) int {
	t.Helper()
	for _, ev := range evs {
		if ev.Kind == EventExited {
			return ev.ExitCode
		}
	}
	t.Fatalf("no exited event: %s", describeEvents(evs))
	return 0
}

func fileURI(path string) string { return (&url.URL{Scheme: "file", Path: path}).String() }

// newTestManager returns a Manager closed at the end of the test.
func newTestManager(t *testing.T, opts Options) (*Manager, *recSink) {
	t.Helper()
	sink := newRecSink()
	m := NewManager(opts, sink)
	t.Cleanup(m.Close)
	return m, sink
}

// params returns start params running argv in a fresh temp dir with the
// server's PATH.
func params(t *testing.T, id string, argv ...string) protocol.StartParams {
	return protocol.StartParams{
		ProcessID: id,
		Argv:      argv,
		Cwd:       fileURI(t.TempDir()),
		Env:       map[string]string{"PATH": os.Getenv("PATH")},
	}
}

func mustStart(t *testing.T, m *Manager, p protocol.StartParams) {
	t.Helper()
	res, err := m.Start(p)
	if err != nil {
		t.Fatalf("Start(%s %q): %v", p.ProcessID, p.Argv, err)
	}
	if res.ProcessID != p.ProcessID || res.SandboxType != "none" {
		t.Fatalf("Start result %+v", res)
	}
}

// wantErr checks that err is a *protocol.Error with code and a message
// containing msg.
func wantErr(t *testing.T, err error, code int, msg string) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T), want a *protocol.Error %d %q", err, err, code, msg)
	}
	if pe.Code != code || !strings.Contains(pe.Message, msg) {
		t.Fatalf("error {%d %q}, want {%d %q}", pe.Code, pe.Message, code, msg)
	}
}

// alive reports whether pid is a live process (zombies are dead).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}

// waitDead waits until none of pids is alive.
func waitDead(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still alive", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func u64(v uint64) *uint64 { return &v }
func str(s string) *string { return &s }

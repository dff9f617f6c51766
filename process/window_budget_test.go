package process

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/budget"
	"github.com/execgo/exec-server/protocol"
)

// Windows sharing a budget give up their own oldest chunks when it is
// spent, always keep their newest chunk, and give everything back when
// freed.
func TestWindowsShareABudget(t *testing.T) {
	b := budget.New("retained output bytes", 100)
	a := window{maxBytes: 1000, maxChunks: 1000, budget: b}
	c := window{maxBytes: 1000, maxChunks: 1000, budget: b}
	steps := []struct {
		w        *window
		seq      uint64
		n        int
		wantA    string
		wantC    string
		wantUsed int64
	}{
		{&a, 1, 40, "[1]", "[]", 40},
		{&a, 2, 40, "[1 2]", "[]", 80},
		// c's chunk does not fit and c has nothing to give back: kept
		// anyway, over the budget.
		{&c, 1, 30, "[1 2]", "[1]", 110},
		// a is over the budget now: its next chunk costs its oldest.
		{&a, 3, 10, "[2 3]", "[1]", 80},
		{&c, 2, 20, "[2 3]", "[1 2]", 100},
		// a full budget and a big chunk: a gives up all its older chunks.
		{&a, 4, 60, "[4]", "[1 2]", 110},
	}
	for i, s := range steps {
		s.w.append(chunk{seq: s.seq, data: make([]byte, s.n)})
		gotA, gotC := fmt.Sprint(seqs(a.after(0, -1))), fmt.Sprint(seqs(c.after(0, -1)))
		if gotA != s.wantA || gotC != s.wantC || b.Used() != s.wantUsed {
			t.Fatalf("step %d: a %s c %s used %d, want a %s c %s used %d", i, gotA, gotC, b.Used(), s.wantA, s.wantC, s.wantUsed)
		}
		if int64(a.bytes+c.bytes) != b.Used() {
			t.Fatalf("step %d: windows hold %d bytes, the budget counts %d", i, a.bytes+c.bytes, b.Used())
		}
	}
	// The per-window bound still applies, and evicting for it gives back.
	c.maxBytes = 25
	c.append(chunk{seq: 3, data: make([]byte, 5)})
	if got := fmt.Sprint(seqs(c.after(0, -1))); got != "[2 3]" || b.Used() != 85 {
		t.Fatalf("c %s used %d, want [2 3] 85", got, b.Used())
	}
	a.free()
	c.free()
	if b.Used() != 0 || a.len() != 0 || c.len() != 0 {
		t.Fatalf("after free: used %d, lens %d %d", b.Used(), a.len(), c.len())
	}
}

// A manager's retained output counts against the shared budget while the
// processes are readable, and is given back when their retention ends and
// when the manager closes.
func TestManagerGivesRetainedOutputBack(t *testing.T) {
	t.Parallel()
	b := budget.New("retained output bytes", 1<<20)
	// The second manager's process runs to its end first: its output is
	// retained for the default 30 s, so it is all counted from here on.
	sink2 := newRecSink()
	m2 := NewManager(Options{RetainBudget: b}, sink2)
	t.Cleanup(m2.Close)
	mustStart(t, m2, params(t, "big", "head", "-c", "300000", "/dev/zero"))
	sink2.waitClosed(t, "big")
	// The first manager's process is retained for only 200 ms, counted
	// from its closed event: the budget is read while that event is
	// delivered, when all its output is in and the retention has not
	// started (a poll after it could come too late on a loaded machine).
	sink := newRecSink()
	var atClosed atomic.Int64
	m := NewManager(Options{RetainBudget: b, Retention: 200 * time.Millisecond}, SinkFunc(func(ev Event) {
		if ev.Kind == EventClosed {
			atClosed.Store(b.Used())
		}
		sink.Deliver(ev)
	}))
	t.Cleanup(m.Close)
	mustStart(t, m, params(t, "big", "head", "-c", "300000", "/dev/zero"))
	sink.waitClosed(t, "big")
	if used := atClosed.Load(); used != 600000 {
		t.Fatalf("retained %d bytes when both processes had closed, want 600000", used)
	}
	// The first manager's process leaves at the end of its retention.
	deadline := time.Now().Add(10 * time.Second)
	for b.Used() != 300000 {
		if time.Now().After(deadline) {
			t.Fatalf("retained %d bytes after the retention, want 300000", b.Used())
		}
		time.Sleep(5 * time.Millisecond)
	}
	m2.Close()
	if b.Used() != 0 {
		t.Fatalf("retained %d bytes after Close, want 0", b.Used())
	}
}

// Stdin queued for processes that do not read it counts against a shared
// budget: past it, writes fail with a message naming it, and the bytes
// come back when the process ends.
func TestStdinBudget(t *testing.T) {
	t.Parallel()
	b := budget.New("queued stdin bytes", 64<<10)
	m, sink := newTestManager(t, Options{StdinBudget: b})
	p := params(t, "deaf", "sleep", "30")
	p.PipeStdin = true
	mustStart(t, m, p)
	chunk := make([]byte, 16<<10)
	// The pipe takes 64 KiB before the writer blocks; then the queue
	// fills the budget. A write can also fail before that, while the
	// writer goroutine (late on a loaded machine) has not yet moved the
	// queue into the pipe: the budget then empties, and the test writes
	// again once it has.
	deadline := time.Now().Add(10 * time.Second)
	for accepted := 0; ; {
		_, err := m.Write(protocol.WriteParams{ProcessID: "deaf", Chunk: chunk})
		if err == nil {
			if accepted++; accepted == 100 {
				t.Fatal("1.6 MiB of writes accepted for a process that never reads, with a 64 KiB budget")
			}
			continue
		}
		if !strings.Contains(err.Error(), "queued stdin bytes: 16384 more bytes would exceed the server-wide limit of 65536 bytes") {
			t.Fatalf("write past the budget: %v", err)
		}
		used := b.Used()
		if used > 48<<10 && used <= 64<<10 {
			break // the pipe is full and the writer blocked on it
		}
		if time.Now().After(deadline) {
			t.Fatalf("budget in use %d, want (48 KiB, 64 KiB]", used)
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.Terminate(protocol.TerminateParams{ProcessID: "deaf"})
	sink.waitClosed(t, "deaf")
	deadline = time.Now().Add(5 * time.Second)
	for b.Used() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d stdin bytes still counted after the process closed", b.Used())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

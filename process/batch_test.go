package process

import (
	"sync"
	"testing"
)

// batchSink is a recSink that also takes batches, and records them.
type batchSink struct {
	*recSink
	mu      sync.Mutex
	batches [][]Event
}

func (s *batchSink) DeliverBatch(evs []Event) {
	s.mu.Lock()
	s.batches = append(s.batches, append([]Event(nil), evs...))
	s.mu.Unlock()
	for _, ev := range evs {
		s.Deliver(ev)
	}
}

func (s *batchSink) batchOf(id string) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.batches {
		if len(b) > 0 && b[0].ProcessID == id {
			return b
		}
	}
	return nil
}

// A process whose output has ended when it exits delivers exited and
// closed together to a BatchSink; one whose output is still open (a
// background child holds it) delivers exited alone and closed later. The
// events and their order are the same either way.
func TestExitedAndClosedBatched(t *testing.T) {
	sink := &batchSink{recSink: newRecSink()}
	m := NewManager(Options{}, sink)
	t.Cleanup(m.Close)

	batched := 0
	for i := range 10 {
		id := "quick-" + string(rune('a'+i))
		if _, err := m.Start(params(t, id, "sh", "-c", "echo hi")); err != nil {
			t.Fatal(err)
		}
		evs := sink.waitClosed(t, id)
		n := len(evs)
		if n < 3 || evs[n-2].Kind != EventExited || evs[n-1].Kind != EventClosed || evs[n-1].Seq != evs[n-2].Seq+1 {
			t.Fatalf("%s: events %s, want output, exited, closed in seq order", id, describeEvents(evs))
		}
		if b := sink.batchOf(id); b != nil {
			if len(b) != 2 || b[0].Kind != EventExited || b[1].Kind != EventClosed {
				t.Fatalf("%s: batch %s, want exited and closed", id, describeEvents(b))
			}
			batched++
		}
	}
	// The reaper waits up to 20 ms for the readers; under load a run may
	// miss the batch, never all of them.
	if batched == 0 {
		t.Error("no quick process delivered exited and closed as one batch")
	}
	t.Logf("%d of 10 quick processes batched exited and closed", batched)

	if _, err := m.Start(params(t, "held", "sh", "-c", "sleep 1 & echo x")); err != nil {
		t.Fatal(err)
	}
	evs := sink.waitClosed(t, "held")
	if b := sink.batchOf("held"); b != nil {
		t.Fatalf("held: batch %s while a background child held the output open", describeEvents(b))
	}
	if n := len(evs); evs[n-2].Kind != EventExited || evs[n-1].Kind != EventClosed {
		t.Fatalf("held: events %s", describeEvents(evs))
	}
}

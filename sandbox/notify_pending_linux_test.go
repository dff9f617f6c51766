package sandbox

import (
	"testing"
	"time"
)

// TestPendingScanSchedule: one scan schedule per supervisor; a new reader
// makes a scan due at once unless the last scan's cost forbids it (no scan
// sooner than 10 times its duration after it), and the gaps double from
// 5 ms to 100 ms.
func TestPendingScanSchedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var sc scanSchedule
	sc.readerCame()
	if !sc.due(t0) {
		t.Fatal("a first reader's scan is not due at once")
	}
	// A cheap scan: next after 5 ms, then 10, 20, 40, 80, 100, 100.
	now := t0
	for _, want := range []time.Duration{5, 10, 20, 40, 80, 100, 100} {
		sc.scanned(now, now)
		if got := sc.next.Sub(now); got != want*time.Millisecond {
			t.Fatalf("gap %v, want %v ms", got, want)
		}
		now = sc.next
	}
	// A reader comes: due at once again (the cheap scan's floor is 5 ms).
	now = now.Add(time.Second)
	sc.readerCame()
	if !sc.due(now) {
		t.Fatal("a new reader's scan is not due at once")
	}
	// A costly scan (30 ms): nothing before 300 ms after it, even for a
	// new reader.
	end := now.Add(30 * time.Millisecond)
	sc.scanned(now, end)
	sc.readerCame()
	if sc.due(end.Add(299*time.Millisecond)) || !sc.due(end.Add(300*time.Millisecond)) {
		t.Fatalf("after a 30 ms scan the next is due at +%v, want +300ms", sc.next.Sub(end))
	}
}

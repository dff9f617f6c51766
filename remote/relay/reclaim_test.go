package relay

import (
	"sync/atomic"
	"testing"
	"time"
)

// A burst of takeovers returns the heap once, a full delay after the last
// of them; a stopped reclaimer returns nothing.
func TestReclaimerAfterTheLastNote(t *testing.T) {
	// The delay is long against the gap between notes, so that a loaded
	// machine's late wake-up cannot pass it between two notes.
	const delay = time.Second
	tests := []struct {
		name  string
		notes int
		gap   time.Duration // between notes
		stop  bool
		want  int32
	}{
		{"none", 0, 0, false, 0},
		{"one", 1, 0, false, 1},
		{"burst", 5, 0, false, 1},
		{"restarted", 2, 100 * time.Millisecond, false, 1},
		{"stopped", 3, 0, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var frees atomic.Int32
			var at atomic.Int64
			r := newReclaimer(delay, func() { frees.Add(1); at.Store(time.Now().UnixNano()) })
			defer r.stop()
			var last time.Time
			for i := range tt.notes {
				if i > 0 {
					time.Sleep(tt.gap)
				}
				last = time.Now()
				r.note()
			}
			if tt.stop {
				r.stop()
			}
			if tt.want > 0 {
				// A loaded machine may fire the timer late: wait for
				// it, then as long again as a second one would take.
				for end := time.Now().Add(10 * time.Second); frees.Load() < tt.want && time.Now().Before(end); {
					time.Sleep(10 * time.Millisecond)
				}
			}
			time.Sleep(delay + 500*time.Millisecond)
			if got := frees.Load(); got != tt.want {
				t.Fatalf("%d notes: free ran %d times, want %d", tt.notes, got, tt.want)
			}
			if tt.want > 0 {
				if after := time.Unix(0, at.Load()).Sub(last); after < delay {
					t.Fatalf("free ran %v after the last note, want at least %v", after, delay)
				}
			}
		})
	}
}

package relay

import (
	"runtime/debug"
	"sync"
	"time"
)

// Returning memory after a takeover. A node that becomes the home of a
// dead node's executors accepts hundreds of sockets in a second: their
// handshakes, registrations and the routes they bring grow the heap, and
// once they settle most of it is free again. The Go runtime returns free
// pages slowly, so a survivor kept 5-12 MB of free, unreturned heap for
// a while after a node kill (exec-bench fleet's mem_per_node_after,
// "heap free not returned"), near the 60 MB a node may hold. When no
// takeover has followed for reclaimDelay, the heap is collected and its
// free pages returned at once; under steady churn the timer keeps
// restarting and the runtime's own pacing stays in charge.

// takeoverReclaimDelay is how long after the last takeover the heap is
// returned.
const takeoverReclaimDelay = 2 * time.Second

// reclaimer runs free once no note has come for delay. The zero value is
// not usable: newReclaimer; a nil one does nothing (fabrics built by
// tests).
type reclaimer struct {
	mu      sync.Mutex
	delay   time.Duration
	free    func()
	timer   *time.Timer
	stopped bool
}

func newReclaimer(delay time.Duration, free func()) *reclaimer {
	if free == nil {
		free = debug.FreeOSMemory
	}
	return &reclaimer{delay: delay, free: free}
}

// note (re)starts the wait: free runs delay after the last note.
func (r *reclaimer) note() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(r.delay, r.fire)
		return
	}
	r.timer.Reset(r.delay)
}

func (r *reclaimer) fire() {
	r.mu.Lock()
	stopped := r.stopped
	r.mu.Unlock()
	if !stopped {
		r.free()
	}
}

// stop ends the reclaimer: no free runs after it returns, unless one had
// already started.
func (r *reclaimer) stop() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
	}
}

package jsonrpc

import (
	"runtime/debug"
	"sync"
	"time"
)

// Returning memory after large messages. The Go runtime gives freed heap
// back to the OS slowly, and only as garbage collections lower its heap
// goal; an idle server makes no garbage, so after a burst of 60 MiB
// messages it held about 1 GB of RSS for minutes (issue 14). Once a large
// message (in or out) is done with and none follows for reclaimDelay, the
// heap is collected and its free pages returned at once. A server busy
// with large messages is not slowed: the timer restarts with each one.

// largeMessage is the size from which a message arms the reclaim.
const largeMessage = 16 << 20

var reclaim = struct {
	sync.Mutex
	delay time.Duration
	free  func() // debug.FreeOSMemory; tests replace it
	timer *time.Timer
}{delay: 5 * time.Second, free: debug.FreeOSMemory}

// largeDone notes that a message of n bytes is no longer in use.
func largeDone(n int) {
	if n < largeMessage {
		return
	}
	reclaim.Lock()
	defer reclaim.Unlock()
	if reclaim.timer == nil {
		reclaim.timer = time.AfterFunc(reclaim.delay, reclaimNow)
		return
	}
	reclaim.timer.Reset(reclaim.delay)
}

func reclaimNow() {
	reclaim.Lock()
	free := reclaim.free
	reclaim.Unlock()
	// The kept large frame (encode.go) is dropped first, so that its
	// memory is returned with the rest.
	dropLarge()
	free()
}

// reclaimDelay is how long after the last large message the heap is
// returned (and the kept large frame dropped).
func reclaimDelay() time.Duration {
	reclaim.Lock()
	defer reclaim.Unlock()
	return reclaim.delay
}

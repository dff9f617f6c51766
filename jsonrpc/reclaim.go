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

var (
	reclaimDelay = 5 * time.Second
	freeOSMemory = debug.FreeOSMemory // replaced by tests

	reclaimMu    sync.Mutex
	reclaimTimer *time.Timer
)

// largeDone notes that a message of n bytes is no longer in use.
func largeDone(n int) {
	if n < largeMessage {
		return
	}
	reclaimMu.Lock()
	defer reclaimMu.Unlock()
	if reclaimTimer == nil {
		reclaimTimer = time.AfterFunc(reclaimDelay, func() { freeOSMemory() })
		return
	}
	reclaimTimer.Reset(reclaimDelay)
}

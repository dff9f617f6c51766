// Package budget shares a bound on bytes held in memory between many
// holders: connections reading messages, processes retaining output or
// queueing input. Each holder has its own bound as well; the budget is what
// keeps their sum bounded when a hostile client opens as many holders as
// the other limits allow.
package budget

import (
	"context"
	"fmt"
	"sync"
)

// Bytes is a byte budget. A nil *Bytes is unlimited: every method succeeds
// and nothing is counted.
type Bytes struct {
	name  string
	limit int64

	mu   sync.Mutex
	used int64
	wake chan struct{} // closed and replaced when bytes are released
}

// New returns a budget of limit bytes, or nil (unlimited) when limit <= 0.
// name says what is counted, for error messages.
func New(name string, limit int64) *Bytes {
	if limit <= 0 {
		return nil
	}
	return &Bytes{name: name, limit: limit, wake: make(chan struct{})}
}

// TryAcquire takes n bytes if they are free.
func (b *Bytes) TryAcquire(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

// Force takes n bytes even past the limit, for a holder that must keep
// something (its newest item); the overdraft makes others give back.
func (b *Bytes) Force(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

// Acquire takes n bytes, waiting for them to be released by others until
// ctx ends. It fails at once when n alone is over the limit.
func (b *Bytes) Acquire(ctx context.Context, n int64) error {
	if b == nil || n <= 0 {
		return nil
	}
	if n > b.limit {
		return b.Exhausted(n)
	}
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return b.Exhausted(n)
		}
	}
}

// Release gives n bytes back.
func (b *Bytes) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.used < 0 {
		b.mu.Unlock()
		panic(fmt.Sprintf("budget %s: released %d bytes more than were taken", b.name, -b.used))
	}
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

// Used reports the bytes held now.
func (b *Bytes) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Limit reports the limit (0 for unlimited).
func (b *Bytes) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Exhausted is the error for a request of n bytes that does not fit.
func (b *Bytes) Exhausted(n int64) error {
	return fmt.Errorf("%s: %d more bytes would exceed the server-wide limit of %d bytes (%d in use)", b.name, n, b.limit, b.Used())
}

package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Memory is returned to the OS once large messages are done with (issue
// 14: an idle server held ~1 GB of RSS minutes after ten 60 MiB messages),
// once per burst, and small messages never trigger it.
func TestLargeMessagesReturnMemory(t *testing.T) {
	var freed atomic.Int32
	const delay = 300 * time.Millisecond
	swap := func(d time.Duration, f func()) (time.Duration, func()) {
		reclaim.Lock()
		defer reclaim.Unlock()
		if reclaim.timer != nil {
			reclaim.timer.Stop()
			reclaim.timer = nil
		}
		oldD, oldF := reclaim.delay, reclaim.free
		reclaim.delay, reclaim.free = d, f
		return oldD, oldF
	}
	oldDelay, oldFree := swap(delay, func() { freed.Add(1) })
	t.Cleanup(func() { swap(oldDelay, oldFree) })

	s := newFakeStream()
	c := NewConn(s, Options{})
	handled := make(chan struct{}, 10)
	wait := runConn(c, context.Background(), func(m *Message) Action {
		if m.Method == "inline" {
			handled <- struct{}{}
			return Inline
		}
		return Concurrent(func() {
			// A handler that answers with a large result.
			c.Reply(m.ID, json.RawMessage(`"`+strings.Repeat("r", largeMessage)+`"`), nil)
			handled <- struct{}{}
		})
	})
	waitFreed := func(want int32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for freed.Load() < want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(delay + delay/4) // and no more than want
		if got := freed.Load(); got != want {
			t.Fatalf("memory returned %d times, want %d", got, want)
		}
	}

	for range 5 { // small messages
		s.send(`{"id":1,"method":"inline","params":"small"}`)
		<-handled
	}
	time.Sleep(delay + delay/4)
	if got := freed.Load(); got != 0 {
		t.Fatalf("memory returned %d times after small messages", got)
	}

	s.send(`{"id":2,"method":"inline","params":"` + strings.Repeat("x", largeMessage) + `"}`)
	<-handled
	waitFreed(1)

	s.send(`{"id":3,"method":"handler"}`) // a large reply
	<-handled
	s.next(t)
	waitFreed(2)

	for range 3 { // a burst: one reclaim after it
		largeDone(largeMessage)
	}
	waitFreed(3)

	close(s.in)
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Run: %v", err)
	}
}

// The last large frame is kept for the next large reply until the reclaim,
// which drops it before returning the heap: one buffer at most, never
// kept past the reclaim.
func TestLargeFrameKeptUntilReclaim(t *testing.T) {
	var freed atomic.Int32
	reclaim.Lock()
	oldF := reclaim.free
	reclaim.free = func() { freed.Add(1) }
	reclaim.Unlock()
	t.Cleanup(func() {
		reclaim.Lock()
		reclaim.free = oldF
		reclaim.Unlock()
		dropLarge()
	})
	frame := make([]byte, 1<<20, 2<<20)
	PutBuffer(frame)
	got := GetLargeBuffer(1<<20, 1<<20+64)
	if &got[0] != &frame[0] {
		t.Fatal("the kept large frame was not reused")
	}
	PutBuffer(got)
	reclaimNow()
	if freed.Load() != 1 {
		t.Fatal("reclaim did not run")
	}
	large.Lock()
	kept := large.buf
	large.Unlock()
	if kept != nil {
		t.Fatal("the large frame was still kept after the reclaim")
	}
	if got := GetLargeBuffer(1<<20, 1<<20+64); &got[0] == &frame[0] {
		t.Fatal("a dropped frame was handed out")
	}
}

// TestLargeFrameKeptAcrossBlocks: a reply built in a kept frame comes back
// starting a little into it (the room left for the frame prefix), so each
// trip shortens its capacity; a run of block-sized replies must still
// reuse one frame (with 512 bytes of headroom it was reallocated every
// fifth block).
func TestLargeFrameKeptAcrossBlocks(t *testing.T) {
	dropLarge()
	t.Cleanup(dropLarge)
	const n, c, start = 1400 << 10, 1400<<10 + 64, 108
	first := GetLargeBuffer(n, c)
	PutBuffer(first[start:])
	for i := range 200 {
		b := GetLargeBuffer(n, c)
		if &b[:cap(b)][cap(b)-1] != &first[:cap(first)][cap(first)-1] {
			t.Fatalf("block %d: a new frame was allocated", i)
		}
		PutBuffer(b[start:])
	}
}

// TestBlockFramesKeptInFlight: with several block replies in flight, each
// comes back to PutBuffer and all of them are handed out again (only the
// latest was kept: the others were allocated afresh for every block).
// At most blockSpares are kept beside the latest, and the reclaim drops
// them too.
func TestBlockFramesKeptInFlight(t *testing.T) {
	dropLarge()
	t.Cleanup(dropLarge)
	const n, c, inFlight = 1400 << 10, 1400<<10 + 64, 4 // the SDK's Download window
	ends := map[*byte]bool{}
	for round := range 50 {
		var bufs [][]byte
		for range inFlight {
			bufs = append(bufs, GetLargeBuffer(n, c))
		}
		for _, b := range bufs {
			end := &b[:cap(b)][cap(b)-1]
			if round > 0 && !ends[end] {
				t.Fatalf("round %d: a new frame was allocated", round)
			}
			ends[end] = true
			PutBuffer(b[108:])
		}
	}
	// A long transfer: each trip loses the frame's prefix, so every frame
	// grows too small in time (~600 rounds); fresh ones must then take
	// the stale spares' places, not be allocated in every round after.
	fresh := 0
	for range 3000 {
		var bufs [][]byte
		for range inFlight {
			bufs = append(bufs, GetLargeBuffer(n, c))
		}
		for _, b := range bufs {
			if end := &b[:cap(b)][cap(b)-1]; !ends[end] {
				ends[end] = true
				fresh++
			}
			PutBuffer(b[108:])
		}
	}
	if fresh > 40 {
		t.Fatalf("%d fresh frames in 3000 rounds of %d blocks in flight", fresh, inFlight)
	}
	// More frames than are kept: the surplus is let go.
	for range 2 * inFlight {
		PutBuffer(make([]byte, n, c))
	}
	large.Lock()
	kept := len(large.spares)
	large.Unlock()
	if kept > blockSpares {
		t.Fatalf("%d spare frames kept, bound %d", kept, blockSpares)
	}
	dropLarge()
	large.Lock()
	kept = len(large.spares)
	large.Unlock()
	if kept != 0 {
		t.Fatalf("%d spare frames kept after the drop", kept)
	}
}

// TestBlockMessagesKeptInFlight: incoming block messages taken with
// TakeLargeBuffer, several held at once (the SDK's Upload keeps 4 fs/writeBlock
// calls in flight), are all handed out again once recycled, from the
// spares as well as the latest; a spare over the limit is not taken.
func TestBlockMessagesKeptInFlight(t *testing.T) {
	dropLarge()
	t.Cleanup(dropLarge)
	const want, inFlight = 1400<<10 + 1, 4
	ends := map[*byte]bool{}
	for round := range 20 {
		var bufs [][]byte
		for range inFlight {
			b := TakeLargeBuffer(0, want, 2*want)
			if b == nil {
				if round > 0 {
					t.Fatalf("round %d: no kept buffer for a message in flight", round)
				}
				b = make([]byte, 0, want)
			}
			ends[&b[:cap(b)][cap(b)-1]] = true
			bufs = append(bufs, b)
		}
		for _, b := range bufs {
			PutBuffer(b[:0])
		}
	}
	if len(ends) != inFlight {
		t.Fatalf("%d distinct buffers for %d in flight", len(ends), inFlight)
	}
	// The kept ones are all over a smaller message's limit.
	for range inFlight {
		if b := TakeLargeBuffer(0, 300<<10, 600<<10); b != nil {
			t.Fatalf("a buffer of %d bytes taken for a limit of %d", cap(b), 600<<10)
		}
	}
}

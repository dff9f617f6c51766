package jsonrpc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// A peer that stops reading holds at most Options.QueueBytes of queued
// frames (issue 14, defect 2: 256 frames of several MiB each took the
// server to gigabytes), and it still gets every frame, in order, once it
// reads again. A frame over the byte bound is sent alone instead of
// waiting forever.
func TestConnQueueBoundedInBytes(t *testing.T) {
	const frameSize = 1 << 20
	cases := []struct {
		name      string
		opts      Options
		frames    []int // frame sizes
		wantBytes int   // queued bytes allowed while the peer does not read
	}{
		{"default bound", Options{}, repeat(frameSize, 48), DefaultQueueBytes},
		{"small bound", Options{QueueBytes: 3 * frameSize}, repeat(frameSize, 12), 3 * frameSize},
		{"frame over the bound", Options{QueueBytes: frameSize / 2}, []int{frameSize, 2 * frameSize, 10, frameSize}, 2 * frameSize},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			s := newFakeStream()
			s.gate = make(chan struct{}) // the peer does not read yet
			c := NewConn(s, tc.opts)
			wait := runConn(c, context.Background(), func(*Message) Action { return Inline })

			frame := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, tc.frames[i]) }
			// Nothing is queued: a sender writes the first frame itself
			// and stays in Write; the others go to the queue.
			first := make(chan error, 1)
			go func() { first <- c.Send(context.Background(), frame(0)) }()
			<-s.entered
			var accepted atomic.Int64
			accepted.Add(1)
			sent := make(chan error, 1)
			go func() {
				for i := 1; i < len(tc.frames); i++ {
					f := frame(i)
					if err := c.Send(context.Background(), f); err != nil {
						sent <- err
						return
					}
					accepted.Add(1)
				}
				sent <- nil
			}()
			// Wait until the sender is held (no progress for a while).
			last, still := int64(-1), 0
			for still < 5 {
				time.Sleep(50 * time.Millisecond)
				if n := accepted.Load(); n == last {
					still++
				} else {
					last, still = n, 0
				}
			}
			if int(last) == len(tc.frames) {
				t.Fatalf("all %d frames were accepted while the peer did not read", last)
			}
			queued := 0
			for _, n := range tc.frames[:last] {
				queued += n
			}
			if queued > tc.wantBytes {
				t.Fatalf("%d frames (%d bytes) queued for a peer that does not read, want at most %d bytes", last, queued, tc.wantBytes)
			}
			if got := c.QueuedBytes(); got > tc.wantBytes {
				t.Fatalf("QueuedBytes = %d, want at most %d", got, tc.wantBytes)
			}
			close(s.gate) // the peer reads again: every frame arrives, in order
			for i, n := range tc.frames {
				got := s.next(t)
				if len(got) != n || got[0] != byte('a'+i%26) {
					t.Fatalf("frame %d: %d bytes of %q, want %d of %q", i, len(got), got[0], n, byte('a'+i%26))
				}
			}
			if err := <-sent; err != nil {
				t.Fatalf("Send: %v", err)
			}
			if err := <-first; err != nil {
				t.Fatalf("first Send: %v", err)
			}
			close(s.in)
			if err := wait(); err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("Run: %v", err)
			}
			checkGoroutines(t, before)
		})
	}
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}

// tokenStream lets one Write through per token: the test paces the peer.
type tokenStream struct {
	*fakeStream
	tokens chan struct{}
}

func (s *tokenStream) Write(ctx context.Context, msg []byte, more bool) error {
	select {
	case <-s.tokens:
	case <-s.closed:
		return errors.New("fake stream closed")
	}
	return s.fakeStream.Write(ctx, msg, more)
}

// A frame larger than the room left is not starved by a producer of
// smaller frames that keeps the queue from ever emptying: senders are
// admitted in the order they started to wait.
func TestConnLargeFrameNotStarved(t *testing.T) {
	before := runtime.NumGoroutine()
	const small, frames = 1 << 10, 200
	s := &tokenStream{fakeStream: newFakeStream(), tokens: make(chan struct{})}
	c := NewConn(s, Options{QueueBytes: 8 * small})
	wait := runConn(c, context.Background(), func(*Message) Action { return Inline })

	produced := make(chan error, 1)
	var sent atomic.Int64
	go func() { // the producer: small frames, as fast as it may
		for i := range frames {
			if err := c.Send(context.Background(), bytes.Repeat([]byte{'s'}, small)); err != nil {
				produced <- err
				return
			}
			sent.Store(int64(i + 1))
		}
		produced <- nil
	}()
	// Wait until the producer is held by the full queue.
	for last, still := int64(-1), 0; still < 5; {
		time.Sleep(20 * time.Millisecond)
		if n := sent.Load(); n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
	bigSent := make(chan error, 1)
	go func() { bigSent <- c.Send(context.Background(), bytes.Repeat([]byte{'B'}, 16*small)) }()
	for waiting := false; !waiting; { // the big frame waits for room
		time.Sleep(time.Millisecond)
		c.wmu.Lock()
		for _, w := range c.waiters {
			waiting = waiting || w.n == 16*small
		}
		c.wmu.Unlock()
	}
	pos := -1
	for i := 0; i < frames+1; i++ {
		// A slow peer: the producer has time to refill the queue.
		time.Sleep(2 * time.Millisecond)
		s.tokens <- struct{}{}
		if f := s.next(t); f[0] == 'B' {
			pos = i
			break
		}
	}
	if pos < 0 || pos > 50 {
		t.Fatalf("the large frame was written at position %d of %d: starved by the small ones", pos, frames+1)
	}
	// Let the rest through before waiting for the large frame's Send: a
	// sender that wrote its frame may go on to write the frames queued
	// meanwhile (send's help), and each of those needs a token (a loaded
	// machine hung here).
	go func() {
		for {
			select {
			case s.tokens <- struct{}{}:
			case <-s.closed:
				return
			}
		}
	}()
	if err := <-bigSent; err != nil {
		t.Fatal(err)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	close(s.in)
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Run: %v", err)
	}
	checkGoroutines(t, before)
}

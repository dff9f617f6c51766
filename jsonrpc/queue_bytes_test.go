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
			wait := runConn(c, context.Background(), func(*Message) {})

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

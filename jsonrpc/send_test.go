package jsonrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// exclusiveStream fails the test if two Writes overlap: whoever writes
// (a sender holding the write token, or the writer goroutine) must be
// alone.
type exclusiveStream struct {
	*fakeStream
	t      *testing.T
	active atomic.Int32
}

func (s *exclusiveStream) Write(ctx context.Context, msg []byte, more bool) error {
	if n := s.active.Add(1); n != 1 {
		s.t.Errorf("%d Writes at once", n)
	}
	runtime.Gosched() // widen the window for an overlapping writer
	defer s.active.Add(-1)
	return s.fakeStream.Write(ctx, msg, more)
}

// Senders racing each other: every frame is written once, one Write at a
// time, and each sender's frames in the order it sent them, whether it
// wrote them itself, another sender wrote them, or the writer goroutine.
func TestConnSendersKeepTheirOrder(t *testing.T) {
	before := runtime.NumGoroutine()
	const senders, frames = 8, 100
	fs := newFakeStream()
	fs.out = make(chan []byte, senders*frames)
	fs.entered = make(chan struct{}, senders*frames)
	s := &exclusiveStream{fakeStream: fs, t: t}
	c := NewConn(s, Options{QueueLen: 4}) // small: senders also wait for room
	wait := runConn(c, context.Background(), func(*Message) Action { return Inline })

	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := range frames {
				// Long frames now and then, so that some batches are
				// too big for a sender to write for the others.
				pad := ""
				if i%7 == 0 {
					pad = string(make([]byte, helpBytes))
				}
				if err := c.Send(context.Background(), fmt.Appendf(nil, "%d %d %s", g, i, pad)); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	next := make([]int, senders)
	for range senders * frames {
		var g, i int
		if _, err := fmt.Sscanf(s.next(t), "%d %d", &g, &i); err != nil {
			t.Fatal(err)
		}
		if i != next[g] {
			t.Fatalf("sender %d: frame %d written after frame %d", g, i, next[g]-1)
		}
		next[g]++
	}
	close(fs.in)
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Run: %v", err)
	}
	checkGoroutines(t, before)
}

// Run ends while a sender is writing and frames wait behind it: they are
// all written, in order, before the stream is closed.
func TestConnFlushAfterASendersWrite(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newFakeStream()
	s.gate = make(chan struct{})
	c := NewConn(s, Options{})
	wait := runConn(c, context.Background(), func(*Message) Action { return Inline })
	first := make(chan error, 1)
	go func() { first <- c.Send(context.Background(), []byte(`1`)) }()
	<-s.entered // the sender writes frame 1 and waits for the peer
	for _, f := range []string{`2`, `3`} {
		if err := c.Send(context.Background(), []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	close(s.in)   // Run starts ending and flushes
	close(s.gate) // the peer reads again
	if err := <-first; err != nil {
		t.Fatalf("first Send: %v", err)
	}
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Run: %v", err)
	}
	for _, want := range []string{`1`, `2`, `3`} {
		select {
		case got := <-s.out:
			if string(got) != want {
				t.Fatalf("frame %s written, want %s", got, want)
			}
		default:
			t.Fatalf("frame %s not written before Run returned", want)
		}
	}
	checkGoroutines(t, before)
}

// BenchmarkSendReply measures a reply's trip through the Conn to the
// stream when nothing else is queued: the sender writes it itself.
func BenchmarkSendReply(b *testing.B) {
	s := &countStream{done: make(chan struct{})}
	c := NewConn(s, Options{})
	wait := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { wait <- c.Run(ctx, func(*Message) Action { return Inline }) }()
	frame := []byte(`{"id":1,"result":{"status":"accepted"}}`)
	b.ReportAllocs()
	for b.Loop() {
		f := append(GetBuffer(), frame...)
		if err := c.Send(context.Background(), f); err != nil {
			b.Fatal(err)
		}
	}
	cancel()
	close(s.done)
	<-wait
}

// countStream takes frames and drops them; Read blocks until done.
type countStream struct {
	n    atomic.Int64
	done chan struct{}
}

func (s *countStream) Read(ctx context.Context) ([]byte, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, io.EOF
	}
}

func (s *countStream) Write(_ context.Context, msg []byte, _ bool) error {
	s.n.Add(int64(len(msg)))
	return nil
}

func (s *countStream) Close() error     { return nil }
func (s *countStream) Describe() string { return "count" }

// The read loop writes an inline reply itself and the peer does not read:
// when Run's context ends, Run still returns (the stream is closed under
// the blocked write), and the write reports the end.
func TestConnRunEndsWithContextWhileTheReadLoopWrites(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newFakeStream()
	s.gate = make(chan struct{}) // never opened
	c := NewConn(s, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	replied := make(chan error, 1)
	wait := runConn(c, ctx, func(m *Message) Action {
		replied <- c.Send(context.Background(), []byte(`{"id":1,"result":"inline"}`))
		return Inline
	})
	s.send(`{"id":1,"method":"m"}`)
	<-s.entered // the read loop is in Write
	cancel()
	if err := wait(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if err := <-replied; !errors.Is(err, ErrClosed) {
		t.Errorf("the blocked reply = %v, want ErrClosed", err)
	}
	checkGoroutines(t, before)
}

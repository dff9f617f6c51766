package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// readItem is one result of fakeStream.Read.
type readItem struct {
	data []byte
	err  error
}

// fakeStream is an in-memory Stream. Messages fed to in are read in order;
// closing in is EOF. Written frames are copied to out. When gate is not nil,
// Write waits until gate is closed or the stream is.
type fakeStream struct {
	in       chan readItem
	out      chan []byte
	gate     chan struct{}
	entered  chan struct{} // receives once per Write call (buffered)
	writeErr error

	closeOnce sync.Once
	closed    chan struct{}
}

func newFakeStream() *fakeStream {
	return &fakeStream{
		in:      make(chan readItem, 100),
		out:     make(chan []byte, 1000),
		entered: make(chan struct{}, 1000),
		closed:  make(chan struct{}),
	}
}

func (s *fakeStream) Read(ctx context.Context) ([]byte, error) {
	select {
	case it, ok := <-s.in:
		if !ok {
			return nil, io.EOF
		}
		return it.data, it.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.closed:
		return nil, errors.New("fake stream closed")
	}
}

func (s *fakeStream) Write(_ context.Context, msg []byte, _ bool) error {
	s.entered <- struct{}{}
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-s.closed:
			return errors.New("fake stream closed")
		}
	}
	if s.writeErr != nil {
		return s.writeErr
	}
	s.out <- append([]byte(nil), msg...)
	return nil
}

func (s *fakeStream) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

func (s *fakeStream) Describe() string { return "fake peer" }

func (s *fakeStream) send(msg string) { s.in <- readItem{data: []byte(msg)} }

// next returns the next written frame, failing after a generous timeout.
func (s *fakeStream) next(t *testing.T) string {
	t.Helper()
	select {
	case f := <-s.out:
		return string(f)
	case <-time.After(5 * time.Second):
		t.Fatal("no frame written within 5s")
		return ""
	}
}

// runConn serves s in the background; the returned func waits for Run's
// result.
func runConn(c *Conn, ctx context.Context, h Handler) func() error {
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, h) }()
	return func() error {
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("Run did not return within 10s")
		}
	}
}

// checkGoroutines fails if the goroutine count does not come back to
// before within a few seconds.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines after Run, %d before:\n%s", n, before, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// echoDispatch replies to every request with its params.
func echoDispatch(c *Conn) Handler {
	return func(m *Message) Action {
		if m.Kind != KindRequest {
			return Inline
		}
		return Concurrent(func() { c.Reply(m.ID, json.RawMessage(m.Params), nil) })
	}
}

func TestConnRepliesInOrderWithConcurrencyOne(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newFakeStream()
	c := NewConn(s, Options{Concurrency: 1})
	wait := runConn(c, context.Background(), func(m *Message) Action {
		return Concurrent(func() {
			var n int
			_ = json.Unmarshal(m.Params, &n)
			// Earlier requests take longer: only strict ordering keeps
			// the replies in order.
			time.Sleep(time.Duration(10-n) * time.Millisecond)
			c.Reply(m.ID, n, nil)
		})
	})
	for i := range 10 {
		s.send(fmt.Sprintf(`{"id":%d,"method":"m","params":%d}`, i, i))
	}
	for i := range 10 {
		if got, want := s.next(t), fmt.Sprintf(`{"id":%d,"result":%d}`, i, i); got != want {
			t.Fatalf("reply %d = %s, want %s", i, got, want)
		}
	}
	close(s.in)
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Run: %v", err)
	}
	checkGoroutines(t, before)
}

func TestConnSlowHandlerDoesNotDelayOthers(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newFakeStream()
	c := NewConn(s, Options{Concurrency: 4})
	release := make(chan struct{})
	wait := runConn(c, context.Background(), func(m *Message) Action {
		return Concurrent(func() {
			if m.Method == "slow" {
				<-release
			}
			c.Reply(m.ID, m.Method, nil)
		})
	})
	s.send(`{"id":1,"method":"slow"}`)
	s.send(`{"id":2,"method":"fast"}`)
	s.send(`{"id":3,"method":"fast"}`)
	got := []string{s.next(t), s.next(t)}
	slices.Sort(got) // the two fast handlers race each other
	want := []string{`{"id":2,"result":"fast"}`, `{"id":3,"result":"fast"}`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("while the slow handler runs: %v, want %v", got, want)
	}
	close(release)
	if got := s.next(t); got != `{"id":1,"result":"slow"}` {
		t.Fatalf("slow reply = %s", got)
	}
	close(s.in)
	_ = wait()
	checkGoroutines(t, before)
}

func TestConnConcurrencyBound(t *testing.T) {
	s := newFakeStream()
	c := NewConn(s, Options{Concurrency: 2})
	if c.Concurrency() != 2 {
		t.Fatalf("Concurrency() = %d", c.Concurrency())
	}
	var mu sync.Mutex
	running, peak := 0, 0
	release := make(chan struct{})
	wait := runConn(c, context.Background(), func(m *Message) Action {
		return Concurrent(func() {
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			mu.Unlock()
			c.Reply(m.ID, nil, nil)
		})
	})
	for i := range 6 {
		s.send(fmt.Sprintf(`{"id":%d,"method":"m"}`, i))
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	for range 6 {
		s.next(t)
	}
	close(s.in)
	_ = wait()
	if peak != 2 {
		t.Errorf("peak concurrent handlers = %d, want 2", peak)
	}
}

func TestConnDecodeErrorsKeepTheConnection(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newFakeStream()
	c := NewConn(s, Options{Concurrency: 1})
	var mu sync.Mutex
	var dispatched []string
	wait := runConn(c, context.Background(), func(m *Message) Action {
		mu.Lock()
		dispatched = append(dispatched, m.Method)
		mu.Unlock()
		return echoDispatch(c)(m)
	})
	s.send(`not json`)
	s.send(`[{"id":1,"method":"m"}]`)
	s.send(`{"id":1.5,"method":"m"}`)
	s.in <- readItem{err: &DecodeError{Detail: "message of 99 bytes exceeds the limit of 10 bytes"}}
	s.send(`{"id":10}`)
	s.send(`{"id":"ok","method":"m","params":[1]}`)
	prefix := `{"error":{"code":-32600,"message":"failed to parse JSON-RPC message from fake peer: `
	for i, suffix := range []string{"", `expected a JSON-RPC object"},"id":-1}`,
		`data did not match any variant of untagged enum RequestId"},"id":-1}`,
		`message of 99 bytes exceeds the limit of 10 bytes"},"id":-1}`, "missing field `error`\"},\"id\":-1}"} {
		got := s.next(t)
		if !strings.HasPrefix(got, prefix) || !strings.HasSuffix(got, suffix) || !strings.HasSuffix(got, `"},"id":-1}`) {
			t.Errorf("error %d = %s, want %s...%s", i, got, prefix, suffix)
		}
	}
	if got := s.next(t); got != `{"id":"ok","result":[1]}` {
		t.Errorf("reply after errors = %s", got)
	}
	close(s.in)
	_ = wait()
	if len(dispatched) != 1 {
		t.Errorf("dispatched %v, want only the valid request", dispatched)
	}
	checkGoroutines(t, before)
}

func TestConnReplyErrors(t *testing.T) {
	s := newFakeStream()
	c := NewConn(s, Options{})
	wait := runConn(c, context.Background(), func(m *Message) Action {
		return Concurrent(func() {
			switch m.Method {
			case "proto":
				c.Reply(m.ID, nil, Errorf(CodeInvalidParams, "missing field `x`"))
			case "plain":
				c.Reply(m.ID, nil, errors.New("boom"))
			case "unencodable":
				c.Reply(m.ID, make(chan int), nil)
			case "direct":
				c.ReplyError(m.ID, &Error{Code: -32004, Message: "gone"})
			}
		})
	})
	s.send(`{"id":1,"method":"proto"}`)
	if got := s.next(t); got != "{\"error\":{\"code\":-32602,\"message\":\"missing field `x`\"},\"id\":1}" {
		t.Errorf("proto = %s", got)
	}
	s.send(`{"id":2,"method":"plain"}`)
	if got := s.next(t); got != `{"error":{"code":-32603,"message":"boom"},"id":2}` {
		t.Errorf("plain = %s", got)
	}
	s.send(`{"id":3,"method":"unencodable"}`)
	if got := s.next(t); !strings.HasPrefix(got, `{"error":{"code":-32603,"message":"`) || !strings.HasSuffix(got, `"id":3}`) {
		t.Errorf("unencodable = %s", got)
	}
	s.send(`{"id":"4","method":"direct"}`)
	if got := s.next(t); got != `{"error":{"code":-32004,"message":"gone"},"id":"4"}` {
		t.Errorf("direct = %s", got)
	}
	close(s.in)
	_ = wait()
}

func TestConnFlushesRepliesAtEnd(t *testing.T) {
	// The peer sends a request and closes its side at once: the reply of
	// the handler still running must be written before the stream closes.
	s := newFakeStream()
	c := NewConn(s, Options{})
	wait := runConn(c, context.Background(), func(m *Message) Action {
		return Concurrent(func() {
			time.Sleep(50 * time.Millisecond)
			c.Reply(m.ID, "late", nil)
		})
	})
	s.send(`{"id":1,"method":"m"}`)
	close(s.in)
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Run: %v", err)
	}
	select {
	case f := <-s.out:
		if string(f) != `{"id":1,"result":"late"}` {
			t.Errorf("reply = %s", f)
		}
	default:
		t.Fatal("the reply was not written before Run returned")
	}
	select {
	case <-s.closed:
	default:
		t.Error("stream not closed after Run")
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done not closed after Run")
	}
	if c.Context().Err() == nil {
		t.Error("Context not cancelled after Run")
	}
	if err := c.Send(context.Background(), []byte(`{}`)); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Run = %v, want ErrClosed", err)
	}
}

func TestConnBackPressure(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newFakeStream()
	s.gate = make(chan struct{}) // never opened: the peer does not read
	c := NewConn(s, Options{QueueLen: 2})
	wait := runConn(c, context.Background(), func(*Message) Action { return Inline })

	ctx := context.Background()
	// Nothing is queued: the sender writes frame 1 itself and waits in
	// Write while the peer does not read.
	first := make(chan error, 1)
	go func() { first <- c.Send(ctx, []byte(`{"n":1}`)) }()
	select {
	case <-s.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the sender never called Write")
	}
	for n := 2; n <= 3; n++ { // fill the queue
		if err := c.Send(ctx, []byte(fmt.Sprintf(`{"n":%d}`, n))); err != nil {
			t.Fatal(err)
		}
	}
	// A full queue makes Send wait, until its own context ends...
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := c.Send(tctx, []byte(`{"n":"timeout"}`))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send on a full queue = %v, want DeadlineExceeded", err)
	}
	// ... or until the connection ends.
	blocked := make(chan error, 1)
	go func() { blocked <- c.Send(ctx, []byte(`{"n":4}`)) }()
	select {
	case err := <-blocked:
		t.Fatalf("Send on a full queue returned %v without waiting", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(s.in) // the peer goes away; the stalled writer is aborted
	for name, ch := range map[string]chan error{"blocked": blocked, "writing": first} {
		select {
		case err := <-ch:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s Send = %v, want ErrClosed", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s Send did not return after the connection ended", name)
		}
	}
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Run: %v", err)
	}
	if err := c.Send(ctx, []byte(`{}`)); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after the end = %v, want ErrClosed", err)
	}
	checkGoroutines(t, before)
}

func TestConnWriteErrorEndsConnection(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newFakeStream()
	s.writeErr = errors.New("broken pipe")
	c := NewConn(s, Options{})
	wait := runConn(c, context.Background(), echoDispatch(c))
	s.send(`{"id":1,"method":"m"}`)
	// Run must end by itself: nothing more can be written.
	if err := wait(); err != nil {
		t.Logf("Run: %v", err)
	}
	if err := c.Send(context.Background(), []byte(`{}`)); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after a write error = %v, want ErrClosed", err)
	}
	checkGoroutines(t, before)
}

func TestConnRunEndsWithContext(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newFakeStream()
	c := NewConn(s, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	handlerCtx := make(chan context.Context, 1)
	wait := runConn(c, ctx, func(m *Message) Action {
		return Concurrent(func() {
			handlerCtx <- c.Context()
			<-c.Context().Done() // a long poll that ends with the connection
			c.Reply(m.ID, "cancelled", nil)
		})
	})
	s.send(`{"id":1,"method":"m"}`)
	<-handlerCtx
	cancel()
	if err := wait(); err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
	// The handler's reply was still flushed.
	select {
	case f := <-s.out:
		if string(f) != `{"id":1,"result":"cancelled"}` {
			t.Errorf("reply = %s", f)
		}
	default:
		t.Error("reply of the cancelled handler was lost")
	}
	checkGoroutines(t, before)
}

func TestConnReadErrorIsReturned(t *testing.T) {
	s := newFakeStream()
	c := NewConn(s, Options{})
	wait := runConn(c, context.Background(), func(*Message) Action { return Inline })
	boom := errors.New("transport exploded")
	s.in <- readItem{err: boom}
	if err := wait(); !errors.Is(err, boom) {
		t.Errorf("Run = %v, want %v", err, boom)
	}
	if c.Describe() != "fake peer" {
		t.Errorf("Describe = %q", c.Describe())
	}
}

func TestConnNotificationsAndResponsesReachDispatch(t *testing.T) {
	s := newFakeStream()
	c := NewConn(s, Options{})
	kinds := make(chan Kind, 10)
	wait := runConn(c, context.Background(), func(m *Message) Action { kinds <- m.Kind; return Inline })
	s.send(`{"method":"initialized"}`)
	s.send(`{"id":1,"result":{}}`)
	s.send(`{"id":2,"method":"m"}`)
	close(s.in)
	_ = wait()
	close(kinds)
	var got []Kind
	for k := range kinds {
		got = append(got, k)
	}
	if fmt.Sprint(got) != fmt.Sprint([]Kind{KindNotification, KindResponse, KindRequest}) {
		t.Errorf("kinds = %v", got)
	}
}

func TestConnDrainOnEOF(t *testing.T) {
	// A handler that answers "done" after 100ms, or "cancelled" if the
	// connection's context ends first.
	run := func(opts Options) string {
		s := newFakeStream()
		c := NewConn(s, opts)
		wait := runConn(c, context.Background(), func(m *Message) Action {
			return Concurrent(func() {
				select {
				case <-time.After(100 * time.Millisecond):
					c.Reply(m.ID, "done", nil)
				case <-c.Context().Done():
					c.Reply(m.ID, "cancelled", nil)
				}
			})
		})
		s.send(`{"id":1,"method":"m"}`)
		close(s.in) // EOF right behind the request (stdin closed by the client)
		if err := wait(); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("Run: %v", err)
		}
		select {
		case f := <-s.out:
			return string(f)
		default:
			return "no reply"
		}
	}
	if got := run(Options{DrainOnEOF: 5 * time.Second}); got != `{"id":1,"result":"done"}` {
		t.Errorf("with DrainOnEOF: %s", got)
	}
	if got := run(Options{}); got != `{"id":1,"result":"cancelled"}` {
		t.Errorf("without DrainOnEOF: %s", got)
	}
	// The drain is bounded.
	start := time.Now()
	if got := run(Options{DrainOnEOF: 10 * time.Millisecond}); got != `{"id":1,"result":"cancelled"}` {
		t.Errorf("with a short DrainOnEOF: %s", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %v with a 10ms drain", d)
	}
}

// framedStream names its framing, as the websocket transport does.
type framedStream struct{ *fakeStream }

func (framedStream) Framing() string { return "websocket" }

func TestConnParseErrorNamesFraming(t *testing.T) {
	s := newFakeStream()
	c := NewConn(framedStream{s}, Options{})
	wait := runConn(c, context.Background(), func(*Message) Action { return Inline })
	s.send(`[1]`)
	if got, want := s.next(t), `{"error":{"code":-32600,"message":"failed to parse websocket JSON-RPC message from fake peer: expected a JSON-RPC object"},"id":-1}`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	close(s.in)
	_ = wait()
}

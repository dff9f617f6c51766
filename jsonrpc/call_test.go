package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// pipeStream is one end of an in-memory duplex: what one end writes, the
// other reads. Closing either end ends both.
type pipeStream struct {
	in, out chan []byte
	done    chan struct{}
	once    *sync.Once
	name    string
}

func newPipe() (a, b *pipeStream) {
	ab, ba := make(chan []byte, 64), make(chan []byte, 64)
	done, once := make(chan struct{}), new(sync.Once)
	return &pipeStream{in: ba, out: ab, done: done, once: once, name: "a"},
		&pipeStream{in: ab, out: ba, done: done, once: once, name: "b"}
}

func (p *pipeStream) Read(ctx context.Context) ([]byte, error) {
	select {
	case m := <-p.in:
		return m, nil
	case <-p.done:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pipeStream) Write(ctx context.Context, msg []byte, _ bool) error {
	select {
	case p.out <- append([]byte(nil), msg...):
		return nil
	case <-p.done:
		return errors.New("pipe closed")
	}
}

func (p *pipeStream) Close() error     { p.once.Do(func() { close(p.done) }); return nil }
func (p *pipeStream) Describe() string { return "pipe " + p.name }

func ignore(*Message) Action { return Inline }

// request decodes a written frame as a request, failing on anything else.
func request(t *testing.T, frame string) *Message {
	t.Helper()
	m, err := Decode([]byte(frame), DefaultLimits)
	if err != nil || m.Kind != KindRequest {
		t.Fatalf("written frame %s: %v, kind %v; want a request", frame, err, m)
	}
	return m
}

func TestCallResponsesOutOfOrder(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newFakeStream()
	c := NewConn(s, Options{})
	wait := runConn(c, context.Background(), ignore)
	const n = 5
	results := make(chan string, n)
	for i := range n {
		go func() {
			var got string
			if err := c.Call(context.Background(), "echo", i, &got); err != nil {
				results <- "error: " + err.Error()
				return
			}
			results <- got
		}()
	}
	reqs := make([]*Message, n)
	for i := range n {
		reqs[i] = request(t, s.next(t))
	}
	// Answer last first, each with its own params: a caller that got
	// another's response would see another number.
	for i := n - 1; i >= 0; i-- {
		s.send(fmt.Sprintf(`{"id":%s,"result":"answer to %s"}`, reqs[i].ID, reqs[i].Params))
	}
	seen := map[string]bool{}
	for range n {
		seen[<-results] = true
	}
	for i := range n {
		if want := fmt.Sprintf("answer to %d", i); !seen[want] {
			t.Errorf("no call got %q; got %v", want, seen)
		}
	}
	close(s.in)
	if err := wait(); !errors.Is(err, io.EOF) {
		t.Fatalf("Run = %v", err)
	}
	checkGoroutines(t, before)
}

func TestCallCancelled(t *testing.T) {
	s := newFakeStream()
	c := NewConn(s, Options{})
	handled := make(chan *Message, 10)
	wait := runConn(c, context.Background(), func(m *Message) Action { handled <- m; return Inline })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, "slow", nil, nil) }()
	req := request(t, s.next(t))
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Call = %v, want context.Canceled", err)
	}
	// The late response is dropped: it reaches neither a caller nor the
	// handler, and the next call still works.
	s.send(fmt.Sprintf(`{"id":%s,"result":"late"}`, req.ID))
	go func() {
		var got string
		err := c.Call(context.Background(), "next", nil, &got)
		if err == nil && got != "fresh" {
			err = fmt.Errorf("result %q", got)
		}
		errc <- err
	}()
	req2 := request(t, s.next(t))
	s.send(fmt.Sprintf(`{"id":%s,"result":"fresh"}`, req2.ID))
	if err := <-errc; err != nil {
		t.Fatalf("Call after a cancelled one: %v", err)
	}
	c.cmu.Lock()
	if len(c.pending) != 0 {
		t.Errorf("%d calls still pending", len(c.pending))
	}
	c.cmu.Unlock()
	close(s.in)
	_ = wait()
	select {
	case m := <-handled:
		t.Errorf("the handler got %+v, want nothing", m)
	default:
	}
}

func TestCallFailsWhenTheConnectionEnds(t *testing.T) {
	for _, end := range []string{"eof", "close", "ctx"} {
		t.Run(end, func(t *testing.T) {
			before := runtime.NumGoroutine()
			s := newFakeStream()
			c := NewConn(s, Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := runConn(c, ctx, ignore)
			errc := make(chan error, 3)
			for range 3 {
				go func() { errc <- c.Call(context.Background(), "never", nil, nil) }()
			}
			for range 3 {
				s.next(t)
			}
			switch end {
			case "eof":
				close(s.in)
			case "close":
				c.Close()
			case "ctx":
				cancel()
			}
			for range 3 {
				select {
				case err := <-errc:
					if !errors.Is(err, ErrClosed) {
						t.Errorf("pending Call = %v, want ErrClosed", err)
					}
					if end == "eof" && !strings.Contains(fmt.Sprint(err), "EOF") {
						t.Errorf("pending Call = %v, want the cause (EOF) named", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("a pending call did not fail within 5s")
				}
			}
			err := wait()
			if end != "eof" && err != nil {
				t.Errorf("Run = %v, want nil when ended by %s", err, end)
			}
			if err := c.Call(context.Background(), "after", nil, nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Call after the end = %v, want ErrClosed", err)
			}
			if err := c.Notify(context.Background(), "after", nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Notify after the end = %v, want ErrClosed", err)
			}
			checkGoroutines(t, before)
		})
	}
}

func TestCallErrorResponse(t *testing.T) {
	s := newFakeStream()
	c := NewConn(s, Options{})
	wait := runConn(c, context.Background(), ignore)
	errc := make(chan error, 1)
	go func() { errc <- c.Call(context.Background(), "nope", nil, nil) }()
	req := request(t, s.next(t))
	s.send(fmt.Sprintf(`{"error":{"code":-32601,"message":"no such method","data":{"why":1}},"id":%s}`, req.ID))
	err := <-errc
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeMethodNotFound || e.Message != "no such method" || string(e.Data) != `{"why":1}` {
		t.Fatalf("Call = %#v, want the peer's error with its data", err)
	}
	if !errors.Is(err, ErrMethodNotFound) || errors.Is(err, ErrInvalidParams) {
		t.Errorf("errors.Is does not match by code: %v", err)
	}
	close(s.in)
	_ = wait()
}

// Responses to ids this end never issued go to the handler, which may
// answer them (the exec-server does, with -32600 to id -1).
func TestUnsolicitedResponsesReachTheHandler(t *testing.T) {
	s := newFakeStream()
	c := NewConn(s, Options{})
	got := make(chan string, 10)
	wait := runConn(c, context.Background(), func(m *Message) Action {
		if m.Kind == KindResponse {
			got <- string(m.ID)
			c.ReplyError(NoID, Errorf(CodeInvalidRequest, "unexpected response with id %s", m.ID))
		}
		return Inline
	})
	for _, r := range []string{`{"id":7,"result":1}`, `{"id":"s","result":1}`, `{"id":-1,"error":{"code":1,"message":"m"}}`} {
		s.send(r)
	}
	for _, want := range []string{"7", `"s"`, "-1"} {
		if id := <-got; id != want {
			t.Errorf("handler got id %s, want %s", id, want)
		}
		if f := s.next(t); !strings.Contains(f, `"code":-32600`) || !strings.Contains(f, `"id":-1`) {
			t.Errorf("reply %s", f)
		}
	}
	close(s.in)
	_ = wait()
}

// Both ends call: a's call reaches b's handler, which calls a back before
// it answers, from Concurrent work (an Inline handler must not call).
func TestPeersCallEachOther(t *testing.T) {
	before := runtime.NumGoroutine()
	sa, sb := newPipe()
	a, b := NewConn(sa, Options{}), NewConn(sb, Options{})
	waitA := runConn(a, context.Background(), func(m *Message) Action {
		if m.Kind == KindRequest && m.Method == "name" {
			a.Reply(m.ID, "alice", nil)
		}
		return Inline
	})
	notes := make(chan string, 1)
	waitB := runConn(b, context.Background(), func(m *Message) Action {
		switch {
		case m.Kind == KindNotification:
			notes <- m.Method
			return Inline
		case m.Kind == KindRequest && m.Method == "greet":
			return Concurrent(func() {
				var name string
				err := b.Call(context.Background(), "name", nil, &name)
				b.Reply(m.ID, "hello "+name, err)
			})
		case m.Kind == KindRequest:
			b.ReplyError(m.ID, Errorf(CodeMethodNotFound, "no %s", m.Method))
		}
		return Inline
	})
	var got string
	if err := a.Call(context.Background(), "greet", nil, &got); err != nil || got != "hello alice" {
		t.Fatalf("greet = %q, %v", got, err)
	}
	var raw json.RawMessage
	if err := a.Call(context.Background(), "other", nil, &raw); !errors.Is(err, ErrMethodNotFound) {
		t.Fatalf("other = %v, want method not found", err)
	}
	if err := a.Notify(context.Background(), "ping", struct{}{}); err != nil {
		t.Fatal(err)
	}
	if m := <-notes; m != "ping" {
		t.Errorf("notification %q", m)
	}
	a.Close()
	if err := waitA(); err != nil {
		t.Errorf("a.Run = %v", err)
	}
	if err := waitB(); err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("b.Run = %v", err)
	}
	checkGoroutines(t, before)
}

func TestErrorIsMatchesCode(t *testing.T) {
	tests := []struct {
		err    error
		target error
		want   bool
	}{
		{Errorf(CodeInvalidParams, "x"), ErrInvalidParams, true},
		{fmt.Errorf("wrapped: %w", Errorf(-32004, "gone")), &Error{Code: -32004}, true},
		{Errorf(CodeInvalidParams, "x"), ErrInvalidRequest, false},
		{errors.New("plain"), ErrInternal, false},
	}
	for _, tt := range tests {
		if got := errors.Is(tt.err, tt.target); got != tt.want {
			t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
		}
	}
	if e := ToError(errors.New("boom")); e.Code != CodeInternalError || e.Message != "boom" {
		t.Errorf("ToError = %+v", e)
	}
	if ToError(nil) != nil {
		t.Error("ToError(nil) is not nil")
	}
	if got := string(AppendError(nil, NoID, &Error{Code: 1, Message: "m", Data: json.RawMessage(`[1]`)})); got != `{"error":{"code":1,"data":[1],"message":"m"},"id":-1}` {
		t.Errorf("AppendError with data = %s", got)
	}
}

// Work started with GoDetached from a handler's work outlives the reply,
// and Run waits for it; once the connection has ended nothing starts.
func TestGoDetachedFromWork(t *testing.T) {
	s := newFakeStream()
	c := NewConn(s, Options{})
	release := make(chan struct{})
	finished := make(chan struct{})
	detached := make(chan struct{})
	wait := runConn(c, context.Background(), func(m *Message) Action {
		id := append(json.RawMessage(nil), m.ID...)
		return Concurrent(func() {
			c.Reply(id, "replied", nil)
			if !c.GoDetached(func() {
				<-release
				close(finished)
			}) {
				t.Error("GoDetached refused while the connection runs")
			}
			close(detached)
		})
	})
	s.send(`{"id":1,"method":"stream"}`)
	s.next(t)
	// The peer goes once the work has detached: ending the stream
	// between the reply and GoDetached ends the connection first, and
	// GoDetached then rightly refuses (a loaded machine did this).
	<-detached
	close(s.in)
	ended := make(chan error, 1)
	go func() { ended <- wait() }()
	select {
	case <-ended:
		t.Fatal("Run returned while detached work was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-finished
	if err := <-ended; err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if c.GoDetached(func() { t.Error("ran after the end") }) {
		t.Error("GoDetached accepted work after the end")
	}
}

// With EndOnDecodeError (a client's connection), a message the peer sent
// that cannot be used (here: over the stream's size limit, or malformed)
// ends the connection and fails the calls waiting, naming why; without it
// the call it answered would wait forever. Without the option the
// connection answers it and reads on (a server's behaviour).
func TestEndOnDecodeError(t *testing.T) {
	cases := []struct {
		name string
		item readItem
	}{
		{"too large", readItem{err: &DecodeError{Detail: "message of 90000000 bytes exceeds the limit of 83886080 bytes"}}},
		{"malformed", readItem{data: []byte(`{"id":1,"result":`)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeStream()
			c := NewConn(s, Options{EndOnDecodeError: true})
			wait := runConn(c, context.Background(), ignore)
			errc := make(chan error, 1)
			go func() { errc <- c.Call(context.Background(), "fs/readFile", nil, nil) }()
			s.next(t)
			s.in <- tc.item
			select {
			case err := <-errc:
				if !errors.Is(err, ErrClosed) {
					t.Errorf("pending Call = %v, want ErrClosed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the pending call did not fail within 5s")
			}
			var de *DecodeError
			if err := wait(); !errors.As(err, &de) {
				t.Errorf("Run = %v, want the *DecodeError", err)
			}
		})
	}
	// Control: a server's connection answers and reads on.
	s := newFakeStream()
	c := NewConn(s, Options{})
	wait := runConn(c, context.Background(), ignore)
	s.in <- cases[0].item
	if f := s.next(t); !strings.Contains(f, `"id":-1`) {
		t.Errorf("answer %s, want an error with id -1", f)
	}
	close(s.in)
	_ = wait()
}

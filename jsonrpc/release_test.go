package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
)

// releasingStream records Release calls.
type releasingStream struct {
	*fakeStream
	mu       sync.Mutex
	released map[string]int
}

func (s *releasingStream) Release(msg []byte) {
	s.mu.Lock()
	s.released[string(msg)]++
	s.mu.Unlock()
}

// Every message a Releaser stream returns is released exactly once: at
// once when it is malformed or handled inline, after its work when it is
// handed on as Concurrent, and only then.
func TestConnReleasesEveryMessageOnce(t *testing.T) {
	s := &releasingStream{fakeStream: newFakeStream(), released: map[string]int{}}
	c := NewConn(s, Options{})
	hold := make(chan struct{})
	inHandler := make(chan struct{})
	dispatch := func(m *Message) Action {
		if m.Kind != KindRequest {
			return Inline // a notification: dropped
		}
		switch m.Method {
		case "inline":
			c.Reply(m.ID, json.RawMessage(`1`), nil)
		case "held":
			return Concurrent(func() {
				close(inHandler)
				<-hold
				c.Reply(m.ID, json.RawMessage(`2`), nil)
			})
		}
		return Inline
	}
	wait := runConn(c, context.Background(), dispatch)
	msgs := []string{
		`{"id":1,"method":"held"}`,
		`{"id":2,"method":"inline"}`,
		`not json`,
		`{"method":"note"}`,
	}
	for _, m := range msgs {
		s.send(m)
	}
	<-inHandler
	s.next(t) // the inline reply
	s.next(t) // the parse error; nothing for the notification
	s.mu.Lock()
	if n := s.released[msgs[0]]; n != 0 {
		t.Errorf("message released %d times while its handler still runs", n)
	}
	s.mu.Unlock()
	close(hold)
	s.next(t)
	close(s.in)
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if n := s.released[m]; n != 1 {
			t.Errorf("%s released %d times, want 1", m, n)
		}
	}
}

// A request served as Detached work (a long poll) does not hold its
// message while it waits: the message is released once the Handler
// returns.
func TestConnDetachedReleasesAtOnce(t *testing.T) {
	s := &releasingStream{fakeStream: newFakeStream(), released: map[string]int{}}
	c := NewConn(s, Options{})
	hold := make(chan struct{})
	dispatched := make(chan struct{})
	wait := runConn(c, context.Background(), func(m *Message) Action {
		id := append(json.RawMessage(nil), m.ID...)
		close(dispatched)
		return Detached(func() {
			<-hold
			c.Reply(id, json.RawMessage(`1`), nil)
		})
	})
	msg := `{"id":"poll","method":"wait"}`
	s.send(msg)
	<-dispatched
	s.send(`{"id":"x"`) // the read loop has moved on: a parse error
	s.next(t)
	s.mu.Lock()
	n := s.released[msg]
	s.mu.Unlock()
	if n != 1 {
		t.Errorf("waiting request's message released %d times, want 1", n)
	}
	close(hold)
	if got := s.next(t); got != `{"id":"poll","result":1}` {
		t.Errorf("reply %s", got)
	}
	close(s.in)
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
}

// Responses are released too: once their Call has decoded them, once
// dropped (the Call gave up), once handled (unsolicited).
func TestConnReleasesResponsesOnce(t *testing.T) {
	s := &releasingStream{fakeStream: newFakeStream(), released: map[string]int{}}
	c := NewConn(s, Options{})
	wait := runConn(c, context.Background(), func(*Message) Action { return Inline })
	errc := make(chan error, 1)
	go func() {
		var v int
		errc <- c.Call(context.Background(), "answered", nil, &v)
	}()
	answered := fmt.Sprintf(`{"id":%s,"result":1}`, request(t, s.next(t)).ID)
	s.send(answered)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { errc <- c.Call(ctx, "abandoned", nil, nil) }()
	late := fmt.Sprintf(`{"id":%s,"result":2}`, request(t, s.next(t)).ID)
	cancel()
	<-errc
	s.send(late)
	unsolicited := `{"id":"other","result":3}`
	s.send(unsolicited)
	close(s.in)
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range []string{answered, late, unsolicited} {
		if n := s.released[m]; n != 1 {
			t.Errorf("%s released %d times, want 1", m, n)
		}
	}
}

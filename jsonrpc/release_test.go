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

// recyclingStream records Release and Recycle calls.
type recyclingStream struct {
	releasingStream
	recycled map[string]int
}

func (s *recyclingStream) Recycle(msg []byte) {
	s.mu.Lock()
	s.recycled[string(msg)]++
	s.mu.Unlock()
}

// A message the Handler marks Reusable is recycled (Recycler) instead of
// released, once: after its work, or when the work calls ReleaseNow (and
// not again after it); unmarked messages are released as before.
func TestConnRecyclesReusableMessagesOnce(t *testing.T) {
	s := &recyclingStream{releasingStream: releasingStream{fakeStream: newFakeStream(), released: map[string]int{}}, recycled: map[string]int{}}
	c := NewConn(s, Options{})
	early := make(chan [2]int, 1)
	dispatch := func(m *Message) Action {
		if m.Method != "plain" {
			m.Reusable()
		}
		return Concurrent(func() {
			id := append(json.RawMessage(nil), m.ID...)
			if m.Method == "early" {
				c.ReleaseNow(m)
				s.mu.Lock()
				early <- [2]int{s.recycled[`{"id":3,"method":"early"}`], s.released[`{"id":3,"method":"early"}`]}
				s.mu.Unlock()
			}
			c.Reply(id, json.RawMessage(`1`), nil)
		})
	}
	wait := runConn(c, context.Background(), dispatch)
	msgs := []string{`{"id":1,"method":"plain"}`, `{"id":2,"method":"reusable"}`, `{"id":3,"method":"early"}`}
	for _, m := range msgs {
		s.send(m)
		s.next(t)
	}
	if got := <-early; got != [2]int{1, 0} {
		t.Errorf("after ReleaseNow: recycled %d, released %d times; want 1, 0", got[0], got[1])
	}
	close(s.in)
	if err := wait(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range msgs {
		wantRel, wantRec := 0, 1
		if i == 0 {
			wantRel, wantRec = 1, 0
		}
		if s.released[m] != wantRel || s.recycled[m] != wantRec {
			t.Errorf("%s: released %d, recycled %d times; want %d, %d", m, s.released[m], s.recycled[m], wantRel, wantRec)
		}
	}
}

// A Detached message is released, never recycled, even when the Handler
// marked it Reusable: the mark covers work that has returned, and Detached
// work is still running when the message is let go, so a Recycler must not
// hand its buffer to the next message.
func TestConnDetachedNeverRecycles(t *testing.T) {
	s := &recyclingStream{releasingStream: releasingStream{fakeStream: newFakeStream(), released: map[string]int{}}, recycled: map[string]int{}}
	c := NewConn(s, Options{})
	hold := make(chan struct{})
	wait := runConn(c, context.Background(), func(m *Message) Action {
		m.Reusable()
		id := append(json.RawMessage(nil), m.ID...)
		return Detached(func() {
			<-hold
			c.Reply(id, json.RawMessage(`1`), nil)
		})
	})
	msg := `{"id":"poll","method":"wait"}`
	s.send(msg)
	s.send(`{"id":"x"`) // the read loop has moved on: a parse error
	s.next(t)
	s.mu.Lock()
	rel, rec := s.released[msg], s.recycled[msg]
	s.mu.Unlock()
	if rel != 1 || rec != 0 {
		t.Errorf("detached Reusable message: released %d, recycled %d times; want 1, 0", rel, rec)
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

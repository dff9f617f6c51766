package jsonrpc

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// moreStream records each write and its more hint.
type moreStream struct {
	mu     sync.Mutex
	writes []string
	closed chan struct{}
}

func (s *moreStream) Read(ctx context.Context) ([]byte, error) {
	select {
	case <-s.closed:
		return nil, fmt.Errorf("closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *moreStream) Write(_ context.Context, msg []byte, more bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, fmt.Sprintf("%s more=%v", msg, more))
	return nil
}

func (s *moreStream) Close() error { return nil }

func (s *moreStream) Describe() string { return "more stream" }

// SendBatch tells the stream that more follows after every frame but the
// last, so that a packing stream sends them together; Send never does.
func TestSendBatchHintsMore(t *testing.T) {
	s := &moreStream{closed: make(chan struct{})}
	c := NewConn(s, Options{})
	wait := runConn(c, context.Background(), func(*Message) Action { return Inline })
	ctx := context.Background()
	frame := func(n int) []byte { return append(GetBuffer(), fmt.Sprintf(`{"n":%d}`, n)...) }
	if err := c.Send(ctx, frame(1)); err != nil {
		t.Fatal(err)
	}
	if err := c.SendBatch(ctx, frame(2), frame(3), frame(4)); err != nil {
		t.Fatal(err)
	}
	if err := c.SendBatch(ctx, frame(5)); err != nil {
		t.Fatal(err)
	}
	close(s.closed)
	_ = wait()
	want := []string{`{"n":1} more=false`, `{"n":2} more=true`, `{"n":3} more=true`, `{"n":4} more=false`, `{"n":5} more=false`}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fmt.Sprint(s.writes) != fmt.Sprint(want) {
		t.Fatalf("writes %q, want %q", s.writes, want)
	}
}

package client

import (
	"context"
	"fmt"
	"io"
	"testing"
)

// fakeStream records writes and serves queued reads.
type fakeStream struct {
	writes []string
	reads  chan []byte
}

func (f *fakeStream) Read(ctx context.Context) ([]byte, error) {
	select {
	case m, ok := <-f.reads:
		if !ok {
			return nil, io.EOF
		}
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeStream) Write(_ context.Context, msg []byte, more bool) error {
	f.writes = append(f.writes, fmt.Sprintf("%s/%v", msg, more))
	return nil
}

func (f *fakeStream) Close() error     { return nil }
func (f *fakeStream) Describe() string { return "fake" }

func TestStreamRWC(t *testing.T) {
	f := &fakeStream{reads: make(chan []byte, 2)}
	s := newStreamRWC(f)
	for _, p := range []string{`{"a"`, ":1}\n{", "\"b\":2}\n\n", "[3]\n[4]\n", "[5]\n\n[6", "]\n"} {
		if n, err := s.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	want := `[{"a":1}/false {"b":2}/false [3]/true [4]/false [5]/false [6]/false]`
	if got := fmt.Sprint(f.writes); got != want {
		t.Fatalf("messages %s, want %s", got, want)
	}
	f.reads <- []byte(`{"x":1}`)
	close(f.reads)
	got, err := io.ReadAll(readerFunc(func(p []byte) (int, error) {
		if len(p) > 3 {
			p = p[:3] // small reads: a message spans several
		}
		return s.Read(p)
	}))
	if err != nil || string(got) != "{\"x\":1}\n" {
		t.Fatalf("read %q, %v", got, err)
	}
}

type readerFunc func([]byte) (int, error)

func (r readerFunc) Read(p []byte) (int, error) { return r(p) }

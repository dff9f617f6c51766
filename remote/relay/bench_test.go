package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// What the relay adds to a frame's round trip and to throughput, against a
// direct websocket on loopback: an echo peer answers every frame.

func echo(ctx context.Context, c *websocket.Conn) {
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if c.Write(ctx, typ, b) != nil {
			return
		}
	}
}

// benchPair returns the harness-side socket and a stream id whose frames
// come back: through the relay to an echoing executor, or direct to an
// echo server.
func benchPair(b *testing.B, viaRelay bool) *websocket.Conn {
	b.Helper()
	if !viaRelay {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			c.SetReadLimit(1 << 20)
			echo(context.Background(), c)
		}))
		b.Cleanup(hs.Close)
		c, _, err := websocket.Dial(context.Background(), "ws"+hs.URL[4:], nil)
		if err != nil {
			b.Fatal(err)
		}
		c.SetReadLimit(1 << 20)
		b.Cleanup(func() { c.CloseNow() })
		return c
	}
	rec := newRecorder()
	s, err := New(Options{InsecureNoAuth: true, OnEvent: rec.add})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s)
	b.Cleanup(func() { s.Close(); hs.Close() })
	r := &testRelay{Server: s, base: hs.URL, rec: rec}
	reg := r.register(b, "E", randomKey())
	e, _, err := websocket.Dial(context.Background(), reg["url"].(string), nil)
	if err != nil {
		b.Fatal(err)
	}
	e.SetReadLimit(1 << 20)
	b.Cleanup(func() { e.CloseNow() })
	go echo(context.Background(), e)
	for {
		if _, _, ok := s.router.Executor("E"); ok {
			break
		}
		time.Sleep(time.Millisecond)
	}
	bundle := r.connect(b, "E", randomKey())
	h, _, err := websocket.Dial(context.Background(), bundle["url"].(string), nil)
	if err != nil {
		b.Fatal(err)
	}
	h.SetReadLimit(1 << 20)
	b.Cleanup(func() { h.CloseNow() })
	return h
}

func BenchmarkRoundTrip(b *testing.B) {
	for _, via := range []struct {
		name  string
		relay bool
	}{{"direct", false}, {"relay", true}} {
		b.Run(via.name, func(b *testing.B) {
			c := benchPair(b, via.relay)
			msg := dataFrame("0f8b1d2e-aaaa-4bbb-8ccc-123456789abc", 1, make([]byte, 100))
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
					b.Fatal(err)
				}
				if _, _, err := c.Read(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkThroughput(b *testing.B) {
	for _, via := range []struct {
		name  string
		relay bool
	}{{"direct", false}, {"relay", true}} {
		b.Run(via.name, func(b *testing.B) {
			c := benchPair(b, via.relay)
			msg := dataFrame("0f8b1d2e-aaaa-4bbb-8ccc-123456789abc", 1, make([]byte, 61456))
			ctx := context.Background()
			b.SetBytes(int64(len(msg)))
			b.ResetTimer()
			done := make(chan error, 1)
			n := b.N
			go func() {
				for range n {
					if _, _, err := c.Read(ctx); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			sent := 0
			for sent < n {
				if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
					b.Fatal(err)
				}
				sent++
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

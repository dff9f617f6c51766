package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
)

// A dialled websocket and an accepted one carry a jsonrpc.Conn each: both
// ends call each other.
func TestDialWebSocketBothEndsCall(t *testing.T) {
	srv := newWSServer(t, HandlerOptions{
		Serve: func(ctx context.Context, s *WebSocket) {
			c := jsonrpc.NewConn(s, jsonrpc.Options{})
			_ = c.Run(ctx, func(m *jsonrpc.Message) jsonrpc.Action {
				if m.Kind != jsonrpc.KindRequest {
					return jsonrpc.Inline
				}
				// Ask the caller who it is before answering.
				return jsonrpc.Concurrent(func() {
					var who string
					err := c.Call(ctx, "whoami", nil, &who)
					c.Reply(m.ID, "hello "+who, err)
				})
			})
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, err := DialWebSocket(ctx, wsURL(srv), DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := jsonrpc.NewConn(ws, jsonrpc.Options{})
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(m *jsonrpc.Message) jsonrpc.Action {
			if m.Kind == jsonrpc.KindRequest {
				c.Reply(m.ID, "client", nil)
			}
			return jsonrpc.Inline
		})
	}()
	var got string
	if err := c.Call(ctx, "greet", nil, &got); err != nil || got != "hello client" {
		t.Fatalf("greet = %q, %v", got, err)
	}
	if err := ws.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestDialWebSocketRefused(t *testing.T) {
	srv := newWSServer(t, HandlerOptions{Authenticate: func(*http.Request) error { return errors.New("bad token") }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := DialWebSocket(ctx, wsURL(srv), DialOptions{})
	var de *DialError
	if !errors.As(err, &de) || de.StatusCode != http.StatusUnauthorized || de.Body != "bad token" {
		t.Fatalf("DialWebSocket = %#v, want a DialError with 401 and the body", err)
	}
	// A port nothing listens on (any more).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = DialWebSocket(ctx, "ws://"+addr, DialOptions{})
	if !errors.As(err, &de) || de.StatusCode != 0 || de.Err == nil {
		t.Fatalf("DialWebSocket to a closed port = %#v", err)
	}
}

// The stdio stream needs nothing of a server: a client writes requests on
// one pipe and reads responses on another.
func TestStdioBothWays(t *testing.T) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	a := jsonrpc.NewConn(NewStdio(ar, aw, aw, 0), jsonrpc.Options{})
	b := jsonrpc.NewConn(NewStdio(br, bw, bw, 0), jsonrpc.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	echo := func(c *jsonrpc.Conn) jsonrpc.Handler {
		return func(m *jsonrpc.Message) jsonrpc.Action {
			if m.Kind == jsonrpc.KindRequest {
				c.Reply(m.ID, m.Params, nil)
			}
			return jsonrpc.Inline
		}
	}
	da, db := make(chan error, 1), make(chan error, 1)
	go func() { da <- a.Run(ctx, echo(a)) }()
	go func() { db <- b.Run(ctx, echo(b)) }()
	for _, c := range []*jsonrpc.Conn{a, b} {
		var got []int
		if err := c.Call(ctx, "echo", []int{1, 2}, &got); err != nil || len(got) != 2 {
			t.Fatalf("echo = %v, %v", got, err)
		}
	}
	a.Close() // closes a's writer: b reads EOF
	if err := <-db; !errors.Is(err, io.EOF) {
		t.Errorf("b.Run = %v, want EOF", err)
	}
	b.Close()
	if err := <-da; err != nil {
		t.Errorf("a.Run = %v", err)
	}
}

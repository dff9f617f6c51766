package client_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/transport"
)

// A Client made with NewClient reconnects by calling its Dialer again, and
// resumes its session on the new stream.
func TestNewClientRedials(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		url := s.listen(t)
		var mu sync.Mutex
		var streams []*transport.WebSocket
		dial := func(ctx context.Context) (jsonrpc.Stream, error) {
			ws, err := transport.DialWebSocket(ctx, url, transport.DialOptions{})
			if err != nil {
				return nil, err
			}
			mu.Lock()
			streams = append(streams, ws)
			mu.Unlock()
			return ws, nil
		}
		c, err := client.NewClient(ctx, dial, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sid := c.SessionID()
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", "read x; echo got $x"}, StdinPipe: true})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		streams[0].Close() // the connection drops under the client
		mu.Unlock()
		if _, err := c.EnvironmentStatus(ctx); err != nil {
			t.Fatalf("status after the drop: %v", err)
		}
		mu.Lock()
		n := len(streams)
		mu.Unlock()
		// A redial may fail and be retried (3 dials were seen once in CI
		// against the reference): one new connection generation is what
		// counts.
		if n < 2 || client.Generation(c) != 2 {
			t.Errorf("%d dials, generation %d; want at least 2 and 2", n, client.Generation(c))
		}
		if c.SessionID() != sid {
			t.Errorf("session %s after the reconnect, want %s", c.SessionID(), sid)
		}
		// The process started on the first connection is still ours.
		if err := p.Write(ctx, []byte("hi\n")); err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(p.Stdout())
		if err != nil || string(out) != "got hi\n" {
			t.Fatalf("stdout %q, %v", out, err)
		}
		if code, err := p.Wait(ctx); err != nil || code != 0 {
			t.Fatalf("Wait = %d, %v", code, err)
		}
	})
}

func TestNewClientDialError(t *testing.T) {
	boom := errors.New("no route")
	_, err := client.NewClient(testCtx(t), func(context.Context) (jsonrpc.Stream, error) { return nil, boom }, client.Options{})
	if !errors.Is(err, boom) {
		t.Fatalf("NewClient = %v, want the dial's error", err)
	}
}

package executor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/remote/frame"
)

// TestSocketEndNeverBlocks: however many streams' writes fail on a dying
// socket, recording why it ended never blocks. Under load, four failed
// writes filled the reasons (a direct write per stream, see enqueue), the
// read loop's own reason then blocked serveConn forever, and the executor
// never redialled: TestReliableThroughFaults/executor_socket_cut timed out
// with "executor did not stop".
func TestSocketEndNeverBlocks(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ws.CloseNow()
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.CloseNow() // every write now fails
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	c := &conn{
		e: &executor{cfg: Config{PongTimeout: 5 * time.Second}}, ws: ws, ctx: sctx, root: ctx,
		out: make(chan []byte, outQueue), ctrl: make(chan []byte, ctrlQueue), reason: make(chan string, 4),
	}
	for i := range 10 {
		err := c.enqueue(ctx, &frame.Frame{StreamID: "s", Kind: frame.KindData, Seq: uint32(i), Payload: []byte("x")})
		if err != errSocketGone {
			t.Fatalf("enqueue %d on a closed socket: %v, want errSocketGone", i, err)
		}
	}
	done := make(chan struct{})
	go func() {
		// As serveConn does when its read loop, writer or keepalive ends.
		c.ended("read_error")
		c.ended("pong_timeout")
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("recording the socket's end blocked")
	}
	if r := <-c.reason; r != "write_error" {
		t.Errorf("reason %q, want the first one, write_error", r)
	}
}

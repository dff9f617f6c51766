package transport

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/internal/budget"
	"github.com/execgo/exec-server/jsonrpc"
)

// The message budget is shared by all connections: bytes of a message held
// by a running handler count until it returns; a message that cannot get
// its bytes in time is read through, answered with an error, and the
// connection stays usable; every byte is given back at the end.
func TestHandlerMessageBudget(t *testing.T) {
	b := budget.New("incoming message bytes", 300<<10)
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	srv := newWSServer(t, HandlerOptions{
		MessageBudget: b,
		BudgetWait:    50 * time.Millisecond,
		Serve: func(ctx context.Context, s *WebSocket) {
			c := jsonrpc.NewConn(s, jsonrpc.Options{})
			_ = c.Run(ctx, func(m *jsonrpc.Message) jsonrpc.Action {
				if m.Method == "hold" {
					return jsonrpc.Concurrent(func() {
						held <- struct{}{}
						<-release
						c.Reply(m.ID, len(m.Params), nil)
					})
				}
				c.Reply(m.ID, len(m.Params), nil)
				return jsonrpc.Inline
			})
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func() *websocket.Conn {
		c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadLimit(1 << 20)
		t.Cleanup(func() { c.CloseNow() })
		return c
	}
	call := func(c *websocket.Conn, msg string) string {
		t.Helper()
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, reply, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(reply)
	}
	big := func(id int, method string, n int) string {
		s, _ := json.Marshal(strings.Repeat("x", n))
		return `{"id":` + string(rune('0'+id)) + `,"method":"` + method + `","params":` + string(s) + `}`
	}

	a, bc := dial(), dial()
	// a's handler holds a 200 KB message (a 256 KiB buffer by doubling).
	if err := a.Write(ctx, websocket.MessageText, []byte(big(1, "hold", 200000))); err != nil {
		t.Fatal(err)
	}
	<-held
	if used := b.Used(); used != 256<<10 {
		t.Fatalf("budget in use %d while a 200 KB message is held, want 256 KiB", used)
	}
	// b's as big message does not fit next to it: its first 64 KiB are
	// taken without waiting (small messages never wait, even past the
	// limit), the next 64 KiB do not fit.
	reply := call(bc, big(2, "echo", 200000))
	for _, want := range []string{`"code":-32600`, `"id":-1`, "message of 2000", "refused: incoming message bytes: 65536 more bytes would exceed the server-wide limit of 307200 bytes (327680 in use)"} {
		if !strings.Contains(reply, want) {
			t.Errorf("refusal %s lacks %q", reply, want)
		}
	}
	// Small messages still go through, and b's connection still works.
	if reply := call(bc, `{"id":3,"method":"echo","params":[1]}`); reply != `{"id":3,"result":3}` {
		t.Errorf("small message after the refusal: %s", reply)
	}
	// Once a's handler returns, its bytes are free for b.
	close(release)
	if _, r, err := a.Read(ctx); err != nil || !strings.Contains(string(r), `"result":200002`) {
		t.Fatalf("held reply %s, %v", r, err)
	}
	if reply := call(bc, big(4, "echo", 200000)); reply != `{"id":4,"result":200002}` {
		t.Errorf("big message after release: %s", reply)
	}
	a.Close(websocket.StatusNormalClosure, "")
	bc.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for b.Used() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d budget bytes still in use after both connections closed", b.Used())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

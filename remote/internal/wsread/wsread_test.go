package wsread

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Messages of every size class come back whole, each in its own slice:
// a later read must not overwrite an earlier message.
func TestRead(t *testing.T) {
	sizes := []int{0, 1, 100, 64<<10 - 1, 64 << 10, 64<<10 + 1, 300 << 10, 5}
	msg := func(i, n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*7 + j*13)
		}
		return b
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for i, n := range sizes {
			typ := websocket.MessageBinary
			if i%2 == 1 {
				typ = websocket.MessageText
			}
			if err := c.Write(r.Context(), typ, msg(i, n)); err != nil {
				return
			}
		}
		c.Close(websocket.StatusNormalClosure, "")
	}))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+hs.URL[len("http"):], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	var rd Reader
	var got [][]byte
	for i, n := range sizes {
		typ, b, err := rd.Read(ctx, c)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if want := websocket.MessageType(websocket.MessageBinary - websocket.MessageType(i%2)); typ != want {
			t.Errorf("message %d: type %v, want %v", i, typ, want)
		}
		// Exact size, give or take the allocator's rounding (a page).
		if len(b) != n || cap(b) > n+8192 {
			t.Errorf("message %d: len %d cap %d, want %d", i, len(b), cap(b), n)
		}
		got = append(got, b)
	}
	for i, n := range sizes {
		if !bytes.Equal(got[i], msg(i, n)) {
			t.Errorf("message %d changed after later reads", i)
		}
	}
	if _, _, err := rd.Read(ctx, c); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the last message: %v, want a normal close", err)
	}
}

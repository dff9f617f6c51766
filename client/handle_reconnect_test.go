package client_test

import (
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
)

// A reconnect that completes after a read has chosen its handle but before
// it is sent must not send the old connection's handle on the new one
// (where it is unknown, -32004): the read reopens the file instead. Before
// the fix, TestReconnectFileHandles failed this way now and then under
// load; the hook makes that interleaving happen every time.
func TestReconnectBetweenHandleAndRequest(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		px := newProxy(t, strings.TrimPrefix(s.listen(t), "ws://"))
		c, err := client.Dial(ctx, px.url(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		dir := t.TempDir()
		if err := os.WriteFile(dir+"/r", []byte("0123456789"), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := c.Open(ctx, dir+"/r")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var armed atomic.Bool
		reconnect := func() {
			if !armed.CompareAndSwap(true, false) {
				return
			}
			gen := client.Generation(c)
			px.cut()
			deadline := time.Now().Add(10 * time.Second)
			for client.Generation(c) == gen {
				if time.Now().After(deadline) {
					t.Error("no reconnect within 10s of the cut")
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		defer client.SetHandleChosenHook(reconnect)()
		buf := make([]byte, 3)
		armed.Store(true)
		if _, err := r.ReadAtContext(ctx, buf, 5); err != nil || string(buf) != "567" {
			t.Errorf("ReadAt across a reconnect = %q, %v", buf, err)
		}
		// A write handle, opened on the new connection, is lost in the
		// same interleaving, and says so.
		w, err := c.Create(ctx, dir+"/w")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		armed.Store(true)
		if _, err := w.WriteAtContext(ctx, []byte("x"), 0); !errors.Is(err, client.ErrConnectionLost) {
			t.Errorf("WriteAt across a reconnect: %v, want ErrConnectionLost", err)
		}
	})
}

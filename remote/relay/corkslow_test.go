package relay

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// slowReadingHarness dials a harness with small socket buffers that reads a
// frame every 20 ms, and returns the relay's leg for it.
func slowReadingHarness(t *testing.T, p *pair) *leg {
	t.Helper()
	n := len(p.r.rec.all())
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10)
		})
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, p.bundle["url"].(string), &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	c.SetReadLimit(1 << 20)
	p.r.rec.wait(t, n, 10*time.Second, func(e Event) bool { return e.Kind == "attach" && e.Role == roleHarness })
	l := legOf(t, p.r, roleHarness, "E")
	if err := tcpOf(t, l.cc.Conn).SetWriteBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return l
}

// A harness that reads slowly but steadily (32 KiB every 20 ms) is not cut
// by a batch that takes longer than SlowHarness as a whole: each write is
// bounded, as a lone frame's is. With one limit over the whole batch it was
// cut after SlowHarness.
func TestCorkedBatchSlowButReadingHarness(t *testing.T) {
	for _, batched := range []bool{false, true} {
		p := newPair(t, Options{SlowHarness: 300 * time.Millisecond})
		l := slowReadingHarness(t, p)
		big := bytes.Repeat([]byte{1}, 32<<10)
		for i := range 3 {
			var fs []outFrame
			for j := range 32 {
				fs = append(fs, outFrame{b: dataFrame("s", uint32(i*32+j+1), big)})
			}
			ok := true
			if batched {
				ok, _ = l.sendBatch(fs)
			} else {
				for _, f := range fs {
					if ok = l.sendFrame(f.b, true); !ok {
						break
					}
				}
			}
			if !ok || l.wslow.Load() {
				t.Fatalf("batched %v: a harness reading 1.6 MB/s was cut in round %d (too slow: %v)", batched, i, l.wslow.Load())
			}
		}
	}
}

// A peer's close arriving while the leg is corked: the relay's close reply,
// gathered, is written before the library closes the socket, so the peer's
// close handshake completes.
func TestCorkedPeerCloseAnswered(t *testing.T) {
	p := newPair(t, Options{})
	h := p.harness(t)
	l := legOf(t, p.r, roleHarness, "E")
	l.wmu.Lock()
	l.cc.cork()
	err := h.Close(websocket.StatusNormalClosure, "bye")
	_ = l.cc.uncork()
	l.wmu.Unlock()
	if err != nil {
		t.Fatalf("harness's close while the relay's leg was corked: %v", err)
	}
}

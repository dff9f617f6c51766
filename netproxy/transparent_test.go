package netproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestTransparentNotRedirected: a connection that reaches the transparent
// listener without a redirect has no destination (here, in the host's
// namespace, no conntrack entry; in a sandbox, the listener's own
// address: server TestTransparentTCP's "self"): it is reset, nothing is
// decided and nothing dialled.
func TestTransparentNotRedirected(t *testing.T) {
	var decisions atomic.Int32
	pol, _ := NewPolicy(map[string]string{"*": "allow", "127.0.0.1": "allow"}, nil, false, true)
	p := New(Config{Policy: pol, OnDecision: func(Decision) { decisions.Add(1) }})
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.ServeTransparent(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err == nil {
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err = io.Copy(io.Discard, c)
	} // else: reset before the dial returned (loopback is that fast)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the connection was neither reset nor closed")
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("got %v, want a reset", err)
	}
	if n := decisions.Load(); n != 0 {
		t.Errorf("%d decisions for a connection without a destination", n)
	}
}

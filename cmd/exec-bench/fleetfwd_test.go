package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/execgo/exec-server/internal/test/tcptest"
	"github.com/execgo/exec-server/remote/frame"
)

// The forwarder (a process of its own: this test binary run as
// "fleet-forward") carries both directions byte-exact, and stop ends it.
func TestFleetForwarderCarriesBothWays(t *testing.T) {
	p, addr, stop, err := startForwarder("http://" + tcptest.Echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := make([]byte, 3<<20)
	rand.Read(want)
	go c.Write(want)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the echo through the forwarder differs from what was sent")
	}
	stop()
	if p.cmd.ProcessState == nil || !p.cmd.ProcessState.Exited() {
		t.Fatalf("forwarder not ended by stop: %v", p.cmd.ProcessState)
	}
}

// rawRTT takes the sockets in turn, each on its own stream, and gives
// each its own figures: a socket whose echo is slow has the larger p50.
func TestRawRTTInterleavesSockets(t *testing.T) {
	const slow = 20 * time.Millisecond
	delays := []time.Duration{0, slow}
	var conns []*websocket.Conn
	seen := make(chan string, 100)
	for _, d := range delays {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				typ, b, err := c.Read(r.Context())
				if err != nil {
					return
				}
				if f, err := frame.Unmarshal(b); err == nil {
					select {
					case seen <- f.StreamID:
					default:
					}
				}
				time.Sleep(d)
				if c.Write(r.Context(), typ, b) != nil {
					return
				}
			}
		}))
		defer srv.Close()
		c, _, err := websocket.Dial(context.Background(), "ws"+srv.URL[len("http"):], nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		conns = append(conns, c)
	}
	p50, p99, err := rawRTT(context.Background(), conns, 1024, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(p50) != 2 || len(p99) != 2 {
		t.Fatalf("figures for %d, %d sockets, want 2", len(p50), len(p99))
	}
	if p50[1] < float64(slow.Microseconds()) || p50[0] >= p50[1] {
		t.Fatalf("p50 %v µs: the slow socket's figure is not its own", p50)
	}
	ids := map[string]bool{}
	for len(seen) > 0 {
		ids[<-seen] = true
	}
	if !ids[rawSID(rttSID)] || !ids[rawSID(rttSID+1)] || len(ids) != 2 {
		t.Fatalf("stream ids %v, want one per socket", ids)
	}
}

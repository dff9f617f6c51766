package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// rawUpgrade opens a TCP connection to srv and completes a websocket
// upgrade by hand, so the test can then write arbitrary frames.
func rawUpgrade(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	return c, br
}

// A message that stops making progress closes its connection after the
// stall timeout, whether its frame header announced a huge payload or the
// peer sent a first fragment and then only answered pings (issue 14: a
// 1 TiB frame header was held 130 s and more). A message that keeps making
// progress, however slowly, is not cut; an idle connection is not either.
func TestStalledMessageClosesConnection(t *testing.T) {
	const stall = 300 * time.Millisecond
	srv := newWSServer(t, HandlerOptions{StallTimeout: stall, PingInterval: 100 * time.Millisecond, MaxMessageBytes: 64 << 20})
	addr := strings.TrimPrefix(srv.URL, "http://")

	t.Run("huge frame header", func(t *testing.T) {
		c, br := rawUpgrade(t, addr)
		// FIN+text, masked, 64-bit length of 1 TiB, mask key, 3 bytes.
		hdr := []byte{0x81, 0xff}
		hdr = binary.BigEndian.AppendUint64(hdr, 1<<40)
		hdr = append(hdr, 0, 0, 0, 0, '{', '"', 'a')
		if _, err := c.Write(hdr); err != nil {
			t.Fatal(err)
		}
		// The server pings meanwhile; read until it closes the connection.
		c.SetReadDeadline(time.Now().Add(20 * stall))
		if _, err := io.Copy(io.Discard, br); err != nil {
			t.Fatalf("connection not closed after %v without progress: %v", 20*stall, err)
		}
	})

	t.Run("first fragment then pongs only", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*stall)
		defer cancel()
		c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		w, err := c.Writer(ctx, websocket.MessageText)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(`{"id":1,`)); err != nil { // a non-final frame
			t.Fatal(err)
		}
		// Reading answers the server's pings; it ends when the server
		// closes the connection.
		if _, _, err := c.Read(ctx); ctx.Err() != nil {
			t.Fatalf("connection still open after %v: %v", 20*stall, err)
		}
	})

	t.Run("slow progress and idling are not cut", func(t *testing.T) {
		// A longer limit: a loaded machine must not pause the writer
		// for a whole limit between two fragments.
		const stall = 1500 * time.Millisecond
		srv := newWSServer(t, HandlerOptions{StallTimeout: stall, PingInterval: 100 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 30*stall)
		defer cancel()
		c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		read := make(chan string, 1)
		go func() {
			_, msg, err := c.Read(ctx)
			if err != nil {
				read <- err.Error()
			}
			read <- string(msg)
		}()
		time.Sleep(stall + stall/5) // idle between messages, longer than the limit
		w, err := c.Writer(ctx, websocket.MessageText)
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		for i := range 8 { // 8 fragments, stall/4 apart: longer than stall in all
			part := fmt.Sprintf("part%d ", i)
			want.WriteString(part)
			if _, err := w.Write([]byte(part)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(stall / 4)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got := <-read; got != want.String() {
			t.Fatalf("echo %q, want %q", got, want.String())
		}
	})
}

package transport

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// trickleConn writes as a slow client does: every write (coder/websocket's
// client sends through a 4 KiB buffer) after a short pause, so that a large
// frame arrives in thousands of small segments.
type trickleConn struct{ net.Conn }

func (c trickleConn) Write(p []byte) (int, error) {
	time.Sleep(20 * time.Microsecond)
	return c.Conn.Write(p)
}

// TestLargeFrameReadInBatches sends messages of every shape around the
// batched read (payloads just under, at and over lowatMin, one frame or
// 1 MiB frames, each followed by a small message) from a client that
// trickles its bytes: each must arrive whole, none may wait for bytes that
// are not coming, and a large message must be read in few reads.
func TestLargeFrameReadInBatches(t *testing.T) {
	srv := newWSServer(t, HandlerOptions{
		MaxMessageBytes: 16 << 20,
		Serve: func(ctx context.Context, s *WebSocket) {
			for {
				msg, err := s.Read(ctx)
				if err != nil {
					return
				}
				reply := fmt.Sprintf("%d %08x %d", len(msg), crc32.ChecksumIEEE(msg), s.co.reads)
				if err := s.Write(ctx, []byte(reply), false); err != nil {
					return
				}
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialTrickle(ctx, t, srv)
	ws := NewWebSocket(c, "test")
	roundTrip := func(msg []byte, fragmented bool) (reads int) {
		t.Helper()
		var err error
		if fragmented {
			err = ws.Write(ctx, msg, false) // frames of FrameSize
		} else {
			err = c.Write(ctx, websocket.MessageText, msg) // one frame
		}
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("%d bytes: %v", len(msg), err)
		}
		var gotLen, gotReads int
		var gotSum uint32
		if _, err := fmt.Sscanf(string(got), "%d %08x %d", &gotLen, &gotSum, &gotReads); err != nil || gotLen != len(msg) || gotSum != crc32.ChecksumIEEE(msg) {
			t.Fatalf("%d bytes: server read %q, want %d %08x", len(msg), got, len(msg), crc32.ChecksumIEEE(msg))
		}
		return gotReads
	}
	msg := make([]byte, 4<<20+3)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	for _, n := range []int{lowatMin - 1, lowatMin, lowatMin + 1, lowatMax - 1, lowatMax + 1, 600 << 10, FrameSize + 5, 4<<20 + 3} {
		for _, frag := range []bool{false, true} {
			roundTrip(msg[:n], frag)
			roundTrip([]byte("small"), frag)
		}
	}
	// The guard: 4 MiB trickled in a thousand segments takes a few reads
	// per 512 KiB, not one per segment (977 without the batched reads).
	before := roundTrip([]byte("small"), false)
	if reads := roundTrip(msg[:4<<20], false) - before; reads > 100 {
		t.Errorf("a 4 MiB message took %d read calls, want at most 100", reads)
	}
}

// TestBatchedReadKeepsReset: a peer that resets the connection in the
// middle of a large frame, after some of its bytes, ends the message with
// the reset, as an unbatched read reports it, not with a clean end of
// stream (the socket reports the reset once, to the read that returned
// the bytes before it).
func TestBatchedReadKeepsReset(t *testing.T) {
	got := make(chan error, 1)
	srv := newWSServer(t, HandlerOptions{
		MaxMessageBytes: 16 << 20,
		Serve: func(ctx context.Context, s *WebSocket) {
			_, err := s.Read(ctx)
			got <- err
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conns := make(chan *net.TCPConn, 1)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			conns <- c.(*net.TCPConn)
		}
		return c, err
	}}}
	c, _, err := websocket.Dial(ctx, wsURL(srv), &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	tc := <-conns
	// A masked text frame of 1 MiB with a zero mask key (the payload
	// goes as it is), of which 200 KiB is sent.
	hdr := []byte{0x81, 0x80 | 127, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0}
	if _, err := tc.Write(append(hdr, make([]byte, 200<<10)...)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the server is waiting for more
	_ = tc.SetLinger(0)
	_ = tc.Close()
	select {
	case err := <-got:
		if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("the message ended with %v, want the reset", err)
		}
		t.Logf("ended with: %v", err)
	case <-ctx.Done():
		t.Fatal("the server's read did not end")
	}
}

// TestMessageAfterLargeStartsLarge: after a large message, the next one's
// buffer goes to the last large size from its second read (readMessage's
// jump): every size around the jump arrives whole, and a small message that
// took the large buffer is copied out of it (before the jump a message of
// exactly smallMessage bytes already kept it: it grows before its end is
// seen). The wake-ups saved are counted with strace (docs/performance.md).
func TestMessageAfterLargeStartsLarge(t *testing.T) {
	srv := newWSServer(t, HandlerOptions{
		MaxMessageBytes: 16 << 20,
		Serve: func(ctx context.Context, s *WebSocket) {
			for {
				msg, err := s.Read(ctx)
				if err != nil {
					return
				}
				reply := fmt.Sprintf("%d %08x %d %d %d", len(msg), crc32.ChecksumIEEE(msg), s.co.reads, cap(msg), s.jumps)
				s.Recycle(msg) // keeps a large buffer for the next jump
				if err := s.Write(ctx, []byte(reply), false); err != nil {
					return
				}
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialTrickle(ctx, t, srv)
	roundTrip := func(msg []byte) (reads, capacity, jumps int) {
		t.Helper()
		if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("%d bytes: %v", len(msg), err)
		}
		var gotLen int
		var gotSum uint32
		if _, err := fmt.Sscanf(string(got), "%d %08x %d %d %d", &gotLen, &gotSum, &reads, &capacity, &jumps); err != nil || gotLen != len(msg) || gotSum != crc32.ChecksumIEEE(msg) {
			t.Fatalf("%d bytes: server read %q, want %d %08x", len(msg), got, len(msg), crc32.ChecksumIEEE(msg))
		}
		return reads, capacity, jumps
	}
	msg := make([]byte, 1<<20+3)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	for _, n := range []int{1, 1023, 1024, 1025, 4096, 5000, smallMessage - 1, smallMessage, smallMessage + 1, 1 << 20} {
		_, _, before := roundTrip(msg)
		_, capacity, after := roundTrip(msg[:n])
		if n <= smallMessage && capacity > smallMessage {
			t.Errorf("a %d-byte message after a large one kept a buffer of %d bytes", n, capacity)
		}
		// A message that fills the first buffer (1 KiB) must jump (a
		// full buffer grows before its end is seen); a shorter one has
		// nothing to grow.
		if jumped := after > before; jumped != (n >= 1024) {
			t.Errorf("a %d-byte message after a large one: jumped %v, want %v", n, jumped, n >= 1024)
		}
	}
}

// dialTrickle dials srv through trickleConn (the client's writes arrive a
// little at a time), reading up to 1 MiB per message; closed at the test's
// end.
func dialTrickle(ctx context.Context, t *testing.T, srv *httptest.Server) *websocket.Conn {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return trickleConn{c}, nil
	}}}
	c, _, err := websocket.Dial(ctx, wsURL(srv), &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	c.SetReadLimit(1 << 20)
	return c
}

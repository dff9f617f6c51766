package transport

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// sizedServe waits for a message naming a count and a size, and writes that
// many messages of that size (byte i of message k is 'a'+(i+k)%26).
func sizedServe(ctx context.Context, s *WebSocket) {
	for {
		msg, err := s.Read(ctx)
		if err != nil {
			return
		}
		n, size, _ := strings.Cut(string(msg), " ")
		count, _ := strconv.Atoi(n)
		sz, _ := strconv.Atoi(size)
		for k := range count {
			if err := s.Write(ctx, sizedMsg(k, sz), false); err != nil {
				return
			}
		}
	}
}

func sizedMsg(k, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + (i+k)%26)
	}
	return b
}

func dialSized(t *testing.T) (context.Context, *websocket.Conn) {
	t.Helper()
	srv := newWSServer(t, HandlerOptions{Serve: sizedServe})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
	c.SetReadLimit(-1)
	return ctx, c
}

// Every message arrives whole and in order whatever its size against the
// 4 KiB write buffer: 4092 bytes after a 4-byte header fill it exactly (the
// full buffer is then the frame's last write, sent by release), and
// messages over FrameSize go as several frames.
func TestCoalescedFramesArriveWhole(t *testing.T) {
	ctx, c := dialSized(t)
	for _, size := range []int{1, 125, 126, 4000, 4091, 4092, 4093, 4096, 8184, 8188, 65535, 65536,
		87000, FrameSize - 1, FrameSize, FrameSize + 1, 3*FrameSize + 4092} {
		if err := c.Write(ctx, websocket.MessageText, []byte("3 "+strconv.Itoa(size))); err != nil {
			t.Fatal(err)
		}
		for k := range 3 {
			_, got, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("size %d message %d: %v", size, k, err)
			}
			if !bytes.Equal(got, sizedMsg(k, size)) {
				t.Fatalf("size %d message %d: got %d bytes, not the message sent", size, k, len(got))
			}
		}
	}
}

// syscw is this process's count of write system calls (write, writev...).
func syscw(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no write counts: %v", err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "syscw: "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no syscw in /proc/self/io")
	return 0
}

// A frame larger than the write buffer goes out in one write system call,
// not two (header and first 4 KiB, then the rest). Without the coalescer
// this counts 2 per message.
func TestCoalescedFrameOneWrite(t *testing.T) {
	ctx, c := dialSized(t)
	const n = 100
	// One round first, so the connection's buffers and goroutines exist.
	if err := c.Write(ctx, websocket.MessageText, []byte("1 10")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(ctx); err != nil {
		t.Fatal(err)
	}
	w0 := syscw(t)
	if err := c.Write(ctx, websocket.MessageText, []byte(strconv.Itoa(n)+" 87000")); err != nil {
		t.Fatal(err)
	}
	for k := range n {
		_, got, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 87000 {
			t.Fatalf("message %d: %d bytes", k, len(got))
		}
	}
	// The request above is one write; allow a few for anything else.
	if w := syscw(t) - w0; w > n+10 {
		t.Errorf("%d write system calls for %d messages, want one each", w, n)
	}
}

// BenchmarkFrameWrite: 87 000-byte messages (a 64 KiB output chunk's
// notification) from an accepted websocket to a client that reads them;
// "plain" is without the coalescer (two writes a frame).
func BenchmarkFrameWrite(b *testing.B) {
	for _, mode := range []string{"coalesced", "plain"} {
		b.Run(mode, func(b *testing.B) {
			msg := sizedMsg(0, 87000)
			start := make(chan int)
			srv := httptest.NewServer(NewHandler(HandlerOptions{
				MaxMessageBytes: 1 << 20,
				Serve: func(ctx context.Context, s *WebSocket) {
					if mode == "plain" {
						s.co = nil
					}
					for n := range start {
						for range n {
							if err := s.Write(ctx, msg, false); err != nil {
								return
							}
						}
					}
				},
			}))
			defer srv.Close()
			ctx := context.Background()
			c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.CloseNow()
			c.SetReadLimit(-1)
			buf := make([]byte, 128<<10)
			b.SetBytes(int64(len(msg)))
			b.ResetTimer()
			c0 := cpuTime()
			start <- b.N
			for range b.N {
				_, r, err := c.Reader(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := r.Read(buf); err != nil {
						break
					}
				}
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
			close(start)
		})
	}
}

// cpuTime is this process's user+system CPU time (server and client).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package coalesce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/internal/rawsock"
)

// recorder is the stream under a Conn: it records each write.
type recorder struct {
	mu     sync.Mutex
	writes [][]byte
	fail   error
}

func (r *recorder) Read([]byte) (int, error) { return 0, errors.New("unused") }
func (r *recorder) Close() error             { return nil }
func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return 0, r.fail
	}
	r.writes = append(r.writes, append([]byte(nil), p...))
	return len(p), nil
}

func (r *recorder) get() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.writes...)
}

func pieceOf(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func TestWrites(t *testing.T) {
	// Only the writes decide what is coalesced here: a loaded machine can
	// stop this goroutine between two writes for longer than holdFor, and
	// the timer would then send the held piece alone (TestHeldFlush covers
	// the timer).
	defer func(d time.Duration) { holdFor = d }(holdFor)
	holdFor = time.Hour
	cases := []struct {
		name   string
		writes [][]byte
		want   []int // sizes of the writes below, in order
	}{
		{"short alone", [][]byte{pieceOf(1, 10)}, []int{10}},
		{"pieces then the end", [][]byte{pieceOf(1, piece), pieceOf(2, piece), pieceOf(3, 7)}, []int{2*piece + 7}},
		{"larger than a piece", [][]byte{pieceOf(1, piece+1)}, []int{piece + 1}},
		{"two messages", [][]byte{pieceOf(1, piece), pieceOf(2, 1), pieceOf(3, piece), pieceOf(4, 2)}, []int{piece + 1, piece + 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			c := New(r)
			var all []byte
			for _, w := range tc.writes {
				if n, err := c.Write(w); n != len(w) || err != nil {
					t.Fatalf("Write: %d, %v", n, err)
				}
				all = append(all, w...)
			}
			got := r.get()
			if len(got) != len(tc.want) {
				t.Fatalf("%d writes below, want %d", len(got), len(tc.want))
			}
			for i, w := range got {
				if len(w) != tc.want[i] {
					t.Errorf("write %d: %d bytes, want %d", i, len(w), tc.want[i])
				}
			}
			if !bytes.Equal(bytes.Join(got, nil), all) {
				t.Error("bytes differ or out of order")
			}
		})
	}
}

// A write that ends on a piece boundary is sent by the timer; a failure
// there is returned by the next Write.
func TestHeldFlush(t *testing.T) {
	r := &recorder{}
	c := New(r)
	if _, err := c.Write(pieceOf(9, piece)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(r.get()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a held piece was never sent")
		}
		time.Sleep(time.Millisecond)
	}
	if got := r.get(); len(got) != 1 || !bytes.Equal(got[0], pieceOf(9, piece)) {
		t.Fatalf("sent %d writes", len(got))
	}

	boom := errors.New("boom")
	r.mu.Lock()
	r.fail = boom
	r.mu.Unlock()
	if _, err := c.Write(pieceOf(8, piece)); err != nil {
		t.Fatal(err) // held, not yet written
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		if _, err := c.Write(pieceOf(7, 1)); errors.Is(err, boom) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held write's failure was never reported")
		}
		time.Sleep(time.Millisecond)
	}
}

// Through Client, a websocket client's messages of every size (piece
// multiples included) arrive whole at a server, over plain TCP and TLS,
// both on raw sockets.
func TestWebSocket(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprint("tls=", tlsOn), func(t *testing.T) { testWebSocket(t, tlsOn) })
	}
}

func testWebSocket(t *testing.T, tlsOn bool) {
	sizes := []int{1, piece - 20, piece, 3 * piece, 60 << 10, 61440 + 90, 200 << 10}
	got := make(chan []byte, len(sizes))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for range sizes {
			_, b, err := c.Read(r.Context())
			if err != nil {
				close(got)
				return
			}
			got <- b
		}
	})
	hs := httptest.NewUnstartedServer(h)
	scheme := "ws"
	if tlsOn {
		hs.StartTLS()
		scheme = "wss"
	} else {
		hs.Start()
	}
	defer hs.Close()
	hc := hs.Client()
	tr := hc.Transport.(*http.Transport)
	var dialled atomic.Int32
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialled.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	wc := Client(hc)
	if wc.Transport.(roundTripper).base == http.RoundTripper(tr) {
		t.Fatal("Client kept the caller's transport; want its clone that dials raw sockets")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, scheme+hs.URL[strings.Index(hs.URL, ":"):], &websocket.DialOptions{HTTPClient: wc})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if dialled.Load() != 1 {
		t.Fatalf("the client's own dial ran %d times, want 1 (under the raw socket)", dialled.Load())
	}
	for i, n := range sizes {
		msg := make([]byte, n)
		for j := range msg {
			msg[j] = byte(i + j*7)
		}
		if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
			t.Fatal(err)
		}
		select {
		case b := <-got:
			if !bytes.Equal(b, msg) {
				t.Fatalf("message %d (%d bytes): got %d bytes, differing", i, n, len(b))
			}
		case <-ctx.Done():
			t.Fatalf("message %d (%d bytes) did not arrive", i, n)
		}
	}
}

// rawDial wraps what the transport's own dial returns; a transport it
// cannot wrap is left as it is, and the caller's is never modified.
func TestRawDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx := context.Background()
	cases := []struct {
		name string
		tr   *http.Transport
		same bool // returned as it is
	}{
		{"default", http.DefaultTransport.(*http.Transport), false},
		{"no dialer", &http.Transport{}, false},
		{"own DialContext", &http.Transport{DialContext: (&net.Dialer{}).DialContext}, false},
		//lint:ignore SA1019 the deprecated field is what this case is about
		{"deprecated Dial", &http.Transport{Dial: net.Dial}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.tr.DialContext
			got := rawDial(tc.tr)
			if (got == tc.tr) != tc.same {
				t.Fatalf("returned the transport itself: %v, want %v", got == tc.tr, tc.same)
			}
			if fmt.Sprintf("%p", tc.tr.DialContext) != fmt.Sprintf("%p", before) {
				t.Fatal("the caller's transport was modified")
			}
			if tc.same {
				return
			}
			c, err := got.DialContext(ctx, "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if runtime.GOOS == "linux" && rawsock.Of(c) == nil {
				t.Fatalf("dialled %T, want a raw socket", c)
			}
		})
	}
}

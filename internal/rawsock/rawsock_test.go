//go:build linux

package rawsock

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/tcptest"
)

// TestConn: raw reads and writes move every byte, in order, through
// full socket buffers (the writer waits for the socket, the reader for
// data), and end as the net package's do: io.EOF at the peer's close,
// timeouts and closed sockets classified by type.
func TestConn(t *testing.T) {
	mine, theirs := tcptest.Pair(t, 16<<10, 16<<10)
	w, ok := Wrap(mine).(*Conn)
	if !ok {
		t.Fatalf("Wrap gave %T", Wrap(mine))
	}
	r := Wrap(theirs)
	if Of(w) != w || Of(mine) != nil {
		t.Fatal("Of does not tell a Conn")
	}

	// Far more than both buffers hold, in slices of every size around
	// the buffers', some empty, more slices than one writev takes.
	var iov [][]byte
	var want []byte
	for i := range 3 * MaxIov {
		b := bytes.Repeat([]byte{byte(i)}, (i*7919)%(40<<10))
		iov = append(iov, b)
		want = append(want, b...)
	}
	got := make(chan []byte, 1)
	go func() {
		var all []byte
		buf := make([]byte, 3000)
		for {
			n, err := r.Read(buf)
			all = append(all, buf[:n]...)
			if err != nil {
				if err != io.EOF {
					t.Errorf("read: %v", err)
				}
				got <- all
				return
			}
		}
	}()
	n, err := w.Writev(iov)
	if err != nil || n != len(want) {
		t.Fatalf("writev: %d of %d bytes, %v", n, len(want), err)
	}
	if n, err := w.Write([]byte("end")); n != 3 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	w.Close()
	all := <-got
	if !bytes.Equal(all, append(want, "end"...)) {
		t.Fatalf("read %d bytes, not the %d written", len(all), len(want)+3)
	}
	if n, err := r.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d, %v", n, err)
	}

	if _, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after the peer's close: %v", err)
	}

	// A read waiting for data ends at its deadline.
	a, b := tcptest.Pair(t, 0, 0)
	ra := Wrap(a)
	ra.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := ra.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v", err)
	}
	// A write that cannot go waits for the socket, until its deadline.
	wb := Wrap(b)
	wb.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := wb.Write(make([]byte, 64<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past its deadline: %v", err)
	}
	ra.Close()
	if _, err := ra.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of a closed socket: %v", err)
	}
	if _, err := ra.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write to a closed socket: %v", err)
	}
}

// TestTryWritev: one write that never waits takes what the kernel
// takes, and 0 with no error when the socket is full.
func TestTryWritev(t *testing.T) {
	mine, theirs := tcptest.Pair(t, 16<<10, 16<<10)
	c := Of(Wrap(mine))
	big := make([]byte, 8<<20)
	n, err := c.TryWritev([][]byte{big[:1], big[1:]})
	if err != nil || n <= 0 || n >= len(big) {
		t.Fatalf("first write: %d of %d, %v", n, len(big), err)
	}
	// The kernel takes a little more as the peer's buffer fills; then
	// nothing, and no error.
	for i := 0; ; i++ {
		n, err := c.TryWritev([][]byte{big})
		if err != nil || n >= len(big) || i == 1000 {
			t.Fatalf("write %d to a filling socket: %d, %v", i, n, err)
		}
		if n == 0 {
			break
		}
	}
	theirs.Close()
	mine.Close()
	if _, err := c.TryWritev([][]byte{big}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write to a closed socket: %v", err)
	}
}

// TestAllocGuardRawsock: a read, a write and a write that does not wait
// allocate nothing (the net package's do not either).
func TestAllocGuardRawsock(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	a, b := tcptest.Pair(t, 0, 0)
	wa, wb := Of(Wrap(a)), Wrap(b)
	buf := make([]byte, 64)
	for name, op := range map[string]func(){
		"write":     func() { wa.Write(buf) },
		"writev":    func() { wa.Writev([][]byte{buf[:10], buf[10:]}) },
		"trywritev": func() { wa.TryWritev([][]byte{buf[:10], buf[10:]}) },
	} {
		if n := testing.AllocsPerRun(200, func() {
			op()
			if _, err := io.ReadFull(wb, buf); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s and a read: %v allocations", name, n)
		}
	}
}

// TestConcurrentWrites: writes from several goroutines at once through a
// socket that keeps filling stay whole, none interleaved with another,
// and every byte arrives (run with -race).
func TestConcurrentWrites(t *testing.T) {
	a, b := tcptest.Pair(t, 16<<10, 16<<10)
	wa, wb := Wrap(a), Wrap(b)
	const writers, each, size = 4, 200, 30000
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			msg := bytes.Repeat([]byte{byte('a' + w)}, size)
			for range each {
				if _, err := wa.Write(msg); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	got := make(chan map[byte]int, 1)
	go func() {
		m := map[byte]int{}
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(wb, buf); err != nil {
				got <- m
				return
			}
			if i := bytes.IndexFunc(buf, func(r rune) bool { return byte(r) != buf[0] }); i >= 0 {
				t.Errorf("a message of %c has %c at %d", buf[0], buf[i], i)
			}
			m[buf[0]]++
		}
	}()
	for range writers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	wa.Close()
	m := <-got
	for w := range writers {
		if m[byte('a'+w)] != each {
			t.Errorf("writer %c: %d messages read, %d written", 'a'+w, m[byte('a'+w)], each)
		}
	}
}

func TestConsume(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{0, []string{"ab", "", "cde"}},
		{1, []string{"b", "", "cde"}},
		{2, []string{"cde"}}, // the empty slice goes with the one before
		{3, []string{"de"}},
		{5, []string{}},
	} {
		got := []string{}
		for _, b := range consume([][]byte{[]byte("ab"), {}, []byte("cde")}, tc.n) {
			got = append(got, string(b))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("consume(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestListenerUnderTLS: under a TLS listener, Listener's connections are
// raw sockets, and an HTTPS exchange over them is byte-exact both ways.
func TestListenerUnderTLS(t *testing.T) {
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, r.Body)
	}))
	hs.Listener = Listener(hs.Listener)
	var raw, conns atomic.Int32
	hs.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		conns.Add(1)
		if tc, ok := c.(*tls.Conn); ok && Of(tc.NetConn()) != nil {
			raw.Add(1)
		}
		return ctx
	}
	hs.StartTLS()
	defer hs.Close()
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(i * 31 >> 3)
	}
	resp, err := hs.Client().Post(hs.URL, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("echo: %d of %d bytes, equal %v, %v", len(got), len(body), bytes.Equal(got, body), err)
	}
	if conns.Load() != 1 || raw.Load() != 1 {
		t.Fatalf("%d connections, %d of them TLS over a raw socket; want 1 and 1", conns.Load(), raw.Load())
	}
}

// CloseWrite half-closes: the peer reads EOF, and can still write back.
func TestCloseWrite(t *testing.T) {
	a, b := tcptest.Pair(t, 0, 0)
	w := Wrap(a).(*Conn)
	if err := w.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("peer read after CloseWrite: %d, %v; want 0, EOF", n, err)
	}
	if _, err := b.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(w, buf); err != nil || buf[0] != 'x' {
		t.Fatalf("read after CloseWrite: %q, %v", buf, err)
	}
}

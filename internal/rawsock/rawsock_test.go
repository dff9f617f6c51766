//go:build linux

package rawsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"slices"
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
	if RawConn(w) != w.rc {
		t.Fatal("RawConn of a Conn is not its descriptor")
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

// TestWritevOnce: one write that never waits takes what the kernel
// takes, and 0 with no error when the socket is full.
func TestWritevOnce(t *testing.T) {
	mine, theirs := tcptest.Pair(t, 16<<10, 16<<10)
	rc := RawConn(mine)
	big := make([]byte, 8<<20)
	n, err := WritevOnce(rc, [][]byte{big[:1], big[1:]})
	if err != nil || n <= 0 || n >= len(big) {
		t.Fatalf("first write: %d of %d, %v", n, len(big), err)
	}
	// The kernel takes a little more as the peer's buffer fills; then
	// nothing, and no error.
	for i := 0; ; i++ {
		n, err := WritevOnce(rc, [][]byte{big})
		if err != nil || n >= len(big) || i == 1000 {
			t.Fatalf("write %d to a filling socket: %d, %v", i, n, err)
		}
		if n == 0 {
			break
		}
	}
	theirs.Close()
	mine.Close()
	if _, err := WritevOnce(rc, [][]byte{big}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write to a closed socket: %v", err)
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

package tcptest

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// Pair is a connected TCP pair on 127.0.0.1, mine's send buffer and
// theirs's receive buffer set to the given sizes before they connect (0:
// the kernel's): small buffers make a writer meet a full socket soon.
func Pair(t testing.TB, sndbuf, rcvbuf int) (mine, theirs net.Conn) {
	t.Helper()
	lc := net.ListenConfig{Control: BufControl(syscall.SO_RCVBUF, rcvbuf)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	d := net.Dialer{Control: BufControl(syscall.SO_SNDBUF, sndbuf)}
	mine, err = d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	theirs = <-accepted
	if theirs == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { mine.Close(); theirs.Close() })
	return mine, theirs
}

// BufControl is a dialer's or listener's Control setting socket option
// opt (a buffer size) to n before the socket connects; n 0 leaves it.
func BufControl(opt, n int) func(string, string, syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		if n == 0 {
			return nil
		}
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, n) }); err != nil {
			return err
		}
		return serr
	}
}

package relay

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// rawConn is c's descriptor for writes that do not wait (writevOnce);
// nil when it has none (TLS).
func rawConn(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// writevOnce writes iov with one writev(2) that never waits for the
// socket: n is what the kernel took (0 when its buffer was full).
func writevOnce(rc syscall.RawConn, iov [][]byte) (n int, err error) {
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		n, werr = unix.Writev(int(fd), iov)
		if werr == unix.EAGAIN || werr == unix.EINTR {
			n, werr = 0, nil
		}
		n = max(n, 0)
		return true // one try: never wait for the socket
	})
	if err == nil {
		err = werr
	}
	return n, err
}

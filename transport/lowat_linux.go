package transport

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketOf returns the raw socket of a plain TCP connection (nil for any
// other, such as TLS, whose bytes on the wire are not the stream's).
func socketOf(c net.Conn) syscall.RawConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// setRcvlowat sets the socket's SO_RCVLOWAT: the kernel then reports the
// socket readable only once n bytes are queued (or the stream ends),
// though a read still returns what is there.
func setRcvlowat(rc syscall.RawConn, n int) {
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n)
	})
}

// readAtLeast reads into p until it holds at least want bytes, the stream
// ends or fails, waiting in the runtime's poller between reads with the
// socket's SO_RCVLOWAT at what is still wanted (co.lowat tracks the value
// set), so that a wait ends once that much is queued. The caller knows that
// want bytes are coming: the low mark never asks for more than that.
func (co *coalescer) readAtLeast(p []byte, want int) (int, error) {
	c := co.Conn
	n := 0
	var rerr error
	err := co.rc.Read(func(fd uintptr) bool {
		for {
			if rest := want - n; rest != co.lowat {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, rest)
				co.lowat = rest
			}
			co.reads++
			k, err := unix.Read(int(fd), p[n:])
			switch {
			case k > 0:
				n += k
				// Less than wanted: wait for the rest to be queued
				// rather than read it as it trickles in.
				if n >= want {
					return true
				}
			case err == nil:
				rerr = io.EOF
				return true
			case errors.Is(err, unix.EINTR):
			case errors.Is(err, unix.EAGAIN):
				return false
			default:
				rerr = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", err)}
				return true
			}
		}
	})
	if n > 0 {
		// Bytes first; a failure shows again on the next read.
		return n, nil
	}
	if err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return 0, rerr
}

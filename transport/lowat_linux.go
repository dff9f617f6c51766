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
// want bytes are coming: the low mark never asks for more than that. The
// state lives in co.batch and the step function is made once, so a read
// allocates nothing.
func (co *coalescer) readAtLeast(p []byte, want int) (int, error) {
	b := &co.batch
	if err := b.pending; err != nil {
		b.pending = nil
		return 0, err
	}
	b.p, b.n, b.want, b.err = p, 0, want, nil
	if b.step == nil {
		b.step = co.readStep
	}
	err := co.rc.Read(b.step)
	n, rerr := b.n, b.err
	b.p, b.err = nil, nil
	if n > 0 {
		// Bytes first, the failure at the next read (the socket reports
		// an error such as a reset only once).
		b.pending = rerr
		return n, nil
	}
	if err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: co.LocalAddr(), Addr: co.RemoteAddr(), Err: err}
	}
	return 0, rerr
}

// readStep is one attempt of readAtLeast on the socket: true when done,
// false to wait for the socket to be readable.
func (co *coalescer) readStep(fd uintptr) bool {
	b := &co.batch
	for {
		if rest := b.want - b.n; rest != co.lowat {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, rest)
			co.lowat = rest
		}
		co.reads++
		k, err := unix.Read(int(fd), b.p[b.n:])
		switch {
		case k > 0:
			b.n += k
			// Less than wanted: wait for the rest to be queued rather
			// than read it as it trickles in.
			if b.n >= b.want {
				return true
			}
		case err == nil:
			b.err = io.EOF
			return true
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			return false
		default:
			b.err = &net.OpError{Op: "read", Net: "tcp", Source: co.LocalAddr(), Addr: co.RemoteAddr(), Err: os.NewSyscallError("read", err)}
			return true
		}
	}
}

// batchRead is readAtLeast's state between its steps.
type batchRead struct {
	p       []byte
	n, want int
	err     error
	pending error // the failure that ended a read which returned bytes
	step    func(fd uintptr) bool
}

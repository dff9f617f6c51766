package rawsock

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Conn is a TCP connection whose Read and Write are raw syscalls.
type Conn struct {
	net.Conn
	rc syscall.RawConn
}

// Wrap returns c as a *Conn, or c itself when it has no descriptor (TLS).
func Wrap(c net.Conn) net.Conn {
	if rc := RawConn(c); rc != nil {
		return &Conn{Conn: c, rc: rc}
	}
	return c
}

// RawConn is c's descriptor (a *Conn's, or the net package's); nil when it
// has none (TLS).
func RawConn(c net.Conn) syscall.RawConn {
	if s, ok := c.(*Conn); ok {
		return s.rc
	}
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

// Read is net.Conn's: io.EOF at the peer's close; a closed socket's or a
// deadline's error is the net package's.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait for the socket
			}
			n, errno = int(r), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p, waiting for the socket as needed.
func (c *Conn) Write(p []byte) (int, error) { return c.Writev([][]byte{p}) }

// Writev writes all of iov (which it consumes) in as few writev(2) as the
// socket allows, waiting for it as needed.
func (c *Conn) Writev(iov [][]byte) (int, error) {
	total := 0
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for {
			n, e := writev(fd, iov)
			switch e {
			case 0:
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait for the socket
			default:
				errno = e
				return true
			}
			total += n
			if iov = consume(iov, n); len(iov) == 0 {
				return true
			}
		}
	})
	if err == nil && errno != 0 {
		err = c.opError("write", errno)
	}
	return total, err
}

func (c *Conn) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}

// WritevOnce writes iov (up to MaxIov slices) with one writev(2) that
// never waits for the socket: n is what the kernel took, 0 when its
// buffer was full.
func WritevOnce(rc syscall.RawConn, iov [][]byte) (n int, err error) {
	var errno syscall.Errno
	err = rc.Write(func(fd uintptr) bool {
		for {
			n, errno = writev(fd, iov)
			if errno != syscall.EINTR {
				break
			}
		}
		if errno == syscall.EAGAIN {
			n, errno = 0, 0
		}
		return true // one try: never wait for the socket
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("writev", errno)
	}
	return n, err
}

// writev is one writev(2) of up to MaxIov of iov's slices, as a raw
// syscall.
func writev(fd uintptr, iov [][]byte) (int, syscall.Errno) {
	var vecs [MaxIov]syscall.Iovec
	v := vecs[:0]
	for _, b := range iov {
		if len(v) == MaxIov {
			break
		}
		if len(b) > 0 {
			iv := syscall.Iovec{Base: &b[0]}
			iv.SetLen(len(b))
			v = append(v, iv)
		}
	}
	if len(v) == 0 {
		return 0, 0
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// consume drops n written bytes from the front of iov.
func consume(iov [][]byte, n int) [][]byte {
	for len(iov) > 0 && n >= len(iov[0]) {
		n -= len(iov[0])
		iov = iov[1:]
	}
	if n > 0 {
		iov[0] = iov[0][n:]
	}
	return iov
}

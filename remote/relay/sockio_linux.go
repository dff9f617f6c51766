package relay

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Socket reads and writes that do not wake the runtime's sysmon.
//
// A goroutine's read(2) or write(2) through the net package enters the
// scheduler's syscall state (runtime.entersyscall), and the first one after
// the process was idle wakes the runtime's monitor thread, sysmon, which
// then polls every 20 µs for at least 1 ms before it backs off (the sysmon
// loop in the Go runtime's proc.go). A relay goes idle between frames
// thousands of times a second, so sysmon never backed off: in a profile of
// the relays under one cross-node stream of Noise clients (perf, exec-bench
// fleet) sysmon's sleeps and wake-ups were 18 % of their CPU. The relay's
// sockets are non-blocking, so their reads and writes never wait in the
// kernel: they are made as raw syscalls, which skip that state, and wait
// for the socket through the runtime's poller (syscall.RawConn) as the net
// package does.

// sockConn is a TCP connection whose Read and Write are raw syscalls.
type sockConn struct {
	net.Conn
	rc syscall.RawConn
}

// wrapSock returns c as a sockConn, or c itself when it has no
// descriptor (TLS).
func wrapSock(c net.Conn) net.Conn {
	if rc := rawConn(c); rc != nil {
		return &sockConn{Conn: c, rc: rc}
	}
	return c
}

// rawConn is c's descriptor for raw reads and writes; nil when it has
// none (TLS).
func rawConn(c net.Conn) syscall.RawConn {
	if s, ok := c.(*sockConn); ok {
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

func (c *sockConn) Read(p []byte) (int, error) {
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
	case err != nil: // closed, or past the deadline: the net package's errors
		return 0, err
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *sockConn) Write(p []byte) (int, error) { return c.writev([][]byte{p}) }

// writev writes all of iov (consumed), waiting for the socket as needed.
func (c *sockConn) writev(iov [][]byte) (int, error) {
	total := 0
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for {
			n, e := rawWritev(fd, iov)
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
			if iov = consumeIov(iov, n); len(iov) == 0 {
				return true
			}
		}
	})
	if err == nil && errno != 0 {
		err = c.opError("write", errno)
	}
	return total, err
}

func (c *sockConn) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}

// writevOnce writes iov with one writev(2) that never waits for the
// socket: n is what the kernel took (0 when its buffer was full).
func writevOnce(rc syscall.RawConn, iov [][]byte) (n int, err error) {
	var errno syscall.Errno
	err = rc.Write(func(fd uintptr) bool {
		for {
			n, errno = rawWritev(fd, iov)
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

// rawWritev is one writev(2) of up to maxIov of iov's slices, as a raw
// syscall.
func rawWritev(fd uintptr, iov [][]byte) (int, syscall.Errno) {
	var vecs [maxIov]syscall.Iovec
	v := vecs[:0]
	for _, b := range iov {
		if len(v) == maxIov {
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

// maxIov: the slices one writev takes, a link's whole gather (a header
// and a payload per frame); a longer iov goes in several.
const maxIov = 2 * corkFrames

// consumeIov drops n written bytes from the front of iov.
func consumeIov(iov [][]byte, n int) [][]byte {
	for len(iov) > 0 && n >= len(iov[0]) {
		n -= len(iov[0])
		iov = iov[1:]
	}
	if n > 0 {
		iov[0] = iov[0][n:]
	}
	return iov
}

package rawsock

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Conn is a TCP connection whose Read and Write are raw syscalls. Its
// reads and writes allocate nothing: the functions syscall.RawConn calls
// and what they work on are the Conn's, made once.
type Conn struct {
	net.Conn
	rc syscall.RawConn

	rmu   sync.Mutex // the read below
	rp    []byte
	rn    int
	rerr  syscall.Errno
	rfunc func(uintptr) bool

	wmu   sync.Mutex // the write below
	wiov  [MaxIov][]byte
	wv    [][]byte // what is left of wiov
	wn    int
	werr  syscall.Errno
	wonce bool // one try, never wait
	wfunc func(uintptr) bool
}

// Wrap returns c as a *Conn, or c itself when it has no descriptor (TLS).
func Wrap(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	r := &Conn{Conn: c, rc: rc}
	r.rfunc, r.wfunc = r.read, r.write
	return r
}

// Of is c if it is a *Conn, else nil.
func Of(c net.Conn) *Conn {
	r, _ := c.(*Conn)
	return r
}

// CloseWrite shuts the sending side down, as *net.TCPConn's does (net/http
// half-closes a connection it ends).
func (c *Conn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return &net.OpError{Op: "close", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errors.ErrUnsupported}
	}
	return cw.CloseWrite()
}

// Read is net.Conn's: io.EOF at the peer's close; a closed socket's or a
// deadline's error is the net package's.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rp, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.rfunc)
	n, errno := c.rn, c.rerr
	c.rp = nil
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

func (c *Conn) read(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait for the socket
		}
		c.rn, c.rerr = int(r), e
		return true
	}
}

// Write writes all of p, waiting for the socket as needed.
func (c *Conn) Write(p []byte) (int, error) {
	return c.Writev([][]byte{p})
}

// Writev writes all of iov in as few writev(2) as the socket allows,
// waiting for it as needed.
func (c *Conn) Writev(iov [][]byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	total := 0
	for len(iov) > 0 {
		k := c.load(iov)
		iov = iov[k:]
		c.wonce = false
		err := c.rc.Write(c.wfunc)
		n, errno := c.unload()
		total += n
		if err == nil && errno != 0 {
			err = c.opError("write", errno)
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// TryWritev writes iov (up to MaxIov slices) with one writev(2) that
// never waits for the socket: n is what the kernel took, 0 when its
// buffer was full.
func (c *Conn) TryWritev(iov [][]byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.load(iov)
	c.wonce = true
	err := c.rc.Write(c.wfunc)
	n, errno := c.unload()
	if err == nil && errno != 0 {
		err = c.opError("write", errno)
	}
	return n, err
}

// load puts up to MaxIov of iov in c.wiov: how many.
func (c *Conn) load(iov [][]byte) int {
	k := copy(c.wiov[:], iov)
	c.wv, c.wn, c.werr = c.wiov[:k], 0, 0
	return k
}

// unload is what the write did, and lets go of the caller's buffers.
func (c *Conn) unload() (int, syscall.Errno) {
	clear(c.wiov[:])
	c.wv = nil
	return c.wn, c.werr
}

func (c *Conn) write(fd uintptr) bool {
	for {
		n, e := writev(fd, c.wv)
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return c.wonce // wait for the socket, unless one try
		default:
			c.werr = e
			return true
		}
		c.wn += n
		if c.wv = consume(c.wv, n); len(c.wv) == 0 || c.wonce {
			return true
		}
		if n == 0 {
			return false // the kernel took nothing: wait rather than spin
		}
	}
}

func (c *Conn) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}

// writev is one writev(2) of iov (at most MaxIov slices), as a raw
// syscall.
func writev(fd uintptr, iov [][]byte) (int, syscall.Errno) {
	var vecs [MaxIov]syscall.Iovec
	v := vecs[:0]
	for _, b := range iov {
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

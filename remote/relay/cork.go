package relay

import (
	"bufio"
	"encoding/binary"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execgo/exec-server/internal/rawsock"
)

// Writing several websocket messages in one syscall.
//
// coder/websocket flushes its buffered writer at the end of every message,
// so each message a leg writes is its own write(2): on a 2-core machine the
// syscalls, not the relay's logic, bounded the frames per second a node
// carried. A leg's socket is a corkConn: while the leg's writer holds it
// corked, the library's writes gather in a buffer, and uncorking writes
// them in one syscall. A leg corks only when it has several frames in hand
// (its queue, or a batch from a peer link's inbox): a lone frame is
// written at once, as before.

// corkMax: gathered bytes past this are written at once (with the write
// that passed it, in one writev), so a batch of large frames holds at most
// this much besides the frame in hand.
const corkMax = 64 << 10

var corkBufs = sync.Pool{New: func() any { b := make([]byte, 0, corkMax); return &b }}

// corkConn is a hijacked connection whose writes can be gathered.
type corkConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	buf    *[]byte // from corkBufs while corked
	// abort: the leg cut the socket; Close writes nothing more.
	abort atomic.Bool
	// writes counts the writes that reached the socket (tests: messages
	// per syscall).
	writes atomic.Uint64
	// beforeRead runs before each read from the socket (the leg's
	// releaseHeld: what its reader gathered toward another socket goes
	// before the reader may wait). Set once, before the first read.
	beforeRead func()
	// rs writes without waiting (tryWritev); nil when the connection
	// has no file descriptor (TLS).
	rs *rawsock.Conn
	// carry: the part of a message tryWritev's write left; every write
	// sends it first.
	carry []byte
}

// Read reads from the socket, after beforeRead. The library reads the
// socket only once its buffer holds no more whole frames.
func (c *corkConn) Read(p []byte) (int, error) {
	if c.beforeRead != nil {
		c.beforeRead()
	}
	return c.Conn.Read(p)
}

// Write gathers p while corked, else writes it. Close does not take mu:
// closing the socket ends a write blocked here (the leg's watchdog).
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.flushCarryLocked(); err != nil {
		return 0, err
	}
	if !c.corked {
		c.writes.Add(1)
		return c.Conn.Write(p)
	}
	b := *c.buf
	if len(b)+len(p) <= corkMax {
		*c.buf = append(b, p...)
		return len(p), nil
	}
	c.writes.Add(1)
	n, err := c.writeBoth(b, p)
	*c.buf = b[:0]
	if n -= len(b); n < 0 {
		n = 0
	}
	return n, err
}

// writeBoth writes b then p, in one writev when the socket is raw.
func (c *corkConn) writeBoth(b, p []byte) (int, error) {
	if c.rs != nil {
		return c.rs.Writev([][]byte{b, p})
	}
	bufs := net.Buffers{b, p}
	n, err := bufs.WriteTo(c.Conn)
	return int(n), err
}

// Close writes what was gathered first, when no write is blocked: the
// library answers a peer's close from its read goroutine (the reply lands
// here while the leg is corked) and then closes the socket at once. A write
// blocked in mu is the watchdog's case: the socket is closed under it.
func (c *corkConn) Close() error {
	if !c.abort.Load() && c.mu.TryLock() {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		_ = c.flushCarryLocked()
		if c.corked && len(*c.buf) > 0 {
			c.writes.Add(1)
			_, _ = c.Conn.Write(*c.buf)
			*c.buf = (*c.buf)[:0]
		}
		c.mu.Unlock()
	}
	return c.Conn.Close()
}

// cork starts gathering writes.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.buf = corkBufs.Get().(*[]byte)
	c.mu.Unlock()
}

// uncork writes what was gathered, in one write, and stops gathering.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		return nil
	}
	c.corked = false
	b := *c.buf
	var err error
	if len(b) > 0 {
		c.writes.Add(1)
		_, err = c.Conn.Write(b)
	}
	*c.buf = b[:0]
	corkBufs.Put(c.buf)
	c.buf = nil
	return err
}

// wsBinaryHeader is the header of an unmasked, final binary websocket
// frame of n bytes (a server's), in the fewest bytes, as RFC 6455 asks.
func wsBinaryHeader(dst *[10]byte, n int) []byte {
	dst[0] = 0x82
	switch {
	case n < 126:
		dst[1] = byte(n)
		return dst[:2]
	case n <= 0xffff:
		dst[1] = 126
		binary.BigEndian.PutUint16(dst[2:], uint16(n))
		return dst[:4]
	default:
		dst[1] = 127
		binary.BigEndian.PutUint64(dst[2:], uint64(n))
		return dst[:10]
	}
}

// tryWritev writes iov (whole websocket messages, the leg's: the caller
// holds its wmu, so none of its messages is half written) with one
// writev(2) that never waits. rest is nil when all went, else a copy of
// what is left for finish to write on another goroutine (the caller's
// record is reused). When the kernel took part, the remainder is also
// c.carry, which any other write sends first: the library's own messages
// (pings, pongs, close, each one Write under c.mu) go at a message
// boundary. When nothing could be tried (c.mu taken by such a write, or
// the socket cut), rest is the whole.
func (c *corkConn) tryWritev(iov [][]byte) (rest []byte, carried bool, err error) {
	if !c.mu.TryLock() {
		return concat(iov, 0), false, nil
	}
	defer c.mu.Unlock()
	if c.corked || len(c.carry) > 0 || c.abort.Load() {
		return concat(iov, 0), false, nil
	}
	n, err := c.rs.TryWritev(iov)
	if err != nil {
		return nil, false, err
	}
	c.writes.Add(1)
	c.carry = concat(iov, n)
	return c.carry, c.carry != nil, nil
}

// concat copies iov from its nth byte on; nil when nothing is left.
func concat(iov [][]byte, n int) []byte {
	total := 0
	for _, b := range iov {
		total += len(b)
	}
	if n >= total {
		return nil
	}
	out := make([]byte, 0, total-n)
	for _, b := range iov {
		if n >= len(b) {
			n -= len(b)
			continue
		}
		out = append(out, b[n:]...)
		n = 0
	}
	return out
}

// finish writes what tryWritev left, waiting for the socket (the leg's
// watchdog bounds it): the carry (unless another write sent it first),
// or rest whole when nothing was written.
func (c *corkConn) finish(rest []byte, carried bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.flushCarryLocked(); err != nil || carried {
		return err
	}
	c.writes.Add(1)
	_, err := c.Conn.Write(rest)
	return err
}

func (c *corkConn) flushCarryLocked() error {
	if len(c.carry) == 0 {
		return nil
	}
	c.writes.Add(1)
	_, err := c.Conn.Write(c.carry)
	c.carry = nil
	return err
}

// corkWriter is the ResponseWriter a rendezvous upgrade hands to
// websocket.Accept: its Hijack returns the connection wrapped in a
// corkConn (and the buffered writer retargeted to it).
type corkWriter struct {
	http.ResponseWriter
	cc *corkConn
}

func (w *corkWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if brw.Writer.Buffered() > 0 {
		if err := brw.Writer.Flush(); err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	conn = rawsock.Wrap(conn)
	w.cc = &corkConn{Conn: conn, rs: rawsock.Of(conn)}
	brw.Writer.Reset(w.cc)
	return w.cc, brw, nil
}

func (w *corkWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

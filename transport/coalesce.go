package transport

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"
	"syscall"
)

// coalesceBuf is the size of the write buffer coder/websocket gets for an
// accepted connection (net/http's hijack gives it 4 KiB too).
const coalesceBuf = 4 << 10

// coalescer is the hijacked connection under an accepted websocket. It
// exists to send each frame with one write system call instead of two.
//
// coder/websocket (write.go, writeFrame) puts a frame's header into its
// bufio.Writer and then writes the payload to it; a payload that does not
// fit fills the buffer, which is flushed (a write of exactly coalesceBuf
// bytes), and the rest goes straight from the caller's slice (a second
// write), or into the buffer, flushed at the frame's end. While a message
// is being sent (between hold and release) the coalescer keeps such a full
// buffer back and sends it with the next write in one writev. Any other
// write passes straight through, so a frame that fits the buffer costs one
// write as before; release sends what is still held (a payload that filled
// the buffer exactly), under the message's context.
type coalescer struct {
	net.Conn

	// rc is the TCP socket under a plain connection (nil otherwise) and
	// lowat the SO_RCVLOWAT last set on it (0: never set, the default 1).
	// Read alone uses them (coder/websocket reads on one goroutine).
	rc    syscall.RawConn
	lowat int
	reads int // read calls, for tests
	batch batchRead

	mu      sync.Mutex
	holding bool
	held    []byte // a full buffer kept back; cap coalesceBuf
	vec     [2][]byte
	bufs    net.Buffers // over vec
}

// Read reads from the connection. A read of at least lowatMin bytes is
// coder/websocket reading a frame's payload straight into the message
// (bufio.Reader.Read passes a read at least its buffer's size through when
// its buffer is empty, and coder/websocket's frame reader asks for no more
// than what is left of the frame), so those bytes are coming: such a read
// waits until min(len(p), lowatMax) bytes are there (SO_RCVLOWAT, so that
// the socket wakes its reader only then) and takes them in one go. A peer
// that writes a large message in small pieces (coder/websocket's client
// writes masked frames through a 4 KiB buffer) otherwise had it read as it
// trickled in, 8-12 KiB per read, thousands of reads per fs/writeFile.
// Any other read (frame headers, small frames through the 4 KiB buffer)
// puts the default back first, so no message waits for bytes that are not
// coming.
func (c *coalescer) Read(p []byte) (int, error) {
	if c.rc == nil || len(p) < lowatMin {
		if err := c.batch.pending; err != nil {
			c.batch.pending = nil
			return 0, err
		}
		if c.lowat > 1 {
			setRcvlowat(c.rc, 1)
			c.lowat = 1
		}
		c.reads++
		return c.Conn.Read(p)
	}
	return c.readAtLeast(p, min(len(p), lowatMax))
}

// lowatMin and lowatMax bound the SO_RCVLOWAT that Read sets.
const (
	lowatMin = 64 << 10
	lowatMax = 512 << 10
)

func (c *coalescer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) > 0 {
		// WriteTo (writev) consumes the slice it is called on, so bufs is
		// set over vec each time (no allocation per frame).
		c.vec = [2][]byte{c.held, p}
		c.bufs = c.vec[:]
		n, err := c.bufs.WriteTo(c.Conn)
		c.vec = [2][]byte{} // p is the caller's
		c.held = c.held[:0]
		n -= coalesceBuf
		if n < 0 {
			// The held bytes, reported written earlier, did not all go.
			n = 0
		}
		return int(n), err
	}
	if c.holding && len(p) == coalesceBuf {
		if c.held == nil {
			c.held = make([]byte, 0, coalesceBuf)
		}
		c.held = append(c.held, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// hold starts a message: full buffers are kept back until the next write.
func (c *coalescer) hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// release ends a message, sending anything still held; ctx bounds that
// write as it bounded the message's.
func (c *coalescer) release(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	if len(c.held) == 0 {
		return nil
	}
	// As coder/websocket does for a frame write (conn.go,
	// setupWriteTimeout): a write cut short by its context closes the
	// connection.
	stop := context.AfterFunc(ctx, func() { _ = c.Conn.Close() })
	defer stop()
	_, err := c.Conn.Write(c.held)
	c.held = c.held[:0]
	return err
}

// coalescingWriter hands coder/websocket's Accept a coalescer in place of
// the hijacked connection.
type coalescingWriter struct {
	http.ResponseWriter
	co *coalescer
}

func (w *coalescingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *coalescingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	w.co = &coalescer{Conn: conn, rc: socketOf(conn)}
	brw.Writer = bufio.NewWriterSize(w.co, coalesceBuf)
	return w.co, brw, nil
}

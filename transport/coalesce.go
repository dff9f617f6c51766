package transport

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"
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

	mu      sync.Mutex
	holding bool
	held    []byte // a full buffer kept back; cap coalesceBuf
	vec     [2][]byte
	bufs    net.Buffers // over vec
}

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
	w.co = &coalescer{Conn: conn}
	brw.Writer = bufio.NewWriterSize(w.co, coalesceBuf)
	return w.co, brw, nil
}

// Package coalesce gathers the pieces a websocket client writes a message
// in into one write. coder/websocket's client masks each outgoing message
// through a bufio.Writer fixed at 4 KiB, so a 60 KiB relay frame left as
// fifteen 4 KiB writes: fifteen syscalls for the sender and as many
// wake-ups for the relay reading it. Servers do not mask and write
// large messages whole; this puts clients (the executor and the harness
// dial the rendezvous) on the same footing.
//
// The sockets it dials also read and write with raw syscalls
// (internal/rawsock), as the relay's own do: an executor or harness that
// goes idle between frames then does not keep the Go runtime's sysmon
// thread awake.
package coalesce

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/execgo/exec-server/internal/rawsock"
)

const (
	// piece is coder/websocket's client write buffer: a full one is a
	// piece of a larger message, anything shorter ends a write.
	piece = 4096
	// maxHeld bounds what is held back (the relay's frames are smaller).
	maxHeld = 1 << 20
)

// holdFor flushes a message that happened to end on a piece boundary: the
// only case that waits. A variable for the tests, which count writes and
// must not have a preempted test goroutine's pieces flushed by the timer.
var holdFor = 500 * time.Microsecond

// Client returns hc with its transport wrapped so that the websocket
// connections it upgrades coalesce their writes; other requests are
// untouched. When the transport is an *http.Transport (nil is
// http.DefaultTransport), the result has a clone of it whose dials are
// raw sockets (rawDial). hc is not modified. Each call clones: call it
// once per client, not per dial.
func Client(hc *http.Client) *http.Client {
	c := *hc
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	if t, ok := base.(*http.Transport); ok {
		base = rawDial(t)
	}
	c.Transport = roundTripper{base}
	return &c
}

// rawDial is a clone of t whose plain dials (to the server, or to a proxy)
// are wrapped by rawsock; TLS then runs over the raw socket. A transport
// dialing with the deprecated Dial, or none, is returned as it is.
func rawDial(t *http.Transport) *http.Transport {
	dial := t.DialContext
	if dial == nil {
		//lint:ignore SA1019 a caller's deprecated Dial is read to be kept: a DialContext set here would replace it
		if t.Dial != nil {
			return t
		}
		dial = (&net.Dialer{}).DialContext
	}
	t = t.Clone()
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return rawsock.Wrap(c), nil
	}
	return t
}

type roundTripper struct{ base http.RoundTripper }

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
		if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
			resp.Body = &Conn{rwc: rwc}
		}
	}
	return resp, err
}

// Conn is a read-write stream whose full-piece writes are held and sent
// with the next shorter write (or after holdFor).
type Conn struct {
	rwc   io.ReadWriteCloser
	mu    sync.Mutex
	held  []byte
	timer *time.Timer
	err   error // a held write's failure, returned by the next Write
}

// New wraps rwc.
func New(rwc io.ReadWriteCloser) *Conn { return &Conn{rwc: rwc} }

func (c *Conn) Read(p []byte) (int, error) { return c.rwc.Read(p) }

func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if len(p) == piece && len(c.held)+piece <= maxHeld {
		c.held = append(c.held, p...)
		if c.timer == nil {
			c.timer = time.AfterFunc(holdFor, c.flushHeld)
		} else {
			c.timer.Reset(holdFor)
		}
		return len(p), nil
	}
	if len(c.held) == 0 {
		return c.rwc.Write(p)
	}
	c.timer.Stop()
	c.held = append(c.held, p...)
	_, err := c.rwc.Write(c.held)
	c.held = c.held[:0]
	if err != nil {
		c.err = err
		return 0, err
	}
	return len(p), nil
}

func (c *Conn) flushHeld() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) == 0 || c.err != nil {
		return
	}
	if _, err := c.rwc.Write(c.held); err != nil {
		c.err = err
	}
	c.held = c.held[:0]
}

func (c *Conn) Close() error {
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.held = nil
	c.mu.Unlock()
	return c.rwc.Close()
}

package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/internal/budget"
	"github.com/execgo/exec-server/jsonrpc"
)

// WebSocket is a jsonrpc.Stream over one websocket connection: one JSON
// message per websocket message. Text and binary messages are both read;
// text messages are sent.
type WebSocket struct {
	c    *websocket.Conn
	name string

	budget     *budget.Bytes
	budgetWait time.Duration
	stall      *stallWatch // nil: a message may stall forever

	// sizeHint is the length of the last message over smallMessage (read
	// by one goroutine, the connection's reader): a large message's buffer
	// grows to it at once instead of doubling from 1 KiB, which cost a
	// large fs/writeFile three times its size in allocations, copies and
	// cleared pages. A smaller message after it lowers it again.
	sizeHint int
	// jumps counts readMessage's jumps to the last large size (read by
	// tests: the jump is otherwise invisible once a message is whole).
	jumps int

	// co, for an accepted connection, sends each frame with one write
	// (coalesce.go); nil for a dialled one.
	co *coalescer
}

// NewWebSocket wraps an accepted (or dialled) websocket connection.
func NewWebSocket(c *websocket.Conn, peer string) *WebSocket {
	return &WebSocket{c: c, name: "exec-server websocket " + peer}
}

// Read returns the next message. With a budget, the message's buffer is
// taken from it as it grows and given back by Release; a message over
// 64 KiB that cannot get its bytes within the budget wait is read through
// without being kept and answered with an error (a *jsonrpc.DecodeError).
//
// Once a message has begun, its data must keep coming: a message that
// makes no progress for the handler's StallTimeout closes the connection
// (a peer that sends a frame header, or the first fragment, and then
// nothing would hold its buffer and its connection forever, even while it
// answers pings). Between messages a connection may idle.
func (w *WebSocket) Read(ctx context.Context) ([]byte, error) {
	_, r, err := w.c.Reader(ctx)
	if err != nil {
		if peerClosed(err) {
			// A peer that closes, with a close frame or without one
			// (most CLIs just exit), ends the stream; it is no error.
			return nil, io.EOF
		}
		return nil, err
	}
	if w.stall != nil {
		w.stall.begin()
		defer w.stall.end()
	}
	data, err := w.readMessage(ctx, r)
	if err != nil && w.stall != nil && w.stall.fired.Load() {
		return nil, fmt.Errorf("message made no progress for %v: %w", w.stall.limit, err)
	}
	return data, err
}

// peerClosed reports whether err means the peer closed the connection:
// a normal or going-away close frame, or the TCP stream's end.
func peerClosed(err error) bool {
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway, websocket.StatusNoStatusRcvd:
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func (w *WebSocket) readMessage(ctx context.Context, r io.Reader) ([]byte, error) {
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			// Double the buffer, and take the growth from the budget
			// first: what is counted is what is allocated.
			grow := max(cap(buf), 1024)
			if cap(buf) >= smallMessage && w.sizeHint > cap(buf)+grow {
				// One byte more than the hint, so that a message of the
				// same size ends without another growth.
				grow = w.sizeHint + 1 - cap(buf)
			}
			// A large message takes the kept large buffer when it fits
			// (a recycled message or frame, jsonrpc.TakeLargeBuffer): a
			// new one costs its clearing or its page faults, about as
			// much as the rest of an fs/writeFile's work.
			var next []byte
			if want := cap(buf) + grow; want > jsonrpc.LargeBufferMin {
				if next = jsonrpc.TakeLargeBuffer(len(buf), want, 2*want); next != nil {
					grow = cap(next) - cap(buf)
				}
			}
			jumped := false
			if next == nil && len(buf) > 0 && cap(buf) < smallMessage && w.sizeHint > smallMessage {
				// A message longer than its first read, after large
				// ones (a run of fs/writeBlock): its buffer goes
				// straight to the last large size, when the kept large
				// buffer is free and the budget has room now, instead
				// of doubling from 1 KiB. The client's first bytes
				// trickle in (4 KiB writes): each small read found the
				// socket empty and woke the reader again, ~5 wake-ups
				// per 1 MiB block; a read of the message's size waits
				// for its bytes in batches (coalescer.Read). A small
				// message that took it is copied out at its end
				// (shrink), so it never holds the large buffer.
				want := w.sizeHint + 1
				if next = jsonrpc.TakeLargeBuffer(len(buf), want, 2*want); next != nil {
					if w.budget.TryAcquire(int64(cap(next) - cap(buf))) {
						grow = cap(next) - cap(buf)
						jumped = true
						w.jumps++
					} else {
						jsonrpc.PutBuffer(next[:0])
						next = nil
					}
				}
			}
			var berr error
			if jumped {
				// Taken above.
			} else if cap(buf)+grow <= smallMessage {
				// Small messages never wait: a client must be able to
				// terminate a process while others hog the budget. They
				// are counted all the same, and make big ones wait.
				w.budget.Force(int64(grow))
			} else {
				actx, cancel := context.WithTimeout(ctx, w.budgetWait)
				berr = w.budget.Acquire(actx, int64(grow))
				cancel()
			}
			if berr != nil {
				if next != nil {
					jsonrpc.PutBuffer(next[:0])
				}
				w.budget.Release(int64(cap(buf)))
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				rest, err := io.Copy(io.Discard, r)
				if err != nil {
					return nil, err
				}
				return nil, &jsonrpc.DecodeError{Detail: fmt.Sprintf("message of %d bytes refused: %v", int64(len(buf))+rest, berr)}
			}
			if next == nil {
				next = make([]byte, len(buf), cap(buf)+grow)
			}
			copy(next, buf)
			buf = next
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n > 0 && w.stall != nil {
			w.stall.progress()
		}
		if err == io.EOF {
			if len(buf) > smallMessage {
				w.sizeHint = len(buf)
			} else if cap(buf) > smallMessage {
				buf = w.shrink(buf)
			}
			return buf, nil
		}
		if err != nil {
			w.budget.Release(int64(cap(buf)))
			return nil, err
		}
	}
}

// stallWatch closes a connection whose current message makes no progress
// for limit. One timer per connection, re-armed per message, not per read:
// progress is a timestamp, checked when the timer fires.
type stallWatch struct {
	limit time.Duration
	cut   func()

	last   atomic.Int64 // unix nanoseconds of the last progress
	fired  atomic.Bool
	mu     sync.Mutex
	active bool
	t      *time.Timer
}

func newStallWatch(limit time.Duration, cut func()) *stallWatch {
	return &stallWatch{limit: limit, cut: cut}
}

func (s *stallWatch) begin() {
	s.last.Store(time.Now().UnixNano())
	s.mu.Lock()
	s.active = true
	if s.t == nil {
		s.t = time.AfterFunc(s.limit, s.check)
	} else {
		s.t.Reset(s.limit)
	}
	s.mu.Unlock()
}

func (s *stallWatch) progress() { s.last.Store(time.Now().UnixNano()) }

func (s *stallWatch) end() {
	s.mu.Lock()
	s.active = false
	s.t.Stop()
	s.mu.Unlock()
}

func (s *stallWatch) check() {
	s.mu.Lock()
	if !s.active {
		s.mu.Unlock()
		return
	}
	if idle := time.Since(time.Unix(0, s.last.Load())); idle < s.limit {
		s.t.Reset(s.limit - idle)
		s.mu.Unlock()
		return
	}
	s.active = false
	s.fired.Store(true)
	s.mu.Unlock()
	s.cut()
}

// shrink copies a small message out of the large buffer it was read into
// (readMessage's jump) and gives that buffer back, budget and all. A
// trickling client can hold the large buffer's budget for one message at
// a time (one kept buffer, taken without waiting), as a large message
// could before.
func (w *WebSocket) shrink(buf []byte) []byte {
	small := make([]byte, len(buf))
	copy(small, buf)
	w.budget.Force(int64(cap(small)))
	w.budget.Release(int64(cap(buf)))
	jsonrpc.PutBuffer(buf[:0])
	return small
}

// smallMessage is the size up to which a message's buffer is taken from
// the budget without waiting.
const smallMessage = 64 << 10

// Ping checks that the peer is still there: it returns once the peer's
// pong arrives, or fails when ctx ends first. Something must be reading the
// connection meanwhile (the connection's own read loop is).
func (w *WebSocket) Ping(ctx context.Context) error { return w.c.Ping(ctx) }

// Release gives a message's bytes back to the budget (jsonrpc.Releaser).
func (w *WebSocket) Release(msg []byte) {
	w.budget.Release(int64(cap(msg)))
}

// Recycle is Release for a message that nothing refers to any more
// (jsonrpc.Recycler): a large one's buffer is kept for the next large
// message or frame (jsonrpc.PutBuffer: one buffer, server-wide, dropped at
// the reclaim of large messages).
func (w *WebSocket) Recycle(msg []byte) {
	w.Release(msg)
	recycle(msg)
}

// recycle hands a large message's buffer to jsonrpc.PutBuffer, which keeps
// it for the next large message or frame; a small one is left to the GC.
func recycle(msg []byte) {
	if cap(msg) > jsonrpc.LargeBufferMin {
		jsonrpc.PutBuffer(msg[:0])
	}
}

// FrameSize bounds one websocket frame that Write sends: a larger message
// goes out as a fragmented message of frames this size. Peers bound frames,
// not only messages (the reference refuses a frame over 16 MiB, so a
// 16 MiB fs/writeFile, about 22 MB of JSON, sent as one frame would cost
// the connection); 1 MiB frames cost nothing measurable.
const FrameSize = 1 << 20

// Write sends msg as one text message, fragmented into frames of at most
// FrameSize.
func (w *WebSocket) Write(ctx context.Context, msg []byte, _ bool) (err error) {
	if w.co != nil {
		w.co.hold()
		defer func() {
			if rerr := w.co.release(ctx); err == nil {
				err = rerr
			}
		}()
	}
	if len(msg) <= FrameSize {
		return w.c.Write(ctx, websocket.MessageText, msg)
	}
	mw, err := w.c.Writer(ctx, websocket.MessageText)
	if err != nil {
		return err
	}
	for len(msg) > 0 {
		// Each Write of the message writer is sent as one frame.
		n := min(len(msg), FrameSize)
		if _, err := mw.Write(msg[:n]); err != nil {
			_ = mw.Close()
			return err
		}
		msg = msg[n:]
	}
	return mw.Close()
}

// Close closes the websocket with a normal closure, without waiting long
// for the peer's reply.
func (w *WebSocket) Close() error {
	return w.c.CloseNow()
}

// Describe names the peer for error messages.
func (w *WebSocket) Describe() string { return w.name }

// Framing names the framing in parse errors (jsonrpc.FramingNamer).
func (w *WebSocket) Framing() string { return "websocket" }

// DefaultStallTimeout is how long an incoming message may make no progress
// before its connection is closed.
const DefaultStallTimeout = 60 * time.Second

// HandlerOptions configure the websocket HTTP handler.
type HandlerOptions struct {
	// MaxMessageBytes bounds one incoming message (default
	// DefaultMaxMessageBytes).
	MaxMessageBytes int64
	// MaxConnections bounds concurrent websocket connections; more get 503.
	MaxConnections int
	// PingInterval is how often the server pings (default 30s). A missing
	// pong does not close the connection; a ping that cannot even be
	// written for pingWriteLimit (the peer takes nothing at all) does.
	PingInterval time.Duration
	// MessageBudget, when set, is shared by every connection: the bytes
	// of incoming messages being read or handled. A message that cannot
	// get its bytes within BudgetWait (default 10s) is refused with an
	// error reply; the connection stays open.
	MessageBudget *budget.Bytes
	BudgetWait    time.Duration
	// StallTimeout closes a connection whose incoming message, once
	// begun, makes no progress for this long (default
	// DefaultStallTimeout; negative: never).
	StallTimeout time.Duration
	// Authenticate, when set, checks upgrade requests; an error is a 401
	// with the error's text.
	Authenticate func(*http.Request) error
	// Serve runs one connection until it ends. It is called on the
	// request's goroutine; ctx derives from Context.
	Serve func(ctx context.Context, s *WebSocket)
	// Context, when set, ends every connection when it ends (a server's
	// shutdown). Serve's ctx is not the request's: net/http cancels that
	// one when its background read sees the peer's EOF, which can happen
	// while the upgrade completes, and a peer that closed must read as
	// io.EOF, not as a cancelled context.
	Context context.Context
	Logger  *slog.Logger
}

// NewHandler returns the HTTP handler of the websocket listener: upgrades on
// "/", GET/HEAD "/readyz", 404 elsewhere. Requests with an Origin header
// are refused: no web page may drive this server from a browser.
func NewHandler(opts HandlerOptions) http.Handler {
	if opts.PingInterval <= 0 {
		opts.PingInterval = 30 * time.Second
	}
	if opts.MaxMessageBytes <= 0 {
		// coder/websocket reads a limit of 0 as "nothing at all".
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BudgetWait <= 0 {
		opts.BudgetWait = 10 * time.Second
	}
	if opts.StallTimeout == 0 {
		opts.StallTimeout = DefaultStallTimeout
	}
	var active atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The reference's order: Origin, path, method, the upgrade
		// headers, then authentication. An Origin header is refused on
		// every path and whatever its value, even empty.
		if _, ok := r.Header["Origin"]; ok {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		switch r.URL.Path {
		case "/readyz":
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET,HEAD")
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			w.WriteHeader(http.StatusOK)
			return
		case "/":
		default:
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if r.Method != http.MethodGet {
			plainText(w, http.StatusMethodNotAllowed, "Request method must be `GET`")
			return
		}
		if msg := upgradeProblem(r.Header); msg != "" {
			plainText(w, http.StatusBadRequest, msg)
			return
		}
		if opts.Authenticate != nil {
			if err := opts.Authenticate(r); err != nil {
				plainText(w, http.StatusUnauthorized, err.Error())
				return
			}
		}
		if opts.MaxConnections > 0 && active.Add(1) > int64(opts.MaxConnections) {
			active.Add(-1)
			http.Error(w, "too many websocket connections", http.StatusServiceUnavailable)
			return
		} else if opts.MaxConnections <= 0 {
			active.Add(1)
		}
		defer active.Add(-1)

		cw := &coalescingWriter{ResponseWriter: w}
		c, err := websocket.Accept(cw, r, &websocket.AcceptOptions{
			CompressionMode:    websocket.CompressionDisabled,
			InsecureSkipVerify: true, // Origin is refused above, whatever its value
		})
		if err != nil {
			opts.Logger.Debug("websocket upgrade failed", "peer", r.RemoteAddr, "err", err)
			return
		}
		c.SetReadLimit(opts.MaxMessageBytes)
		ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
		defer cancel()
		if opts.Context != nil {
			defer context.AfterFunc(opts.Context, cancel)()
		}
		stopPing := startPinger(ctx, c, opts.PingInterval)
		defer stopPing()
		ws := NewWebSocket(c, r.RemoteAddr)
		ws.co = cw.co
		ws.budget, ws.budgetWait = opts.MessageBudget, opts.BudgetWait
		if opts.StallTimeout > 0 {
			peer := r.RemoteAddr
			ws.stall = newStallWatch(opts.StallTimeout, func() {
				opts.Logger.Info("closing a connection whose message made no progress", "peer", peer, "timeout", opts.StallTimeout)
				c.CloseNow()
			})
		}
		opts.Serve(ctx, ws)
	})
}

// plainText answers with a text/plain body and no trailing newline, as the
// reference does.
func plainText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg))
}

// upgradeProblem checks a websocket upgrade request's headers and returns
// the reference's text for the first one that is wrong ("" when all are
// right).
func upgradeProblem(h http.Header) string {
	switch {
	case !hasToken(h, "Connection", "upgrade"):
		return "Connection header did not include 'upgrade'"
	case !hasToken(h, "Upgrade", "websocket"):
		return "`Upgrade` header did not include 'websocket'"
	case h.Get("Sec-WebSocket-Version") != "13":
		return "`Sec-WebSocket-Version` header did not include '13'"
	case len(h.Values("Sec-WebSocket-Key")) == 0:
		return "`Sec-WebSocket-Key` header missing"
	}
	return ""
}

// hasToken reports whether a comma-separated header has token, in any case.
func hasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// pingWriteLimit is how long a periodic ping may wait to be written.
const pingWriteLimit = 5 * time.Minute

// startPinger keeps intermediaries from closing an idle connection. It
// costs no goroutine while idle (10 000 idle connections are a workload we
// measure): a timer fires, pings on its own short-lived goroutine, and
// re-arms. The returned func stops it; a ping in progress ends with ctx.
func startPinger(ctx context.Context, c *websocket.Conn, every time.Duration) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	t = time.AfterFunc(every, func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		mu.Unlock()
		// coder/websocket closes the connection when a write's context
		// ends before the write does: a ping stuck behind a reader that
		// merely paused (back-pressure) must not cut it after one
		// interval. The same context bounds the wait for the pong, which
		// closes nothing when it ends.
		pctx, cancel := context.WithTimeout(ctx, max(every, pingWriteLimit))
		_ = c.Ping(pctx)
		cancel()
		mu.Lock()
		if !stopped {
			t.Reset(every)
		}
		mu.Unlock()
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// Listen opens a TCP listener. An IPv4 address binds IPv4 only and an IPv6
// one IPv6 only: "tcp" would make 0.0.0.0 a dual-stack [::] listener,
// reachable over IPv6 when the operator asked for IPv4. (Accepted
// connections have TCP_NODELAY set: Go sets it on every TCP connection.)
func Listen(addr string) (net.Listener, error) {
	network := "tcp"
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		switch a := ap.Addr(); {
		case a.Is4():
			network = "tcp4"
		case a.Is6() && !a.Is4In6():
			network = "tcp6"
		}
	}
	return net.Listen(network, addr)
}

// IsClosed reports whether err only says the peer went away.
func IsClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || websocket.CloseStatus(err) != -1
}

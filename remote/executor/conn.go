package executor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/internal/wsread"
	"github.com/execgo/exec-server/remote/noise"
)

// conn is one physical rendezvous websocket and its streams.
type conn struct {
	e    *executor
	ws   *websocket.Conn
	reg  registration
	ctx  context.Context // ends with the socket
	root context.Context // the executor's: sessions outlive a socket

	// out feeds the writer goroutine of the socket. A stream writes the
	// socket itself only when nothing is queued or being written (see
	// enqueue), and then on the socket's context: websocket writes
	// abandoned on a cancelled context close the whole connection, and a
	// stream's context ends with it.
	out, ctrl chan []byte
	wmu       sync.Mutex   // held while writing the socket
	unsent    atomic.Int64 // frames queued or being written by the writer
	reason    chan string  // why the socket ended, first ones win (see ended)

	mu       sync.Mutex
	active   map[string]*relayStream
	pending  map[string]*pending
	failures int
	cooldown time.Time
	gone     bool // the socket ended: no stream may be added
	wg       sync.WaitGroup
}

type pending struct {
	cancel context.CancelFunc
}

// relayStream is an established stream. Its owner is the socket that
// carries it now: a stream running the reliability extension moves to the
// next socket after a reconnect.
type relayStream struct {
	sid   string
	ch    *channel.Channel
	owner atomic.Pointer[conn]
}

var errSocketGone = errors.New("rendezvous socket closed")

// serveConn runs one socket until it ends and returns why.
func (e *executor) serveConn(ctx context.Context, ws *websocket.Conn, reg registration) string {
	root := ctx
	ctx, cancel := context.WithCancel(ctx)
	c := &conn{
		e: e, ws: ws, reg: reg, ctx: ctx, root: root,
		active:  make(map[string]*relayStream),
		pending: make(map[string]*pending),
		out:     make(chan []byte, outQueue),
		ctrl:    make(chan []byte, ctrlQueue),
		reason:  make(chan string, 4),
	}
	ws.SetReadLimit(int64(e.cfg.MaxFrameBytes))
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if r := c.writer(); r != "" {
			c.ended(r)
			ws.CloseNow()
		}
	}()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if r := c.keepalive(); r != "" {
			c.ended(r)
			ws.CloseNow()
		}
	}()
	// Streams kept from the last socket of this registration move here
	// (the writer runs: their resume and kept records go out at once).
	e.adopt(c)
	c.ended(c.readLoop())
	cancel()
	ws.CloseNow()
	// Streams running the reliability extension wait for the next
	// socket; the others end with this one (their sessions stay
	// resumable by a new stream).
	c.mu.Lock()
	var gone []*relayStream
	for _, st := range c.active {
		if st.ch.Resumable() {
			e.keep(st, reg.ExecutorRegistrationID)
		} else {
			gone = append(gone, st)
		}
	}
	clear(c.active)
	c.gone = true
	for _, p := range c.pending {
		p.cancel()
	}
	c.mu.Unlock()
	for _, st := range gone {
		st.ch.Fail(errSocketGone)
	}
	c.wg.Wait()
	return <-c.reason
}

// ended records why the socket ended. The first reasons win; later ones
// are dropped, never waited for: any number of streams' writes may fail
// on a dying socket (see enqueue), and a blocked send here once kept
// serveConn from ever returning, so the executor never redialled.
func (c *conn) ended(r string) {
	select {
	case c.reason <- r:
	default:
	}
}

// keepalive pings every PingInterval, never with a ping outstanding, and
// gives up after PongTimeout, as the reference.
func (c *conn) keepalive() string {
	t := time.NewTicker(c.e.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return ""
		case <-t.C:
			pctx, cancel := context.WithTimeout(c.ctx, c.e.cfg.PongTimeout)
			err := c.ws.Ping(pctx)
			cancel()
			if err != nil {
				if c.ctx.Err() != nil {
					return ""
				}
				return "pong_timeout"
			}
		}
	}
}

// outQueue bounds the data frames waiting for the socket; ctrlQueue the
// control frames (handshakes, and resets of streams with no data queued),
// which go first so that streams busy with output do not hold up a new
// stream's handshake.
const (
	outQueue  = 256
	ctrlQueue = 64
)

// write writes one frame on the socket's context; c.wmu is held.
func (c *conn) write(b []byte) string {
	ctx, cancel := context.WithTimeout(c.ctx, c.e.cfg.PongTimeout)
	err := c.ws.Write(ctx, websocket.MessageBinary, b)
	cancel()
	if err != nil && c.ctx.Err() == nil {
		return "write_error"
	}
	return ""
}

func (c *conn) writer() string {
	write := func(b []byte) string {
		c.wmu.Lock()
		r := c.write(b)
		c.wmu.Unlock()
		c.unsent.Add(-1)
		putFrame(b)
		return r
	}
	for {
		var b []byte
		select {
		case b = <-c.ctrl:
		default:
			select {
			case <-c.ctx.Done():
				return ""
			case b = <-c.ctrl:
			case b = <-c.out:
			}
		}
		if r := write(b); r != "" || c.ctx.Err() != nil {
			return r
		}
	}
}

// enqueue sends a frame: written at once by the caller when nothing is
// queued or being written (a hand-off to the writer goroutine per message
// was the larger part of a small message's cost), otherwise queued,
// waiting while ctx allows. Frames of one stream keep their order: a
// stream's earlier frame is counted in pending until written.
func (c *conn) enqueue(ctx context.Context, f *frame.Frame) error {
	b := marshal(f)
	if c.unsent.Load() == 0 && c.wmu.TryLock() {
		if c.unsent.Load() == 0 {
			if c.ctx.Err() != nil {
				c.wmu.Unlock()
				putFrame(b)
				return errSocketGone
			}
			r := c.write(b)
			c.wmu.Unlock()
			putFrame(b)
			if r != "" {
				c.ended(r)
				c.ws.CloseNow()
				return errSocketGone
			}
			return nil
		}
		c.wmu.Unlock()
	}
	c.unsent.Add(1)
	select {
	case c.out <- b:
		return nil
	case <-c.ctx.Done():
		c.unsent.Add(-1)
		putFrame(b)
		return errSocketGone
	case <-ctx.Done():
		c.unsent.Add(-1)
		putFrame(b)
		return ctx.Err()
	}
}

// Frames of large records are encoded into pooled buffers, recycled once
// written: a 60 KiB allocation per record was half the executor's
// garbage on bulk output. frameBuf fits a full record's frame.
const frameBuf = channel.MaxRecordPlaintext + noise.Overhead + 512

var framePool = sync.Pool{New: func() any {
	b := make([]byte, 0, frameBuf)
	return &b
}}

func marshal(f *frame.Frame) []byte {
	if len(f.Payload) < channel.MaxRecordPlaintext/2 || len(f.StreamID) > 256 {
		return f.Marshal()
	}
	return f.Append((*framePool.Get().(*[]byte))[:0])
}

func putFrame(b []byte) {
	if cap(b) == frameBuf {
		b = b[:0]
		framePool.Put(&b)
	}
}

// send queues a control frame without waiting: if even the control queue
// is full the socket is hopelessly behind and is dropped (as the
// reference drops it when message 2 cannot be queued).
func (c *conn) send(f *frame.Frame) error {
	c.unsent.Add(1)
	select {
	case c.ctrl <- f.Marshal():
		return nil
	case <-c.ctx.Done():
		c.unsent.Add(-1)
		return errSocketGone
	default:
		c.unsent.Add(-1)
		c.e.log.Warn("rendezvous socket write queue full; dropping the socket")
		c.ws.CloseNow()
		return errSocketGone
	}
}

func (c *conn) reset(streamID string) {
	if err := c.send(frame.Reset(streamID, ResetReason)); err != nil {
		c.e.log.Debug("sending reset failed", "stream_id", streamID, "err", err)
	}
}

// resetAfterData resets an established stream behind the data it has
// queued, so that its last records are not overtaken.
func (c *conn) resetAfterData(streamID string) {
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	if err := c.enqueue(ctx, frame.Reset(streamID, ResetReason)); err != nil {
		c.e.log.Debug("sending reset failed", "stream_id", streamID, "err", err)
	}
}

func (c *conn) readLoop() string {
	var rd wsread.Reader
	for {
		typ, b, err := rd.Read(c.ctx, c.ws)
		if err != nil {
			if websocket.CloseStatus(err) != -1 {
				return "peer_close"
			}
			return "read_error"
		}
		if typ != websocket.MessageBinary {
			c.e.log.Debug("dropping a text message from the rendezvous")
			continue
		}
		f, err := frame.Unmarshal(b)
		if err == nil {
			err = frame.Validate(f)
		}
		if err != nil {
			c.e.log.Debug("dropping an invalid relay frame", "err", err)
			continue
		}
		switch f.Kind {
		case frame.KindHandshake:
			c.handshake(f)
		case frame.KindData:
			c.data(f)
		case frame.KindReset:
			c.peerReset(f.StreamID)
		default:
			// ack, resume and heartbeat: 0.169 ignores them; an
			// active stream's channel gets them, for the acknowledgement
			// mode both ends may advertise.
			c.mu.Lock()
			st := c.active[f.StreamID]
			c.mu.Unlock()
			if st != nil {
				_ = st.ch.Deliver(c.ctx, f)
			}
		}
	}
}

// fail counts a failed handshake; the budget's end starts the cooldown.
// Called with c.mu held.
func (c *conn) failLocked() {
	c.failures++
	if c.failures >= c.e.cfg.FailureBudget {
		c.failures = 0
		c.cooldown = time.Now().Add(c.e.cfg.Cooldown)
		c.e.log.Warn("too many failed handshakes; refusing new ones for a while", "cooldown", c.e.cfg.Cooldown)
	}
}

func (c *conn) handshake(f *frame.Frame) {
	sid := f.StreamID
	c.mu.Lock()
	if _, ok := c.active[sid]; ok {
		// The stream stays; this does not count as a failure (as 0.169).
		c.mu.Unlock()
		c.reset(sid)
		return
	}
	if p, ok := c.pending[sid]; ok {
		p.cancel()
		delete(c.pending, sid)
		c.failLocked()
		c.mu.Unlock()
		c.reset(sid)
		return
	}
	if time.Now().Before(c.cooldown) || len(c.active) >= c.e.cfg.MaxStreams || len(c.pending) >= c.e.cfg.MaxPendingValidations {
		c.mu.Unlock()
		c.reset(sid)
		return
	}
	c.mu.Unlock()
	// The handshake's public-key work runs without the lock. Only this
	// goroutine (the socket's reader) adds pending entries, so what was
	// checked above still holds for this stream id.
	resp := noise.NewResponder(c.e.key, noise.Prologue(c.reg.EnvironmentID, c.reg.ExecutorRegistrationID, sid))
	authz, err := resp.ReadMessage1(f.Payload)
	if err == nil && (len(authz) > noise.MaxAuthorization || !utf8.Valid(authz)) {
		resp.Destroy()
		err = errors.New("harness authorization is not UTF-8 of at most 4096 bytes")
	}
	c.mu.Lock()
	if err != nil {
		c.failLocked()
		c.mu.Unlock()
		c.e.log.Warn("handshake rejected", "stream_id", sid, "err", err)
		c.reset(sid)
		return
	}
	vctx, cancel := context.WithTimeout(c.ctx, c.e.cfg.ValidateTimeout)
	p := &pending{cancel: cancel}
	c.pending[sid] = p
	c.wg.Add(1)
	c.mu.Unlock()
	// Validation runs apart: other streams go on meanwhile.
	go func() {
		defer c.wg.Done()
		defer cancel()
		v, err := c.e.reg.validate(vctx, c.reg.ExecutorRegistrationID, sid, resp.RemoteStatic(), string(authz))
		c.finish(sid, p, resp, v, err)
	}()
}

// finish completes a validated handshake, unless it was cancelled meanwhile.
func (c *conn) finish(sid string, p *pending, resp *noise.Responder, v validation, verr error) {
	c.mu.Lock()
	if c.pending[sid] != p || c.gone {
		c.mu.Unlock()
		resp.Destroy()
		return
	}
	delete(c.pending, sid)
	if v != valid {
		c.failLocked()
		c.mu.Unlock()
		c.e.log.Warn("harness not validated", "stream_id", sid, "err", verr)
		if v == executorUnauthorized {
			// Tell the harness it is our credential that was refused.
			msg, send, recv, err := resp.WriteMessage2([]byte(noise.RejectionMarker))
			if err == nil {
				send.Destroy()
				recv.Destroy()
				c.send(frame.Handshake(sid, msg))
				return
			}
		}
		resp.Destroy()
		c.reset(sid)
		return
	}
	if len(c.active) >= c.e.cfg.MaxStreams {
		// Validations finished while the streams filled up.
		c.mu.Unlock()
		resp.Destroy()
		c.reset(sid)
		return
	}
	msg, send, recv, err := resp.WriteMessage2(nil)
	if err != nil {
		c.failLocked()
		c.mu.Unlock()
		c.reset(sid)
		return
	}
	// Message 2 is queued before the channel exists: the channel's first
	// frame (the reliability advertisement) must not overtake it. The
	// lock is held throughout so that the harness's first data, which may
	// follow message 2 at once, finds the stream.
	if err := c.send(frame.Handshake(sid, msg)); err != nil {
		c.mu.Unlock()
		send.Destroy()
		recv.Destroy()
		// Message 2 could not go out: the socket is broken.
		c.e.log.Warn("writing handshake message 2 failed; dropping the socket", "stream_id", sid, "err", err)
		c.ws.CloseNow()
		return
	}
	st := &relayStream{sid: sid}
	st.owner.Store(c)
	st.ch = channel.New(sid, channel.SenderFunc(st.send), send, recv, channel.Options{
		Name: "exec-server relay stream " + sid,
		// Acknowledgements, retransmission and resume when the harness
		// advertises them too; a codex 0.169 harness never does, and the
		// stream then runs exactly as 0.169's.
		Reliable: !c.e.cfg.Plain,
		OnClose:  st.closed,
	})
	c.active[sid] = st
	c.mu.Unlock()
	c.e.log.Debug("stream established", "stream_id", sid)
	c.e.streams.Add(1)
	go func() {
		defer c.e.streams.Done()
		// When the channel ends, the session it served is detached,
		// resumable by a new stream.
		c.e.cfg.Server.ServeStream(c.root, st.ch)
		st.ch.Close()
	}()
}

// send carries the stream's frames on its current socket.
func (st *relayStream) send(ctx context.Context, f *frame.Frame) error {
	return st.owner.Load().enqueue(ctx, f)
}

// closed unregisters the stream and, unless the peer reset it or its
// socket is gone, resets it behind its queued data.
func (st *relayStream) closed(err error) {
	c := st.owner.Load()
	c.e.unkeep(st)
	c.mu.Lock()
	mine := c.active[st.sid] == st
	if mine {
		delete(c.active, st.sid)
	}
	c.mu.Unlock()
	if mine && !errors.Is(err, channel.ErrPeerReset) && !errors.Is(err, errSocketGone) && c.ctx.Err() == nil {
		c.resetAfterData(st.sid)
	}
}

func (c *conn) data(f *frame.Frame) {
	sid := f.StreamID
	c.mu.Lock()
	st, ok := c.active[sid]
	if !ok {
		if p, ok := c.pending[sid]; ok {
			p.cancel()
			delete(c.pending, sid)
			c.failLocked()
		}
		c.mu.Unlock()
		c.reset(sid)
		return
	}
	c.mu.Unlock()
	// Errors end the channel; its OnClose sends the Reset.
	_ = st.ch.Deliver(c.ctx, f)
}

func (c *conn) peerReset(sid string) {
	c.mu.Lock()
	st, ok := c.active[sid]
	if p, okp := c.pending[sid]; okp {
		p.cancel()
		delete(c.pending, sid)
	}
	c.mu.Unlock()
	if ok {
		st.ch.Fail(channel.ErrPeerReset)
	}
}

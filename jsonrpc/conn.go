package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Stream moves whole messages. Implementations frame them (a websocket
// message, a newline-terminated line, a relay segment); the Conn never sees
// framing.
type Stream interface {
	// Read returns the next message; the Conn owns the returned slice. A
	// *DecodeError (for example a line over the size limit) is answered with
	// an error and reading goes on; any other error ends the connection.
	Read(ctx context.Context) ([]byte, error)
	// Write sends one message. more reports that another message is queued
	// right behind it, so a buffered stream may delay its flush.
	Write(ctx context.Context, msg []byte, more bool) error
	// Close releases the stream. It may be called more than once.
	Close() error
	// Describe names the peer for error messages ("exec-server stdio").
	Describe() string
}

// Releaser is implemented by a Stream that accounts for the memory of the
// messages it returns (a server-wide budget): Release is called once per
// message returned by Read, when the message is no longer in use: when the
// Handler returned, or, for a message it handed on as Concurrent work,
// when that work returned; a response, when its Call has decoded it.
type Releaser interface {
	Release(msg []byte)
}

// Recycler is implemented by a Releaser whose messages are buffers of its
// own, which it may reuse: for a message the Handler marked Reusable,
// Recycle is called in place of Release.
type Recycler interface {
	Recycle(msg []byte)
}

// FramingNamer is implemented by a Stream whose framing the reference
// names in its parse errors: "failed to parse websocket JSON-RPC message
// from ..." (stdio's errors name none).
type FramingNamer interface {
	Framing() string
}

// Options configure a Conn.
type Options struct {
	// Concurrency bounds the Concurrent work running at once (the read
	// loop waits when it is reached). Default 64.
	Concurrency int
	// QueueLen bounds the outgoing queue in messages, and QueueBytes in
	// bytes (default 8 MiB). When either is reached, senders wait: that is
	// the back-pressure that keeps memory bounded. A frame larger than
	// QueueBytes is still sent, alone: it waits until nothing else is
	// queued.
	QueueLen   int
	QueueBytes int
	Limits     Limits
	Logger     *slog.Logger
	// DrainOnEOF, when positive, lets requests in flight finish (for at
	// most this long) after the peer ends its input with io.EOF, before
	// their context is cancelled. Right for stdio, where the client may
	// close stdin and still read the replies; wrong for a websocket,
	// whose end is both directions at once.
	DrainOnEOF time.Duration
	// EndOnDecodeError ends the connection when an incoming message
	// cannot be used (too large, malformed), instead of answering it with
	// an error and reading on. A client wants it: its peer's message is a
	// response some call waits for, which would otherwise wait forever.
	EndOnDecodeError bool
	// MapError turns a handler's error into its wire form (Reply). The
	// default is ToError: an *Error in the chain, else an internal error.
	MapError func(error) *Error
}

// Conn is one JSON-RPC connection, either end of it: a read loop that
// hands requests and notifications to a Handler and responses to the Calls
// waiting for them, a bounded outgoing queue drained by a single writer
// goroutine, and a bounded pool of handler goroutines. All of them end
// when Run returns.
type Conn struct {
	stream Stream
	opts   Options
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	// Outgoing frames. Whoever holds the write token (writing) is the
	// only writer of the stream: a sender that finds nothing queued and
	// nobody writing takes it and writes its own frame (no hand-off to
	// another goroutine, which costs a wake-up on every reply); otherwise
	// it queues the frame for the writer goroutine. held and heldBytes
	// count the frames queued or being written; they are bounded by
	// QueueLen+1 and QueueBytes: that is the back-pressure.
	wmu       sync.Mutex
	queue     [][]byte      // frames waiting, in order; non-empty only while writing
	spare     [][]byte      // the writer's last batch, reused
	writing   bool          // the write token is held
	flushing  bool          // Run is ending: the writer takes over the token
	kick      chan struct{} // the token was passed to the writer goroutine
	held      int           // frames queued or being written
	heldBytes int           // their bytes
	// Senders waiting for room, admitted strictly in order: a large
	// frame is not starved by smaller ones that would fit first.
	waiters  []*sendWaiter
	flush    chan struct{} // closed when the writer should drain and stop
	dead     chan struct{} // closed when nothing more can be written
	deadOnce sync.Once
	sem      chan struct{}
	handlers sync.WaitGroup

	// Calls made by this end, waiting for their responses.
	cmu     sync.Mutex
	lastID  int64                    // the last request id issued
	pending map[int64]chan *response // nil once the read loop has ended
	endErr  error                    // why the read loop ended
	closed  atomic.Bool              // Close was called
}

// NewConn wraps a stream. Run serves it; Call, Notify and Send may be used
// once Run is under way (or about to be).
func NewConn(stream Stream, opts Options) *Conn {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 64
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = 256
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = DefaultQueueBytes
	}
	if opts.Limits.MaxDepth == 0 {
		opts.Limits = DefaultLimits
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MapError == nil {
		opts.MapError = ToError
	}
	c := &Conn{
		stream: stream,
		opts:   opts,
		log:    opts.Logger,
		kick:   make(chan struct{}, 1),
		dead:   make(chan struct{}),
		flush:  make(chan struct{}),
		sem:    make(chan struct{}, opts.Concurrency),

		pending: make(map[int64]chan *response),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// Context is cancelled when the connection ends.
func (c *Conn) Context() context.Context { return c.ctx }

// Done is closed when the connection can no longer send.
func (c *Conn) Done() <-chan struct{} { return c.dead }

// Concurrency is the configured request concurrency.
func (c *Conn) Concurrency() int { return c.opts.Concurrency }

// Describe names the peer.
func (c *Conn) Describe() string { return c.stream.Describe() }

// ErrClosed is returned by Send, Notify and Call once the connection has
// ended (Call wraps it with the cause).
var ErrClosed = errors.New("jsonrpc: connection closed")

// Run reads messages until the stream ends or ctx is cancelled. Responses
// to this end's calls go to their callers; every other message goes to h,
// on the calling goroutine, in arrival order (see Handler). When the read
// loop ends, calls still waiting for a response fail with ErrClosed; Run
// returns after every handler's work has returned and queued messages
// have been written (for at most a second each). It returns nil when
// ended by ctx or Close, else the stream's error (io.EOF for a peer that
// closed).
func (c *Conn) Run(ctx context.Context, h Handler) error {
	// When ctx ends, the read loop notices in Read. It may instead be
	// writing a reply itself to a peer that does not read: after a second
	// the stream is closed under it, as waitOrAbort does for the others.
	var loopEnded atomic.Bool
	var abortMu sync.Mutex
	var abort *time.Timer
	ended := false
	stop := context.AfterFunc(ctx, func() {
		c.cancel()
		abortMu.Lock()
		defer abortMu.Unlock()
		if !ended {
			abort = time.AfterFunc(time.Second, func() {
				if !loopEnded.Load() {
					c.markDead()
					c.stream.Close()
				}
			})
		}
	})
	defer func() {
		stop()
		abortMu.Lock()
		ended = true
		if abort != nil {
			abort.Stop()
		}
		abortMu.Unlock()
	}()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()

	var err error
	for {
		var data []byte
		data, err = c.stream.Read(c.ctx)
		if err != nil {
			var de *DecodeError
			if errors.As(err, &de) && !c.opts.EndOnDecodeError {
				c.replyDecodeError(de)
				continue
			}
			break
		}
		rel, _ := c.stream.(Releaser)
		msg, derr := Decode(data, c.opts.Limits)
		if derr != nil {
			de, ok := derr.(*DecodeError)
			if !ok {
				de = &DecodeError{derr.Error()}
			}
			if rel != nil {
				rel.Release(data)
			}
			if c.opts.EndOnDecodeError {
				err = de
				break
			}
			c.replyDecodeError(de)
			continue
		}
		if msg.Kind == KindResponse && c.deliver(msg, data, rel) {
			continue
		}
		c.handle(h, msg, data, rel)
	}
	loopEnded.Store(true)
	// No response can come any more: fail the calls still waiting (a
	// handler may be one of them, and Run waits for handlers).
	c.failPending(err)
	// Cancel handlers, let them finish, then give the writer a moment to
	// flush what they queued before the stream is closed under it.
	// A handler or the writer may be stuck on a peer that stopped
	// reading; after a grace period the stream is closed under them.
	handlersDone := make(chan struct{})
	go func() { c.handlers.Wait(); close(handlersDone) }()
	if errors.Is(err, io.EOF) && c.opts.DrainOnEOF > 0 {
		t := time.NewTimer(c.opts.DrainOnEOF)
		select {
		case <-handlersDone:
		case <-t.C:
		case <-c.dead:
		}
		t.Stop()
	}
	c.cancel()
	c.waitOrAbort(handlersDone)
	close(c.flush)
	c.waitOrAbort(writerDone)
	c.stream.Close()
	if errors.Is(err, context.Canceled) || ctx.Err() != nil || c.closed.Load() {
		// Ended by the caller (ctx or Close): whatever the stream said
		// as it was closed under the read loop is not an error.
		err = nil
	}
	return err
}

func (c *Conn) waitOrAbort(done <-chan struct{}) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	c.markDead()
	c.stream.Close()
	<-done
}

func (c *Conn) replyDecodeError(de *DecodeError) {
	framing := ""
	if f, ok := c.stream.(FramingNamer); ok && f.Framing() != "" {
		framing = f.Framing() + " "
	}
	e := Errorf(CodeInvalidRequest, "failed to parse %sJSON-RPC message from %s: %s", framing, c.stream.Describe(), de.Detail)
	c.sendFrame(c.ctx, AppendError(GetBuffer(), NoID, e))
}

// Reply sends the result of a request, or its error when err is non-nil.
func (c *Conn) Reply(id json.RawMessage, result any, err error) {
	var frame []byte
	if err == nil {
		var encErr error
		frame, encErr = AppendResponse(GetBuffer(), id, result)
		if encErr != nil {
			err = encErr
		}
	}
	if err != nil {
		frame = AppendError(GetBuffer(), id, c.opts.MapError(err))
	}
	// A reply must not be lost to a cancelled handler context; it is
	// dropped only if the connection itself is gone.
	c.sendFrame(context.Background(), frame)
}

// ReplyError answers id with err.
func (c *Conn) ReplyError(id json.RawMessage, err *Error) {
	c.sendFrame(context.Background(), AppendError(GetBuffer(), id, err))
}

// Send queues an encoded message, waiting while the queue is full. It
// takes ownership of frame. When nothing is queued or being written, Send
// writes the frame itself and returns once the stream has taken it (a peer
// that does not read holds it up there, as a full queue would). A producer
// of output is then held while its chunk is written, and the next chunk it
// reads has grown meanwhile: fewer, larger messages than when every chunk
// is handed over at once. It returns
// ErrClosed when the connection has ended and ctx.Err() when ctx ends
// first.
func (c *Conn) Send(ctx context.Context, frame []byte) error {
	return c.sendFrame(ctx, frame)
}

// SendBatch sends frames as Send does, in order, telling the stream that
// more follows after each but the last: a stream that packs messages (a
// relay channel seals them into one record; stdio flushes once) then
// sends them together. It takes ownership of every frame; after an error
// the frames not yet sent are released.
func (c *Conn) SendBatch(ctx context.Context, frames ...[]byte) error {
	for i, f := range frames {
		if err := c.send(ctx, f, i < len(frames)-1); err != nil {
			for _, rest := range frames[i+1:] {
				PutBuffer(rest)
			}
			return err
		}
	}
	return nil
}

// Bounds on the frames a sender writes for others after its own (see
// sendFrame): small enough that a reply written from the read loop is not
// held up by a stream of output.
const (
	helpFrames = 16
	helpBytes  = 64 << 10
)

// DefaultQueueBytes bounds the bytes of a connection's outgoing queue
// when Options.QueueBytes is not set. A message bound alone is not enough:
// 256 messages may each be tens of megabytes.
const DefaultQueueBytes = 8 << 20

func (c *Conn) sendFrame(ctx context.Context, frame []byte) error {
	return c.send(ctx, frame, false)
}

// send is sendFrame with the stream's more hint for a frame it writes
// itself; only SendBatch sets it, and only when its next frame follows at
// once (a queued frame is written in a batch that ends with a flush).
func (c *Conn) send(ctx context.Context, frame []byte, more bool) error {
	select {
	case <-c.dead:
		return ErrClosed
	default:
	}
	c.wmu.Lock()
	if len(c.waiters) == 0 && c.fits(len(frame)) {
		c.held++
		c.heldBytes += len(frame)
	} else {
		w := &sendWaiter{n: len(frame), ready: make(chan struct{})}
		c.waiters = append(c.waiters, w)
		c.wmu.Unlock()
		var err error
		select {
		case <-w.ready:
		case <-c.dead:
			err = ErrClosed
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil && c.abandon(w) {
			PutBuffer(frame)
			return err
		}
		c.wmu.Lock() // admitted: held counts the frame
	}
	if c.writing {
		c.queue = append(c.queue, frame)
		c.wmu.Unlock()
		return nil
	}
	c.writing = true
	c.wmu.Unlock()

	ok := c.write(frame, more)
	// Frames queued while we wrote: write them too when they are few
	// and small (waking the writer goroutine for them would cost more
	// than writing them), else pass the token to the writer.
	helped := false
	for ok {
		c.wmu.Lock()
		if len(c.queue) == 0 && !c.flushing {
			c.writing = false
			c.wmu.Unlock()
			return nil
		}
		if helped || c.flushing || !small(c.queue) {
			c.wmu.Unlock()
			c.kickWriter()
			return nil
		}
		batch := c.queue
		c.queue = nil
		c.wmu.Unlock()
		helped = true
		ok = c.writeBatch(batch)
	}
	return ErrClosed
}

// small reports whether a sender may write the queued frames for the
// writer goroutine.
func small(queue [][]byte) bool {
	if len(queue) > helpFrames {
		return false
	}
	n := 0
	for _, f := range queue {
		n += len(f)
	}
	return n <= helpBytes
}

// kickWriter passes the write token to the writer goroutine.
func (c *Conn) kickWriter() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Conn) markDead() {
	c.deadOnce.Do(func() {
		close(c.dead)
		c.cancel()
	})
}

// writeLoop is the writer goroutine: it writes the queued frames whenever
// a sender passes it the write token. Senders may race with shutdown, so
// nothing is ever closed under them: flush tells the loop to take the
// token, write what is queued and stop, and dead releases every sender
// still waiting for room.
func (c *Conn) writeLoop() {
	defer c.markDead()
	for {
		select {
		case <-c.kick:
			if !c.drain() {
				return
			}
		case <-c.dead:
			return
		case <-c.flush:
			c.wmu.Lock()
			c.flushing = true
			held := c.writing
			c.writing = true
			c.wmu.Unlock()
			if held {
				// A sender is writing; it passes the token on
				// when done, as flushing is set. A pending kick
				// means the token is already ours.
				select {
				case <-c.kick:
				case <-c.dead:
					return
				}
			}
			c.drain()
			return
		}
	}
}

// drain writes queued frames, a batch at a time, until none is left, then
// gives the write token back. It reports false after a write error.
func (c *Conn) drain() bool {
	for {
		c.wmu.Lock()
		batch := c.queue
		if len(batch) == 0 {
			c.writing = false
			c.wmu.Unlock()
			return true
		}
		c.queue = c.spare[:0]
		c.spare = nil
		c.wmu.Unlock()
		if !c.writeBatch(batch) {
			return false
		}
		c.wmu.Lock()
		c.spare = batch[:0]
		c.wmu.Unlock()
	}
}

// writeBatch writes frames in order; the stream may flush once, after the
// last. It reports false after a write error.
func (c *Conn) writeBatch(batch [][]byte) bool {
	for i, frame := range batch {
		batch[i] = nil
		ok := c.write(frame, i < len(batch)-1)
		if !ok {
			return false
		}
	}
	return true
}

// sendWaiter is a sender waiting for room in the queue.
type sendWaiter struct {
	n     int           // the frame's bytes
	ready chan struct{} // closed when admitted
}

// fits reports whether a frame of n bytes may be queued now. One frame is
// always admitted when nothing is held, however large. Called with wmu.
func (c *Conn) fits(n int) bool {
	return c.held == 0 || (c.held <= c.opts.QueueLen && c.heldBytes+n <= c.opts.QueueBytes)
}

// admitLocked admits waiting senders, first come first served, while the
// first one fits. Called with wmu.
func (c *Conn) admitLocked() {
	for len(c.waiters) > 0 && c.fits(c.waiters[0].n) {
		w := c.waiters[0]
		c.waiters[0] = nil
		c.waiters = c.waiters[1:]
		c.held++
		c.heldBytes += w.n
		close(w.ready)
	}
}

// abandon withdraws a waiter whose sender gives up. It reports false when
// the waiter was admitted meanwhile and the connection is still alive:
// the sender then goes on as admitted.
func (c *Conn) abandon(w *sendWaiter) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-w.ready:
		select {
		case <-c.dead:
			return true
		default:
			return false
		}
	default:
	}
	for i, o := range c.waiters {
		if o == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			break
		}
	}
	c.admitLocked() // the next one may fit now
	return true
}

// QueuedBytes reports the bytes of the frames queued or being written.
func (c *Conn) QueuedBytes() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.heldBytes
}

// write writes one frame and frees its place in the queue.
func (c *Conn) write(frame []byte, more bool) bool {
	err := c.stream.Write(context.Background(), frame, more)
	largeDone(len(frame))
	c.wmu.Lock()
	c.held--
	c.heldBytes -= len(frame)
	c.admitLocked()
	c.wmu.Unlock()
	PutBuffer(frame)
	if err != nil {
		c.log.Debug("write failed; closing connection", "peer", c.stream.Describe(), "err", err)
		c.markDead()
		c.stream.Close()
		return false
	}
	return true
}

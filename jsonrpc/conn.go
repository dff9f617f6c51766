package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/execgo/exec-server/protocol"
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
// message returned by Read, when the message is no longer in use: after
// dispatch returned, or, for a message handed to Go, after that handler
// returned.
type Releaser interface {
	Release(msg []byte)
}

// FramingNamer is implemented by a Stream whose framing the reference
// names in its parse errors: "failed to parse websocket JSON-RPC message
// from ..." (stdio's errors name none).
type FramingNamer interface {
	Framing() string
}

// Options configure a Conn.
type Options struct {
	// Concurrency bounds the requests handled at once (the read loop waits
	// when it is reached). 1 means strict arrival order.
	Concurrency int
	// QueueLen bounds the outgoing queue in messages. When it is full,
	// senders wait: that is the back-pressure that keeps memory bounded.
	QueueLen int
	Limits   Limits
	Logger   *slog.Logger
	// DrainOnEOF, when positive, lets requests in flight finish (for at
	// most this long) after the peer ends its input with io.EOF, before
	// their context is cancelled. Right for stdio, where the client may
	// close stdin and still read the replies; wrong for a websocket,
	// whose end is both directions at once.
	DrainOnEOF time.Duration
}

// Conn is one JSON-RPC connection: a read loop, a bounded outgoing queue
// drained by a single writer goroutine, and a bounded pool of handler
// goroutines. All of them end when Run returns.
type Conn struct {
	stream Stream
	opts   Options
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	out      chan []byte
	flush    chan struct{} // closed when the writer should drain and stop
	dead     chan struct{} // closed when nothing more can be written
	deadOnce sync.Once
	sem      chan struct{}
	handlers sync.WaitGroup

	// releasing is the message being dispatched when the stream is a
	// Releaser; Go takes it over. Only the read loop touches it.
	releasing []byte
}

// NewConn wraps a stream. Call Run to serve it.
func NewConn(stream Stream, opts Options) *Conn {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 64
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = 256
	}
	if opts.Limits.MaxDepth == 0 {
		opts.Limits = DefaultLimits
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Conn{
		stream: stream,
		opts:   opts,
		log:    opts.Logger,
		out:    make(chan []byte, opts.QueueLen),
		dead:   make(chan struct{}),
		flush:  make(chan struct{}),
		sem:    make(chan struct{}, opts.Concurrency),
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

// ErrClosed is returned by Send once the connection has ended.
var ErrClosed = errors.New("jsonrpc: connection closed")

// Run reads messages and passes each to dispatch, in arrival order, on the
// calling goroutine. It returns when the stream ends or ctx is cancelled,
// after every handler started with Go has returned and queued replies have
// been written (for at most a second).
func (c *Conn) Run(ctx context.Context, dispatch func(*Message)) error {
	stop := context.AfterFunc(ctx, c.cancel)
	defer stop()
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
			if errors.As(err, &de) {
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
			c.replyDecodeError(de)
			continue
		}
		if rel == nil {
			dispatch(msg)
			continue
		}
		c.releasing = data
		dispatch(msg)
		if c.releasing != nil {
			// Not handed to a handler: handled inline, or dropped.
			c.releasing = nil
			rel.Release(data)
		}
	}
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
	if errors.Is(err, context.Canceled) {
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
	e := protocol.InvalidRequest("failed to parse %sJSON-RPC message from %s: %s", framing, c.stream.Describe(), de.Detail)
	c.sendFrame(c.ctx, AppendError(GetBuffer(), NoID, e))
}

// Go runs f on a handler goroutine. When Concurrency handlers are already
// running it waits, so the number of requests in flight stays bounded.
// The message being dispatched stays in use until f returns.
func (c *Conn) Go(f func()) {
	select {
	case c.sem <- struct{}{}:
	case <-c.ctx.Done():
		return
	}
	msg := c.releasing
	c.releasing = nil
	c.handlers.Add(1)
	go func() {
		defer func() {
			if msg != nil {
				c.stream.(Releaser).Release(msg)
			}
			<-c.sem
			c.handlers.Done()
		}()
		f()
	}()
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
		frame = AppendError(GetBuffer(), id, protocol.ToError(err))
	}
	// A reply must not be lost to a cancelled handler context; it is
	// dropped only if the connection itself is gone.
	c.sendFrame(context.Background(), frame)
}

// ReplyError answers id with err.
func (c *Conn) ReplyError(id json.RawMessage, err *protocol.Error) {
	c.sendFrame(context.Background(), AppendError(GetBuffer(), id, err))
}

// Send queues an encoded message, waiting while the queue is full. It
// takes ownership of frame. It returns ErrClosed when the connection has
// ended and ctx.Err() when ctx ends first.
func (c *Conn) Send(ctx context.Context, frame []byte) error {
	return c.sendFrame(ctx, frame)
}

func (c *Conn) sendFrame(ctx context.Context, frame []byte) error {
	select {
	case <-c.dead:
		return ErrClosed
	default:
	}
	select {
	case c.out <- frame:
		return nil
	case <-c.dead:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Conn) markDead() {
	c.deadOnce.Do(func() {
		close(c.dead)
		c.cancel()
	})
}

// writeLoop is the only writer of the stream. The out channel is never
// closed (senders on other goroutines may race with shutdown); instead flush
// tells the loop to write what is queued and stop, and dead releases every
// sender still waiting.
func (c *Conn) writeLoop() {
	defer c.markDead()
	for {
		select {
		case frame := <-c.out:
			if !c.write(frame) {
				return
			}
		case <-c.dead:
			return
		case <-c.flush:
			for {
				select {
				case frame := <-c.out:
					if !c.write(frame) {
						return
					}
				default:
					return
				}
			}
		}
	}
}

func (c *Conn) write(frame []byte) bool {
	err := c.stream.Write(context.Background(), frame, len(c.out) > 0)
	PutBuffer(frame)
	if err != nil {
		c.log.Debug("write failed; closing connection", "peer", c.stream.Describe(), "err", err)
		c.markDead()
		c.stream.Close()
		return false
	}
	return true
}

// Package channel is the secure channel of one relay stream in codex's
// remote mode, once its Noise handshake is done: JSON-RPC messages,
// each a 4-byte big-endian length and compact JSON, are cut into records
// of at most 60 KiB of plaintext, each record sealed with the stream's
// CipherState and sent as one data frame with the next seq. Inbound data
// frames go through the reorder window of codex 0.169 (gaps up to 64
// records and 1 MiB, duplicates dropped), are opened in seq order and cut
// back into messages.
//
// A Channel is a jsonrpc.Stream: the executor serves a JSON-RPC connection
// over it, the harness runs the client over it. Below it sits a Sender,
// which carries this stream's frames to the relay; the owner of the relay
// socket feeds the stream's inbound frames to Deliver.
//
// With Options.Reliable, and a peer that does the same, the stream also
// acknowledges and resends records, and survives the loss of its relay
// socket (Rebind); see reliable.go. A codex 0.169 peer never turns it on.
package channel

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
)

// Limits of codex 0.169.
const (
	MaxRecordPlaintext = 61440    // plaintext bytes per record
	MaxMessage         = 64 << 20 // one JSON-RPC message, without its length prefix
	DefaultQueueLen    = 128      // inbound messages waiting for Read
)

// Sender carries one stream's frames toward the peer (one websocket
// message each). The channel calls Send from one goroutine at a time, in
// seq order; Send must return promptly once ctx is done, and must not keep
// f after it returns.
type Sender interface {
	Send(ctx context.Context, f *frame.Frame) error
}

// SenderFunc adapts a function to Sender.
type SenderFunc func(ctx context.Context, f *frame.Frame) error

// Send calls s.
func (s SenderFunc) Send(ctx context.Context, f *frame.Frame) error { return s(ctx, f) }

// Options configure a Channel.
type Options struct {
	// Name is what Describe returns ("exec-server relay stream ID" if
	// empty).
	Name string
	// QueueLen bounds the inbound messages waiting for Read (default
	// 128).
	QueueLen int
	// WaitWhenFull makes Deliver wait for room in the inbound queue
	// (back-pressure on a socket of its own, the harness's case). Without
	// it a full queue ends the stream, as on the executor, whose socket
	// is shared by every stream and must not stall.
	WaitWhenFull bool
	// SkipJSONCheck delivers messages without checking that they are
	// JSON. codex 0.169 resets a stream over invalid JSON (the executor
	// does so here by default); a reader that parses every message anyway
	// (the SDK client) may skip the check, which costs about a third of
	// the channel's CPU on bulk output.
	SkipJSONCheck bool
	// Reliable turns on acknowledgements and retransmission when the
	// peer supports them too (see AdvertiseMagic); with a codex 0.169
	// peer the stream runs as 0.169's.
	Reliable bool
	// OnClose, if set, runs once when the channel ends (Close, Fail, or an
	// error from Deliver), with the reason (nil for Close). The owner
	// unregisters the stream there and, on the executor, sends Reset.
	OnClose func(err error)
}

// Errors. Deliver's errors other than ErrPeerReset call for a Reset to the
// peer.
var (
	ErrPeerReset  = errors.New("relay stream reset by peer")
	ErrClosed     = errors.New("relay stream closed")
	ErrQueueFull  = errors.New("relay stream inbound queue full")
	ErrBadRecord  = errors.New("relay stream: bad record")
	ErrBadMessage = errors.New("relay stream: bad message framing")
)

// Channel is one established relay stream. Read, Write, Close and
// Describe make it a jsonrpc.Stream; Deliver and Fail are for the owner
// of the relay socket.
type Channel struct {
	streamID string
	name     string
	sender   Sender
	opts     Options

	ctx    context.Context // cancelled when the channel ends
	cancel context.CancelFunc

	// Outbound: wmu serialises Write (encrypt and send in seq order);
	// smu serialises Sender.Send (data, acks, retransmissions).
	smu  sync.Mutex
	rel  *reliable // nil unless Options.Reliable
	wmu  sync.Mutex
	send *noise.CipherState
	out  []byte // plaintext of the record being filled
	seq  sequencer
	werr error

	// Inbound: rmu guards the window, the cipher and reassembly.
	rmu  sync.Mutex
	recv *noise.CipherState
	buf  []byte // reassembly: plaintext not yet cut into messages
	msgs chan []byte

	endOnce sync.Once
	done    chan struct{}
	endErr  error // set before done is closed
}

// New makes the channel of an established stream: send and recv are the
// handshake's CipherStates for this side. The channel owns them and
// destroys them when it ends.
func New(streamID string, sender Sender, send, recv *noise.CipherState, opts Options) *Channel {
	if opts.QueueLen <= 0 {
		opts.QueueLen = DefaultQueueLen
	}
	name := opts.Name
	if name == "" {
		name = "exec-server relay stream " + streamID
	}
	c := &Channel{
		streamID: streamID,
		name:     name,
		sender:   sender,
		opts:     opts,
		send:     send,
		recv:     recv,
		seq:      newPlainSequencer(),
		msgs:     make(chan []byte, opts.QueueLen),
		done:     make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if opts.Reliable {
		c.rel = newReliable(c)
		go c.rel.advertise()
	}
	return c
}

// sendFrame sends one frame, stamping the ack fields when reliable (the
// current receive state); fatal send errors end the channel when fail.
func (c *Channel) sendFrame(ctx context.Context, f *frame.Frame, fail bool) error {
	c.smu.Lock()
	if c.rel != nil && (f.Kind == frame.KindData || f.Kind == frame.KindAck || f.Kind == frame.KindResume) && c.rel.stamps() {
		c.rmu.Lock()
		next, bits := c.seq.ackState()
		c.rmu.Unlock()
		stamp(f, next, bits)
		c.rel.stamped()
	}
	err := c.sender.Send(ctx, f)
	c.smu.Unlock()
	// Outside smu: ending takes wmu, whose holder may be waiting for smu.
	// With a reliable peer a lost socket is the owner's to judge: it may
	// Rebind, and kept records go out again.
	if err != nil && fail && c.ctx.Err() == nil && !c.Resumable() {
		c.Fail(err)
	}
	return err
}

// Resumable reports whether the stream may survive the loss of its relay
// socket: both ends run the reliability extension, so every record not
// yet acknowledged is kept and can be sent again on a new socket.
func (c *Channel) Resumable() bool {
	return c.rel != nil && c.rel.stamps() && c.rel.keeps()
}

// Rebind moves a resumable stream to a new relay socket: later frames go
// to s, a resume frame tells the peer where our receiving stands, and
// every kept record the peer's answer (an ack) shows it lacks is sent
// again (after rto if no answer comes; see reliable.rebound).
func (c *Channel) Rebind(ctx context.Context, s Sender) error {
	if !c.Resumable() {
		return errors.New("relay stream: not resumable")
	}
	c.smu.Lock()
	c.sender = s
	c.smu.Unlock()
	c.rmu.Lock()
	next, _ := c.seq.ackState()
	c.rmu.Unlock()
	c.rel.rebound()
	return c.sendFrame(ctx, frame.Resume(c.streamID, next), false)
}

// Retransmitted counts the records sent again (after a timeout or on
// resume); 0 without the reliability extension.
func (c *Channel) Retransmitted() uint64 {
	if c.rel == nil {
		return 0
	}
	return c.rel.resent.Load()
}

// StreamID is the relay stream id.
func (c *Channel) StreamID() string { return c.streamID }

// Describe names the stream for error messages.
func (c *Channel) Describe() string { return c.name }

// Done is closed when the channel has ended.
func (c *Channel) Done() <-chan struct{} { return c.done }

// Err is why the channel ended (nil while it runs, ErrClosed after Close).
func (c *Channel) Err() error {
	select {
	case <-c.done:
		return c.endErr
	default:
		return nil
	}
}

// Write sends one JSON-RPC message (compact JSON). With more set, the tail
// of the message may wait in the current record for the next message;
// otherwise everything written so far is sent.
func (c *Channel) Write(ctx context.Context, msg []byte, more bool) error {
	if len(msg) == 0 || len(msg) > MaxMessage {
		return fmt.Errorf("relay stream: message of %d bytes", len(msg))
	}
	ctx, stop := c.bind(ctx)
	defer stop()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(msg)))
	if err := c.fill(ctx, hdr[:]); err != nil {
		return err
	}
	if err := c.fill(ctx, msg); err != nil {
		return err
	}
	if !more && len(c.out) > 0 {
		return c.flush(ctx)
	}
	return nil
}

// bind makes ctx end when the channel does, so Close interrupts a Write
// blocked in Send.
func (c *Channel) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

func (c *Channel) fill(ctx context.Context, p []byte) error {
	for len(p) > 0 {
		if c.out == nil {
			c.out = make([]byte, 0, MaxRecordPlaintext)
		}
		n := min(len(p), MaxRecordPlaintext-len(c.out))
		c.out = append(c.out, p[:n]...)
		p = p[n:]
		if len(c.out) == MaxRecordPlaintext {
			if err := c.flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush seals the pending plaintext as one record and sends it. Any
// failure ends writing for good: a record that was sealed but maybe not
// sent has used its nonce, and re-sealing is never allowed.
func (c *Channel) flush(ctx context.Context) error {
	if c.rel != nil {
		if err := c.rel.waitRoom(ctx, len(c.out)+noise.Overhead); err != nil {
			return c.writeFailed(err)
		}
	}
	f := &frame.Frame{Version: frame.Version, StreamID: c.streamID, Kind: frame.KindData, SegmentCount: 1}
	if err := c.seq.outbound(f); err != nil {
		return c.writeFailed(err)
	}
	ct, err := c.send.Encrypt(getRecord(len(c.out)+noise.Overhead), c.out)
	if err != nil {
		return c.writeFailed(err)
	}
	c.out = c.out[:0]
	f.Payload = ct
	var kept *sentRecord
	if c.rel != nil {
		// Kept before it is sent: an ack may come back at once.
		kept = c.rel.sent(f)
	}
	err = c.sendFrame(ctx, f, false)
	if kept != nil {
		c.rel.sendDone(kept)
	} else {
		putRecord(ct)
	}
	if err != nil && !c.Resumable() {
		return c.writeFailed(err)
	}
	if c.rel != nil && f.Seq < maxAdvertise {
		c.rel.advertise()
	}
	return nil
}

// Sealed records of more than half the maximum are built in pooled
// buffers of the maximum size and recycled once sent (or, when kept for
// retransmission, once acknowledged and no send of them is under way):
// two 60 KiB allocations per record, this one and the Sender's frame,
// were most of the sender's garbage on bulk output. Smaller records are
// allocated to size, so that a window of small records does not pin 60
// KiB each.
const pooledRecord = MaxRecordPlaintext / 2

var recordPool = sync.Pool{New: func() any {
	b := make([]byte, 0, MaxRecordPlaintext+noise.Overhead)
	return &b
}}

func getRecord(size int) []byte {
	if size < pooledRecord {
		return make([]byte, 0, size)
	}
	return (*recordPool.Get().(*[]byte))[:0]
}

func putRecord(b []byte) {
	if cap(b) == MaxRecordPlaintext+noise.Overhead {
		b = b[:0]
		recordPool.Put(&b)
	}
}

func (c *Channel) writeFailed(err error) error {
	if e := c.Err(); e != nil {
		err = e
	}
	c.werr = err
	return err
}

// Read returns the next inbound message. Messages delivered before the
// channel ended are still returned; then the reason it ended: io.EOF
// after Close, otherwise the error given to Fail or found by Deliver.
func (c *Channel) Read(ctx context.Context) ([]byte, error) {
	select {
	case m := <-c.msgs:
		return m, nil
	default:
	}
	select {
	case m := <-c.msgs:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		select {
		case m := <-c.msgs:
			return m, nil
		default:
		}
		if errors.Is(c.endErr, ErrClosed) {
			return nil, io.EOF
		}
		return nil, c.endErr
	}
}

// Deliver takes one inbound frame of this stream, already checked with
// frame.Validate, and takes ownership of its payload. Data is ordered,
// decrypted and cut into messages; Reset ends the channel (ErrPeerReset);
// ack, resume and heartbeat frames are ignored, as codex 0.169 does, and
// so are handshake frames (the owner deals with those before). Any other
// error has ended the channel: the owner sends Reset. Deliver is called
// from one goroutine at a time.
func (c *Channel) Deliver(ctx context.Context, f *frame.Frame) error {
	if c.rel != nil {
		c.rel.inbound(f)
		switch f.Kind {
		case frame.KindData:
			c.rel.dataArrived(len(f.Payload))
		case frame.KindResume:
			// The peer is on a new socket (or reports where it stands):
			// send again what it has not got, and tell it ours.
			if c.Resumable() {
				c.rel.resend(f.NextSeq)
				c.rel.forceAck()
			}
		}
	}
	switch f.Kind {
	case frame.KindReset:
		c.Fail(ErrPeerReset)
		return ErrPeerReset
	case frame.KindData:
	default:
		return c.Err()
	}
	msgs, err := c.receive(f.Seq, f.Payload)
	if err != nil {
		c.Fail(err)
		return err
	}
	for _, m := range msgs {
		if err := c.enqueue(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (c *Channel) enqueue(ctx context.Context, m []byte) error {
	select {
	case c.msgs <- m:
		return nil
	case <-c.done:
		return c.endErr
	default:
	}
	if !c.opts.WaitWhenFull {
		c.Fail(ErrQueueFull)
		return ErrQueueFull
	}
	select {
	case c.msgs <- m:
		return nil
	case <-c.done:
		return c.endErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Channel) receive(seq uint32, payload []byte) ([][]byte, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.recv == nil {
		return nil, c.endErr
	}
	if len(payload) > MaxRecordPlaintext+noise.Overhead {
		return nil, fmt.Errorf("%w: record of %d bytes", ErrBadRecord, len(payload))
	}
	ready, err := c.seq.inbound(seq, payload)
	if err != nil {
		return nil, err
	}
	var msgs [][]byte
	for _, ct := range ready {
		var err error
		// Grow by doubling: GCM's Open would grow by exactly one
		// record, making a large message's reassembly quadratic.
		c.buf = slices.Grow(c.buf, len(ct))
		c.buf, err = c.recv.Decrypt(c.buf, ct)
		if err != nil {
			return nil, err
		}
		if msgs, err = c.cut(msgs); err != nil {
			return nil, err
		}
		// A message still arriving: its length is known, so make room
		// for all of it now (cut has checked it against MaxMessage), one
		// allocation instead of doubling up to it.
		if len(c.buf) >= 4 {
			if want := 4 + int(binary.BigEndian.Uint32(c.buf)); want > cap(c.buf) {
				c.buf = slices.Grow(c.buf, want-len(c.buf))
			}
		}
	}
	return msgs, nil
}

// cut takes the complete messages off the front of the reassembly buffer.
func (c *Channel) cut(msgs [][]byte) ([][]byte, error) {
	b := c.buf
	for len(b) >= 4 {
		n := binary.BigEndian.Uint32(b)
		if n == 0 || n > MaxMessage {
			return nil, fmt.Errorf("%w: length prefix %d", ErrBadMessage, n)
		}
		if uint64(len(b)-4) < uint64(n) {
			break
		}
		m := b[4 : 4+n]
		if !c.opts.SkipJSONCheck && !json.Valid(m) {
			return nil, fmt.Errorf("%w: message is not JSON", ErrBadMessage)
		}
		if len(b) == len(c.buf) && len(m) == len(b)-4 && len(m) > MaxRecordPlaintext {
			// A large message alone in the buffer: hand the buffer
			// over rather than copy it.
			c.buf = nil
			return append(msgs, m), nil
		}
		msgs = append(msgs, append([]byte(nil), m...))
		b = b[4+n:]
	}
	switch {
	case len(b) == len(c.buf):
		// Nothing taken: a message is still arriving.
	case len(b) == 0 && cap(c.buf) > 4*MaxRecordPlaintext:
		c.buf = nil // drop a large spent buffer
	default:
		c.buf = c.buf[:copy(c.buf, b)] // keep the partial tail at the front
	}
	return msgs, nil
}

// Fail ends the channel with err (the relay socket died, the peer reset
// the stream): Read returns err once the queued messages are read, Write
// fails. The first reason wins.
func (c *Channel) Fail(err error) {
	c.end(err)
}

// Close ends the channel (jsonrpc.Stream). It does not tell the peer: the
// owner's OnClose decides (the executor sends Reset, the harness drops its
// socket).
func (c *Channel) Close() error {
	c.end(ErrClosed)
	return nil
}

func (c *Channel) end(err error) {
	first := false
	c.endOnce.Do(func() {
		first = true
		c.endErr = err
		close(c.done)
		c.cancel()
		if c.rel != nil {
			c.rel.stop()
		}
		// Write and Deliver see the end through c.ctx and c.done; take
		// their locks to clear the keys once they are out.
		c.rmu.Lock()
		c.recv.Destroy()
		c.recv = nil
		clear(c.buf)
		c.buf = nil
		c.rmu.Unlock()
		c.wmu.Lock()
		c.send.Destroy()
		clear(c.out)
		if c.werr == nil {
			c.werr = err
		}
		c.wmu.Unlock()
	})
	// Outside the Once, so that OnClose may close the socket whose read
	// loop calls Fail, or call Close itself.
	if first && c.opts.OnClose != nil {
		if errors.Is(err, ErrClosed) {
			err = nil
		}
		c.opts.OnClose(err)
	}
}

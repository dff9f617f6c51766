package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// RejectionHeader carries the reason of a refused upgrade (docs/remote.md).
const RejectionHeader = "x-codex-rendezvous-rejection-reason"

const writeTimeout = 30 * time.Second

// leg is one accepted rendezvous websocket. Frames go out through a bounded
// queue drained by one writer goroutine, so a reader blocks on another
// socket's network write only when that socket was idle: then the reader
// writes the frame itself (see Send).
type leg struct {
	s        *Server
	role     string
	env      string
	reg      string // registration it dialled for
	conn     *websocket.Conn
	cc       *corkConn     // conn's socket (nil: not hijacked through corkWriter)
	out      chan outFrame // made with the writer (startWriter)
	queued   atomic.Int64  // bytes in out
	wmu      sync.Mutex    // held while writing the socket
	unsent   atomic.Int64  // frames in out or being written by the writer
	space    chan struct{} // a token when the writer took a frame
	closing  chan struct{}
	done     chan struct{}
	closeMu  sync.Once
	doneOnce sync.Once
	reason   string
	rbuf     *readBuf // the frame read last, reader goroutine only (nil between frames)
	ctx      context.Context
	cancel   context.CancelFunc
	// ioctx never ends: reads and writes pass it, since a context that
	// can end costs coder/websocket an AfterFunc registration per
	// message (and a deadline context two allocations more). cut closes
	// the socket, which ends them; the write watchdog bounds writes.
	ioctx     context.Context
	wdeadline atomic.Int64 // unix ns by which the write in progress must end; 0: none
	wdog      *time.Timer  // fires watchdog
	wslow     atomic.Bool  // the watchdog cut the socket

	writerOnce sync.Once
	writerDone chan struct{} // closed when the writer has ended

	// held: the leg this leg's reader goroutine holds corked (its wmu
	// taken), gathering the frames it reads toward it for one write
	// (sendFrom); nil: none. reading: the reader goroutine is in read,
	// where only its own socket reads release held (releaseHeld).
	held    atomic.Pointer[leg]
	reading atomic.Bool

	pingMu   sync.Mutex
	pingT    *time.Timer    // starts the next ping
	pingStop bool           // the socket is gone: arm no more
	pings    sync.WaitGroup // the ping in progress
}

type outFrame struct {
	b    []byte
	at   time.Time // not before
	text bool
}

func (s *Server) newLeg(role, env string, c *websocket.Conn, cc *corkConn) *leg {
	ctx, cancel := context.WithCancel(context.Background())
	l := &leg{
		s: s, role: role, env: env, conn: c, cc: cc,
		space:   make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		ctx:     ctx, cancel: cancel,
		writerDone: make(chan struct{}),
		ioctx:      context.WithoutCancel(ctx),
	}
	l.wdog = time.AfterFunc(time.Hour, l.watchdog)
	l.wdog.Stop()
	if cc != nil {
		cc.beforeRead = func() {
			if l.reading.Load() {
				l.releaseHeld()
			}
		}
	}
	return l
}

// sendFrom is Send of a frame read by src's reader goroutine (b is its
// read buffer, borrowed). Frames a reader takes from one socket read
// usually go to one socket: the first finding it idle corks it and keeps
// it (src.held, l.wmu taken), the next ones gather behind it, and the
// whole goes in one write before src's reader next reads its socket
// (corkConn.beforeRead), or before it sends anywhere else. Held, l's
// other senders queue (their frames go after these, each source's order
// kept), for no longer than src's reader takes to route what one read
// brought.
func (l *leg) sendFrom(src *leg, b []byte) bool {
	if src.held.Load() != l {
		src.releaseHeld()
		if src.cc == nil || l.cc == nil || !l.lockIfIdle() {
			return l.Send(b)
		}
		l.cc.cork()
		src.held.Store(l)
	}
	if l.ending() {
		src.releaseHeld()
		return false
	}
	l.arm(l.writeLimit())
	err := l.conn.Write(l.ioctx, websocket.MessageBinary, b)
	l.disarm()
	if err != nil {
		src.releaseHeld()
		l.writeFailed()
		return false
	}
	return true
}

// releaseHeld writes what l's reader gathered toward another socket and
// lets that socket go.
func (l *leg) releaseHeld() {
	h := l.held.Swap(nil)
	if h == nil {
		return
	}
	h.arm(h.writeLimit())
	err := h.cc.uncork()
	h.disarm()
	h.wmu.Unlock()
	if err != nil {
		h.writeFailed()
	}
}

// write writes one message, cutting the socket if the write has not
// ended within timeout. The caller holds l.wmu (one write at a time).
func (l *leg) write(typ websocket.MessageType, b []byte, timeout time.Duration) error {
	l.arm(timeout)
	err := l.conn.Write(l.ioctx, typ, b)
	l.disarm()
	return err
}

func (l *leg) arm(timeout time.Duration) {
	l.wdeadline.Store(time.Now().Add(timeout).UnixNano())
	l.wdog.Reset(timeout)
}

func (l *leg) disarm() {
	l.wdeadline.Store(0)
	l.wdog.Stop()
}

// corkFrames bounds the frames one corked write gathers (corkMax bounds
// their bytes).
const corkFrames = 64

// writeFrames writes fs in order, in one syscall when the socket was
// hijacked through corkWriter (a single frame is written as write does),
// cutting the socket if the whole has not gone within timeout. The caller
// holds l.wmu.
func (l *leg) writeFrames(fs []outFrame, timeout time.Duration) error {
	if len(fs) == 1 || l.cc == nil {
		for _, f := range fs {
			if err := l.write(f.typ(), f.b, timeout); err != nil {
				return err
			}
		}
		return nil
	}
	// Each write is bounded on its own, as a lone frame's is: a batch
	// reaches the socket in pieces of at most corkMax and a frame, and a
	// harness that reads slowly but steadily must not be cut for taking
	// longer than one write's limit over the whole batch.
	defer l.disarm()
	l.cc.cork()
	for _, f := range fs {
		l.arm(timeout)
		if err := l.conn.Write(l.ioctx, f.typ(), f.b); err != nil {
			l.cc.uncork()
			return err
		}
	}
	l.arm(timeout)
	return l.cc.uncork()
}

func (f outFrame) typ() websocket.MessageType {
	if f.text {
		return websocket.MessageText
	}
	return websocket.MessageBinary
}

// watchdog cuts a socket whose write outlived its deadline. The decision
// rests on the deadline, not on the timer: a late firing for an earlier
// write finds none (or a later one, and waits for it).
func (l *leg) watchdog() {
	d := l.wdeadline.Load()
	if d == 0 {
		return
	}
	if wait := time.Duration(d - time.Now().UnixNano()); wait > 0 {
		l.wdog.Reset(wait)
		return
	}
	l.wslow.Store(true)
	l.cut()
}

// Send queues a frame. An executor leg applies back-pressure (the sender
// waits: harness sockets are independent and TCP slows the harness); a
// harness leg that stays full for SlowHarness is cut, so that one stalled
// harness cannot stall the executor's other streams.
//
// When nothing is queued or being written, the caller writes the frame
// itself: a hand-off to the writer goroutine per frame cost a wake-up on
// every message's path. The kernel's socket buffer is then the queue; a
// write to a harness that does not drain it within SlowHarness cuts it, as
// a full queue does.
//
// b is only borrowed (the caller's read buffer, reused for the next
// frame): it is copied when it has to wait in the queue, never when it is
// written at once.
func (l *leg) Send(b []byte) bool { return l.sendFrame(b, false) }

// sendOwned is Send of a frame the leg may keep (no copy).
func (l *leg) sendOwned(b []byte) bool { return l.sendFrame(b, true) }

func (l *leg) sendFrame(b []byte, owned bool) bool {
	if l.lockIfIdle() {
		ok := l.writeNow(b)
		l.wmu.Unlock()
		return ok
	}
	if !owned {
		b = bytes.Clone(b)
	}
	return l.send(outFrame{b: b})
}

// lockIfIdle takes l.wmu when nothing is queued or being written (the
// caller may then write on its own goroutine, and unlocks), else reports
// false holding nothing.
func (l *leg) lockIfIdle() bool {
	if l.unsent.Load() != 0 || !l.wmu.TryLock() {
		return false
	}
	if l.unsent.Load() != 0 {
		l.wmu.Unlock()
		return false
	}
	return true
}

// sendBatch sends frames the leg may keep (no copy), in order: in one
// write when the socket is idle (as sendFrame writes a lone frame), else
// through the queue. A peer link's inbox hands a leg's frames over in
// batches: written one by one, each was a syscall.
//
// kept says whether the leg may still hold any of the frames (queued):
// false once they were written (or dropped) here, so that their buffers
// may be used again (legBatch.flush).
func (l *leg) sendBatch(bs []outFrame) (ok, kept bool) {
	if l.lockIfIdle() {
		if len(bs) == 1 {
			ok = l.writeNow(bs[0].b)
		} else {
			ok = l.writeNowBatch(bs)
		}
		l.wmu.Unlock()
		return ok, false
	}
	for _, f := range bs {
		if !l.send(f) {
			return false, true
		}
	}
	return true, true
}

// writeGathered writes frames a peer link's reader gathered (iov: each
// frame's websocket header and the frame, pointing into the link's
// record), with one write(2) that does not wait. The caller holds l.wmu;
// it is let go here, or by a goroutine of the leg's that writes what the
// kernel did not take (a copy: the record is reused), the watchdog
// bounding it as any write. A failed write cuts the socket.
func (l *leg) writeGathered(iov [][]byte) {
	rest, carried, err := l.cc.tryWritev(iov)
	switch {
	case err != nil:
		l.wmu.Unlock()
		l.writeFailed()
		return
	case rest == nil:
		l.wmu.Unlock()
		return
	}
	l.s.carries.Add(1)
	l.s.wg.Add(1)
	go func() {
		defer l.s.wg.Done()
		l.arm(l.writeLimit())
		err := l.cc.finish(rest, carried)
		l.disarm()
		l.wmu.Unlock()
		if err != nil {
			l.writeFailed()
		}
	}()
}

// writeNowBatch is writeNow of several frames; l.wmu is held.
func (l *leg) writeNowBatch(bs []outFrame) bool {
	if l.ending() {
		return false
	}
	timeout := l.writeLimit()
	for len(bs) > 0 {
		n := min(len(bs), corkFrames)
		if err := l.writeFrames(bs[:n], timeout); err != nil {
			l.writeFailed()
			return false
		}
		bs = bs[n:]
	}
	return true
}

// writeLimit is how long one write to this leg's socket may take.
func (l *leg) writeLimit() time.Duration {
	if l.role == roleHarness {
		return min(writeTimeout, l.s.opts.SlowHarness)
	}
	return writeTimeout
}

// writeFailed cuts the leg after a failed write, saying so when it was a
// harness too slow to read.
func (l *leg) writeFailed() {
	if l.role == roleHarness && l.wslow.Load() {
		l.s.log.Warn("rendezvous: harness socket too slow, cutting it", "env", l.env)
	}
	l.cut()
}

// ending reports whether the leg is closing or done: nothing more is sent.
func (l *leg) ending() bool {
	select {
	case <-l.closing:
		return true
	case <-l.done:
		return true
	default:
		return false
	}
}

// writeNow writes b on the caller's goroutine; l.wmu is held.
func (l *leg) writeNow(b []byte) bool {
	if l.ending() {
		return false
	}
	if err := l.write(websocket.MessageBinary, b, l.writeLimit()); err != nil {
		l.writeFailed()
		return false
	}
	return true
}

func (l *leg) send(f outFrame) bool {
	if l.ending() {
		return false
	}
	l.startWriter()
	l.unsent.Add(1)
	if !l.enqueue(f) {
		l.unsent.Add(-1)
		return false
	}
	return true
}

func (l *leg) enqueue(f outFrame) bool {
	n := int64(len(f.b))
	reserved := l.reserve(n)
	if reserved {
		select {
		case l.out <- f:
			return true
		default:
		}
	}
	var timeout <-chan time.Time
	if l.role == roleHarness {
		t := time.NewTimer(l.s.opts.SlowHarness)
		defer t.Stop()
		timeout = t.C
	}
	slow := func() bool {
		l.s.log.Warn("rendezvous: harness socket too slow, cutting it", "env", l.env)
		l.cut()
		return false
	}
	// Both bounds: queued bytes, then queued frames.
	for !reserved {
		select {
		case <-l.space:
		case <-l.done:
			return false
		case <-l.closing:
			return false
		case <-timeout:
			return slow()
		}
		reserved = l.reserve(n)
	}
	select {
	case l.out <- f:
		return true
	case <-l.done:
	case <-l.closing:
	case <-timeout:
		slow()
	}
	l.release(n)
	return false
}

// reserve takes n bytes of the queue budget; a frame always fits an empty
// queue (frames are bounded by the read limit).
func (l *leg) reserve(n int64) bool {
	for {
		cur := l.queued.Load()
		if cur > 0 && cur+n > int64(l.s.opts.QueueBytes) {
			return false
		}
		if l.queued.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

func (l *leg) release(n int64) {
	l.queued.Add(-n)
	select {
	case l.space <- struct{}{}:
	default:
	}
}

// Env is the environment the leg serves.
func (l *leg) Env() string { return l.env }

// Cut drops the socket at once.
func (l *leg) Cut() { l.cut() }

func (l *leg) deliver(f outFrame) bool { return l.send(f) }

// Close sends what is queued, then closes the socket.
func (l *leg) Close(reason string) {
	l.closeMu.Do(func() {
		l.reason = reason
		close(l.closing)
	})
	l.startWriter()
}

// startWriter starts the leg's writer goroutine, once: when a frame first
// waits in the queue, or the leg closes. Frames are written on the
// sender's goroutine while nothing is queued (sendFrame), so an idle
// socket, most executors most of the time, never needs one: a goroutine
// and its stack less per socket.
func (l *leg) startWriter() {
	l.writerOnce.Do(func() {
		// The queue too: 64 frames' headers are 3.5 KiB an idle socket
		// need not hold. The Once orders this before any enqueue.
		l.out = make(chan outFrame, l.s.opts.QueueFrames)
		go func() {
			defer close(l.writerDone)
			l.writer()
		}()
	})
}

// cut drops the socket at once.
func (l *leg) cut() {
	l.doneOnce.Do(func() {
		close(l.done)
		l.cancel()
		if l.cc != nil {
			l.cc.abort.Store(true)
		}
		l.conn.CloseNow()
	})
}

func (l *leg) writer() {
	defer l.cut()
	batch := make([]outFrame, 0, 8)
	// gather takes f and what else is queued now (up to corkFrames, and
	// no more than corkMax bytes past the first: taking a frame gives its
	// queue space back, so what the leg holds stays within the queue's
	// bounds and one batch).
	gather := func(f outFrame) []outFrame {
		l.release(int64(len(f.b)))
		batch = append(batch[:0], f)
		size := 0
		for len(batch) < corkFrames && size < corkMax {
			select {
			case g := <-l.out:
				l.release(int64(len(g.b)))
				batch = append(batch, g)
				size += len(g.b)
			default:
				return batch
			}
		}
		return batch
	}
	// write writes a gathered batch in order: at once, except a delayed
	// frame (the fault shaper's) waits for its time, what precedes it
	// written first.
	write := func(fs []outFrame) bool {
		defer clear(fs) // the frames are written or dropped: hold none
		for len(fs) > 0 {
			if wait := time.Until(fs[0].at); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-l.done:
					t.Stop()
					return false
				}
			}
			n := 1
			for n < len(fs) && !fs[n].at.After(time.Now()) {
				n++
			}
			l.wmu.Lock()
			err := l.writeFrames(fs[:n], writeTimeout)
			l.unsent.Add(-int64(n))
			l.wmu.Unlock()
			if err != nil {
				return false
			}
			fs = fs[n:]
		}
		return true
	}
	for {
		select {
		case f := <-l.out:
			if !write(gather(f)) {
				return
			}
		case <-l.closing:
			for {
				select {
				case f := <-l.out:
					if !write(gather(f)) {
						return
					}
				default:
					// The close handshake is bounded by a second; the
					// helper ends before the writer does (the socket's
					// goroutine, which Server.Close waits for, waits for
					// the writer).
					ctx, cancel := context.WithTimeout(l.ctx, time.Second)
					bounded := make(chan struct{})
					go func() { <-ctx.Done(); l.conn.CloseNow(); close(bounded) }()
					l.conn.Close(websocket.StatusGoingAway, l.reason)
					cancel()
					<-bounded
					return
				}
			}
		case <-l.done:
			return
		}
	}
}

// Pings check the peer answers: a half-open socket would otherwise hold
// routes until TCP gives up. A timer starts each ping (no goroutine per
// socket waiting for a ticker: a goroutine and its stack per idle
// executor was a good part of a node's memory), and the next is armed
// once the pong came.
func (l *leg) startPings() {
	l.pingMu.Lock()
	l.pingT = time.AfterFunc(l.s.opts.PingInterval, l.ping)
	l.pingMu.Unlock()
}

func (l *leg) ping() {
	l.pingMu.Lock()
	if l.pingStop {
		l.pingMu.Unlock()
		return
	}
	l.pings.Add(1)
	l.pingMu.Unlock()
	defer l.pings.Done()
	ctx, cancel := context.WithTimeout(l.ctx, l.s.opts.PongTimeout)
	err := l.conn.Ping(ctx)
	cancel()
	if err != nil {
		select {
		case <-l.done:
		default:
			l.s.log.Info("rendezvous: no pong, dropping socket", "role", l.role, "env", l.env)
		}
		l.cut()
		return
	}
	l.pingMu.Lock()
	if !l.pingStop {
		l.pingT.Reset(l.s.opts.PingInterval)
	}
	l.pingMu.Unlock()
}

// stopPings ends the pings once the socket is cut (a ping in progress
// returns at once: the leg's context has ended).
func (l *leg) stopPings() {
	l.pingMu.Lock()
	l.pingStop = true
	if l.pingT != nil {
		l.pingT.Stop()
	}
	l.pingMu.Unlock()
	l.pings.Wait()
}

// read returns the next message, in a read buffer the leg holds until the
// next read (Send copies what it queues; NATS copies what it publishes),
// so a frame written at once or published costs no allocation. Between
// frames the leg holds no buffer: it goes back to the server's pool before
// the leg waits for the next message, so an idle socket (most executors,
// most of the time) costs no read buffer. Each leg kept one of 64 KiB or
// more (grown by large frames) for its whole life: about 40 MB on a fleet
// node holding 660 executors after a takeover.
func (l *leg) read() (websocket.MessageType, []byte, error) {
	l.releaseRead()
	l.reading.Store(true)
	defer l.reading.Store(false)
	typ, r, err := l.conn.Reader(l.ioctx)
	if err != nil {
		return 0, nil, err
	}
	class := 0
	buf := l.s.getReadBuf(class)
	n := 0
	for {
		if n == len(buf.b) {
			// The next class. The read limit (MaxFrameBytes) bounds
			// this: the last class holds it, past it only a frame of
			// exactly the limit (to see its end) grows.
			var next *readBuf
			if class++; class < len(l.s.readBufs) {
				next = l.s.getReadBuf(class)
			} else {
				next = &readBuf{b: make([]byte, 2*n)}
			}
			copy(next.b, buf.b[:n])
			buf.free()
			buf = next
		}
		m, err := r.Read(buf.b[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			buf.free()
			return 0, nil, err
		}
	}
	l.rbuf = buf
	return typ, buf.b[:n:n], nil
}

// releaseRead gives the last frame's buffer back: its frame is done with.
// The goroutine serving the socket calls it once serving ends, however it
// ends (a read error has released it already; a route gone, a forwarder
// out of credit or a failed publish stop with the last frame's buffer
// held).
func (l *leg) releaseRead() {
	if l.rbuf != nil {
		l.rbuf.free()
		l.rbuf = nil
	}
}

// readBuf is a read buffer of one of the server's classes (4 KiB, 66 KiB,
// MaxFrameBytes), or of none (pool nil).
type readBuf struct {
	b    []byte
	pool *sync.Pool
	held *atomic.Int64 // the server's count of pooled buffers out
}

func (b *readBuf) free() {
	if b.pool != nil {
		b.held.Add(-1)
		b.pool.Put(b)
	}
}

// getReadBuf takes a buffer of class from its pool, counted in
// readBufsHeld until it is freed (the exec_relay_read_buffers_held gauge: at
// rest, one per socket in the middle of a frame, so a count that stays up
// on an idle node is a leak).
func (s *Server) getReadBuf(class int) *readBuf {
	s.readBufsHeld.Add(1)
	return s.readBufs[class].Get().(*readBuf)
}

// initReadBufs sets up the read buffer classes.
func (s *Server) initReadBufs() {
	// Most frames are small (a 1 KiB message is a 1.1 KiB frame), and a
	// buffer is held from a frame's arrival until its frame is written
	// or queued, by hundreds of legs at once on a busy node: small ones
	// first. A full Noise transport message (65 535 bytes) and its
	// frame's header fit the second class: a stream of full frames
	// copies 4 KiB once per frame, never into the third.
	sizes := [3]int{4 << 10, 66 << 10, max(s.opts.MaxFrameBytes, 132<<10)}
	for i := range s.readBufs {
		p, n := &s.readBufs[i], sizes[i]
		p.New = func() any { return &readBuf{b: make([]byte, n), pool: p, held: &s.readBufsHeld} }
	}
}

// track records l and the goroutine that will serve it (Close waits for
// it); false once the server is closed.
func (s *Server) track(l *leg) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ownSocketLocked() {
		return false
	}
	s.legs[l] = struct{}{}
	return true
}

// untrack is the last thing the goroutine serving l does.
func (s *Server) untrack(l *leg) {
	s.faults.forget(l)
	s.mu.Lock()
	delete(s.legs, l)
	s.socketDoneLocked()
	s.mu.Unlock()
}

func (s *Server) reject(w http.ResponseWriter, ev *Event, status int, reason string) {
	ev.Status, ev.Code = status, reason
	w.Header().Set(RejectionHeader, reason)
	http.Error(w, "rendezvous: "+reason, status)
}

func (s *Server) rendezvous(w http.ResponseWriter, r *http.Request, role string) {
	env := r.PathValue("env")
	ev := Event{Kind: "upgrade", Role: role, Env: env, Header: r.Header.Clone(), Query: r.URL.RawQuery}
	// Reported when the answer is known, not when the socket ends.
	reported := false
	defer func() {
		if !reported {
			s.event(ev)
		}
	}()
	var fwd *fwdLeg
	reg, err := checkURL(s.secret, r.URL.RawQuery, role, env, time.Now())
	if err != nil {
		var rj *rejection
		errors.As(err, &rj)
		s.reject(w, &ev, rj.status, rj.reason)
		return
	}
	ev.Reg = reg
	f := s.faults.get()
	if f.Upgrade.Status != 0 && (f.UpgradeRole == role || f.UpgradeRole == "" && role == roleEnvironment) {
		if f, ok := s.faults.take(func(f *Faults) *Failure { return &f.Upgrade }); ok {
			s.reject(w, &ev, f.Status, f.Code)
			return
		}
	}
	// Refuse what cannot be routed before upgrading, so the peer sees an
	// HTTP status (a 4xx makes the executor re-register).
	if role == roleEnvironment {
		if c, ok := s.store.(CurrentChecker); !ok || !c.IsCurrentRegistration(env, reg) {
			cur, ok, err := s.store.Registration(r.Context(), env)
			if err != nil {
				s.reject(w, &ev, http.StatusServiceUnavailable, "route_unavailable")
				return
			}
			if !ok || cur.ID != reg {
				s.reject(w, &ev, http.StatusForbidden, "unexpected_executor_registration_id")
				return
			}
		}
	} else if status, reason := s.routeHarness(r.Context(), env, reg, &fwd); status != 0 {
		s.reject(w, &ev, status, reason)
		return
	}
	cw := &corkWriter{ResponseWriter: w}
	c, err := websocket.Accept(cw, r, &websocket.AcceptOptions{
		// Browsers are not clients; the signed URL is the credential.
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
		OnPingReceived:     func(context.Context, []byte) bool { return !s.faults.get().NoPong },
	})
	if err != nil {
		ev.Status = http.StatusBadRequest
		if fwd != nil {
			fwd.abort()
		}
		return
	}
	ev.Status = http.StatusSwitchingProtocols
	reported = true
	s.event(ev)
	c.SetReadLimit(int64(s.opts.MaxFrameBytes))
	l := s.newLeg(role, env, c, cw.cc)
	l.reg = reg
	if !s.track(l) {
		if fwd != nil {
			fwd.abort()
		}
		c.Close(websocket.StatusGoingAway, "relay_shutdown")
		return
	}
	// The socket is served on a goroutine of its own and the handler
	// returns (the connection is hijacked: nothing waits for it). The
	// upgrade (request parsing, registration checks, the handshake) grew
	// this goroutine's stack, which a socket waiting for its next frame,
	// most executors most of the time, kept for life.
	go func() {
		defer s.untrack(l)
		l.startPings()
		switch {
		case role == roleEnvironment:
			s.serveExecutor(l, reg)
		case fwd != nil:
			fwd.serve(l, reg)
		default:
			s.serveHarness(l, reg)
		}
		l.releaseRead()   // serving may end holding its last frame's buffer
		l.Close("closed") // if serving did not (the first reason stays)
		<-l.writerDone    // the writer ends by cutting the socket
		l.stopPings()
	}()
}

// homeWait bounds how long a harness upgrade waits for its environment to
// get a home (well within the harness's dial timeout).
const homeWait = 5 * time.Second

// routeHarness decides where a harness socket for (env, reg) goes: to the
// route on this node, or (fwd set) to env's home on another node. While
// no node holds env's executor (its node died and it is redialling) the
// upgrade waits up to homeWait for a home rather than answering 503
// at once, which would grow the harness's redial backoff. status 0: go.
func (s *Server) routeHarness(ctx context.Context, env, reg string, fwd **fwdLeg) (int, string) {
	for try := 0; ; try++ {
		if _, attached, ok := s.router.Executor(env); ok {
			if attached != reg {
				return http.StatusForbidden, "unexpected_executor_registration_id"
			}
			return 0, ""
		}
		if s.fab == nil {
			return http.StatusServiceUnavailable, "route_unavailable"
		}
		fl, status, reason, noHome := s.fab.openForwarder(ctx, env, reg)
		if fl != nil {
			*fwd = fl
			return 0, ""
		}
		if !noHome || try > 0 || !s.fab.waitHome(ctx, env, homeWait) {
			return status, reason
		}
	}
}

func (s *Server) serveExecutor(l *leg, reg string) {
	displaced, err := s.router.AttachExecutor(l.env, reg, l)
	if err != nil {
		l.Close("too_many_environments")
		return
	}
	for _, d := range displaced {
		d.Close("executor_replaced")
	}
	// In a fleet the executor may have come from a node that died: its
	// harnesses redial and claim their streams shortly, so a resume for a
	// stream this node does not know yet is not answered with a reset
	// until TakeoverGrace has passed. The node answers for the
	// environment before the attachment is reported.
	var graceUntil time.Time
	if s.fab != nil {
		now := time.Now()
		graceUntil = now.Add(s.opts.TakeoverGrace)
		if since, ok := s.fab.previousHomeSeen(l.env, now); ok {
			s.recov.executorLost(l.env, since, graceUntil)
		}
		s.fab.becomeHome(l.env, reg)
	}
	s.log.Info("executor attached", "env", l.env, "registration", reg)
	s.event(Event{Kind: "attach", Role: roleEnvironment, Env: l.env, Reg: reg})
	if t, ok := s.store.(Toucher); ok {
		// Off the read loop: with a KV store it is two round trips to
		// JetStream, and after a node's death hundreds of executors
		// attach at once; their streams wait on the first frames read.
		// It ends with the socket, or after 5 s.
		go func() {
			ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
			t.TouchRegistration(ctx, l.env, reg)
			cancel()
		}()
	}
	for {
		typ, b, err := l.read()
		if err != nil {
			break
		}
		if typ != websocket.MessageBinary {
			continue
		}
		f, err := peekFrame(b)
		if err != nil {
			s.log.Debug("rendezvous: executor sent a malformed frame", "env", l.env, "len", len(b))
			continue
		}
		stream, kind := f.StreamID, f.Kind
		if reliableSignal(f) {
			s.router.Advertised(l.env, stream, false)
		}
		// Unknown streams, and streams held for a socket that has not
		// claimed them yet, get nothing: the harness's resume makes the
		// executor send again what it needs.
		if h, ok := s.router.Harness(l.env, stream); ok {
			if kind == KindResume {
				// Both ends are here again: the stream resumed.
				s.recov.resumed(l.env, stream, time.Now())
			}
			s.forward(l, false, h, stream, kind, b, false)
		} else if kind == KindResume && !s.router.Known(l.env, stream) {
			l.releaseHeld()
			// An executor resuming a stream whose harness went while the
			// executor was away: it would wait for nobody.
			if wait := time.Until(graceUntil); wait > 0 {
				env := l.env
				time.AfterFunc(wait, func() {
					if !s.router.Known(env, stream) {
						s.harnessGone(env, stream)
					}
				})
			} else {
				s.harnessGone(l.env, stream)
			}
		}
		if kind == KindReset {
			// Also ends a held stream (no socket to tell).
			s.router.Unbind(l.env, stream, nil)
		}
	}
	l.releaseHeld()
	reset, closing, waiting := s.router.DetachExecutor(l.env, l)
	for h, streams := range reset {
		for _, st := range streams {
			h.Send(resetFrame(st, "executor_disconnected"))
		}
	}
	for _, h := range closing {
		h.Close("executor_disconnected")
	}
	if waiting {
		// Streams running the reliability extension wait for the
		// executor to redial (same registration) and resume them.
		env := l.env
		now := time.Now()
		s.recov.executorLost(env, now, now.Add(s.opts.ResumeGrace))
		s.event(Event{Kind: "hold", Role: roleEnvironment, Env: env, Reg: reg})
		time.AfterFunc(s.opts.ResumeGrace, func() {
			for h, streams := range s.router.ExpireExecutor(env) {
				for _, st := range streams {
					h.Send(resetFrame(st, "executor_disconnected"))
				}
				h.Close("executor_disconnected")
			}
			if s.fab != nil {
				s.fab.resign(env)
			}
		})
	} else if s.fab != nil {
		s.fab.resign(l.env)
	}
	l.Close("closed")
	s.log.Info("executor detached", "env", l.env, "registration", reg)
	s.event(Event{Kind: "detach", Role: roleEnvironment, Env: l.env, Reg: reg})
}

func (s *Server) serveHarness(l *leg, reg string) {
	if err := s.router.AttachHarness(l.env, reg, l); err != nil {
		l.Close("route_unavailable")
		return
	}
	s.event(Event{Kind: "attach", Role: roleHarness, Env: l.env, Reg: reg})
	for {
		typ, b, err := l.read()
		if err != nil {
			break
		}
		if typ != websocket.MessageBinary {
			continue
		}
		if !s.harnessFrame(l, b, false) {
			break
		}
	}
	l.releaseHeld()
	s.harnessDetached(l)
	l.Close("closed")
	s.event(Event{Kind: "detach", Role: roleHarness, Env: l.env, Reg: reg})
}

// harnessFrame routes one frame from harness leg h (a socket here, or one
// on another node); false when the route has gone and h should stop.
// owned: b is the caller's to give away (a NATS message), not a read
// buffer, so a queue keeps it without a copy.
func (s *Server) harnessFrame(h Leg, b []byte, owned bool) bool {
	return s.harnessFrameTo(h, b, owned, nil)
}

// harnessFrameTo is harnessFrame; with bt, an owned frame toward a socket
// here is gathered in bt (the caller flushes it) instead of sent.
func (s *Server) harnessFrameTo(h Leg, b []byte, owned bool, bt *legBatch) bool {
	f, err := peekFrame(b)
	if err != nil {
		return true
	}
	env := h.Env()
	stream, kind := f.StreamID, f.Kind
	switch err := s.router.Bind(env, stream, h, kind == KindResume); {
	case errors.Is(err, ErrTooMany):
		if src, ok := h.(*leg); ok {
			src.releaseHeld()
		}
		h.Send(resetFrame(stream, "too_many_streams"))
		return true
	case err != nil:
		// Owned by another socket, or the route went away.
		return true
	}
	exec, _, ok := s.router.Executor(env)
	if !ok {
		return false
	}
	if exec == nil {
		// The executor is away; a resumed stream sends again.
		return true
	}
	if reliableSignal(f) {
		s.router.Advertised(env, stream, true)
	}
	if kind == KindResume {
		s.recov.resumed(env, stream, time.Now())
	}
	if l, ok := exec.(*leg); ok && bt != nil && owned && !s.faults.framesOn.Load() {
		s.routed.Add(1)
		bt.add(l, b)
	} else {
		if bt != nil {
			bt.flush() // order: what was gathered goes first
		}
		src, _ := h.(*leg)
		s.forward(src, true, exec, stream, kind, b, owned)
	}
	if kind == KindReset {
		s.router.Unbind(env, stream, h)
	}
	return true
}

// harnessTarget routes a frame a peer link's reader would write itself
// (linkGather): the executor's socket, or nil when the frame needs more
// than a write (a resume, a reset, a stream it may not bind, the fault
// shaper). It does nothing that harnessFrameTo of the same frame, on the
// leg's goroutine, would not do again alike (binding a stream bound to
// h, marking it advertised), so that the reader may still hand the frame
// over when the socket is busy.
func (s *Server) harnessTarget(h Leg, b []byte) *leg {
	if s.faults.framesOn.Load() {
		return nil
	}
	f, err := peekFrame(b)
	if err != nil || f.Kind == KindResume || f.Kind == KindReset {
		return nil
	}
	env := h.Env()
	if s.router.Bind(env, f.StreamID, h, false) != nil {
		return nil
	}
	exec, _, ok := s.router.Executor(env)
	l, isLeg := exec.(*leg)
	if !ok || !isLeg {
		return nil
	}
	if reliableSignal(f) {
		s.router.Advertised(env, f.StreamID, true)
	}
	return l
}

// harnessDetached runs once harness leg h has gone: its plain streams end,
// the ones both ends run the reliability extension on wait ResumeGrace
// for the harness to redial and claim them (resume); then they go too.
func (s *Server) harnessDetached(h Leg) {
	env := h.Env()
	ended, held := s.router.DetachHarness(env, h)
	for _, st := range ended {
		s.harnessGone(env, st)
	}
	now := time.Now()
	for _, st := range held {
		s.recov.harnessLost(env, st, now)
		s.event(Event{Kind: "hold", Role: roleHarness, Env: env, Stream: st})
		st := st
		time.AfterFunc(s.opts.ResumeGrace, func() {
			if s.router.Release(env, st) {
				s.recov.released(env, st)
				s.harnessGone(env, st)
			}
		})
	}
}

// harnessGone tells the executor a stream's harness went.
func (s *Server) harnessGone(env, stream string) {
	if exec, _, ok := s.router.Executor(env); ok && exec != nil {
		exec.Send(resetFrame(stream, "harness_disconnected"))
		s.event(Event{Kind: "reset", Role: roleEnvironment, Env: env, Stream: stream, Code: "harness_disconnected"})
	}
}

// forward sends one frame, through the fault shaper when frame faults are
// switched on (tests); the production path takes no fault lock.
//
// src: the leg whose reader goroutine read b (nil: none), which may
// gather frames toward a socket here (leg.sendFrom); anything else it
// sends goes after what it gathered.
func (s *Server) forward(src *leg, toExecutor bool, to Leg, stream string, kind Kind, b []byte, owned bool) {
	s.routed.Add(1)
	shaped := s.faults.framesOn.Load()
	if l, ok := to.(*leg); ok && src != nil && !owned && !shaped {
		l.sendFrom(src, b)
		return
	}
	if src != nil {
		src.releaseHeld()
	}
	switch {
	case shaped:
		s.forwardShaped(toExecutor, to, stream, kind, b)
	case owned:
		to.sendOwned(b)
	default:
		to.Send(b)
	}
}

func (s *Server) forwardShaped(toExecutor bool, to Leg, stream string, kind Kind, b []byte) {
	b = bytes.Clone(b) // the shaper may hold it (reordering, delays)
	out := s.faults.shape(toExecutor, to, stream, kind, b)
	for _, f := range out.frames {
		if out.delay > 0 {
			to.deliver(outFrame{b: f, at: time.Now().Add(out.delay)})
		} else {
			to.Send(f)
		}
	}
	if out.cut == "" {
		return
	}
	if out.cut == roleHarness && !toExecutor || out.cut == roleEnvironment && toExecutor {
		to.Cut()
		return
	}
	// The other side: the socket the frame came from.
	if out.cut == roleEnvironment {
		s.CutExecutor(to.Env())
	} else if h, ok := s.router.Harness(to.Env(), stream); ok {
		h.Cut()
	}
}

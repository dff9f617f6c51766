package process

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// gatherer reads an output stream in chunks that hold everything the
// stream has at hand, up to the chunk bound: a blocking read for the first
// bytes, then non-blocking reads until the stream is drained (EAGAIN) or
// the chunk is full.
//
// Why: each chunk becomes a retained chunk, a notification and a frame.
// A PTY master returns at most the line discipline's buffer (4 KiB) per
// read, and a pipe only what was written since the last read, so one read
// per chunk made 4-40 KiB chunks and as many frames, writes and wake-ups
// of both ends. A PTY read that finds the line discipline empty first
// waits for the pending flush of what the child wrote (n_tty_read,
// tty_buffer_flush_work), so its EAGAIN means the child has written
// nothing more.
//
// Output that arrives at bulk rates is also held back briefly: when the
// previous chunk had at least bulkMin bytes and this one's first bytes
// came less than hold after it, the chunk waits for more output until it
// is full or hold has passed since its first bytes. A child writing 4 KiB
// at a time (head, cat on a pipe) otherwise costs a chunk, a frame and a
// wake-up of the client per write whenever the server outruns it.
// Interactive output (an echo, a prompt, a line now and then) never has a
// large chunk right before it and goes out as soon as the stream is
// drained; the tail of a burst waits at most hold.
type gatherer struct {
	f  *os.File
	rc syscall.RawConn // nil: the descriptor blocks; one read per chunk
	// q, for a pipe, waits for data outside the runtime's poller (see
	// quietWait); f is then a non-blocking descriptor read through rc.
	q *quietWait
	// nap: a hold first sleeps (up to maxNap) and then takes what came,
	// instead of waking at every write: the stream is a quiet pipe big
	// enough (napPipeMin) to take the child's output meanwhile.
	nap bool
	// pending is an error or end of stream met after some bytes were
	// read, returned by the next read.
	pending error
	hold    time.Duration // 0: never hold
	prevN   int           // the previous chunk's size
	prevAt  time.Time     // when it was complete

	// readNow is the non-blocking read given to rc.Read, made once: a
	// closure per read would be an allocation per read. It reads into dst
	// and leaves the result in got and gotErr.
	readNow func(fd uintptr) bool
	dst     []byte
	got     int
	gotErr  error

	// idle is odd while the pump waits for the first bytes of a chunk with
	// nothing in hand: everything it read before has been emitted. It
	// becomes even again before the read that ends the wait, so a
	// reader of idle, seeing the same odd value before and after it
	// found the stream empty, knows that no byte was in hand meanwhile
	// (see drained). Only the pump writes it.
	idle atomic.Uint64
	// ended is set when the pump has returned (every byte emitted).
	ended atomic.Bool
	// readIdle is readNow for a wait that marks idle (a stream read
	// through the runtime's poller), made once.
	readIdle func(fd uintptr) bool
}

// drainMin is the smallest read after which the stream may have more at
// hand although the read did not fill what it asked for: a PTY master
// returns at most its line discipline's 4 KiB buffer at a time, while the
// child's output waits behind it. A shorter read (an echo, a prompt) means
// the stream is drained, without another read to find out.
const drainMin = 2048

// bulkMin is the smallest chunk after which the next one may be held: a
// pipe write of 4 KiB or a full PTY line-discipline buffer.
const bulkMin = 4000

func newGatherer(f *os.File, hold time.Duration) *gatherer {
	g := &gatherer{f: f}
	g.readNow = func(fd uintptr) bool {
		for {
			g.got, g.gotErr = unix.Read(int(fd), g.dst)
			if g.gotErr != unix.EINTR {
				return true // never wait: drained is drained
			}
		}
	}
	g.readIdle = func(fd uintptr) bool {
		if g.idle.Load()%2 == 1 {
			g.idle.Add(1) // woken: reading again
		}
		g.readNow(fd)
		if g.gotErr == unix.EAGAIN {
			g.idle.Add(1)
			return false
		}
		return true
	}
	if pf, q := quietPipe(f); q != nil {
		g.f, g.rc, g.q, g.hold = pf, q.pipe, q, hold
		_ = q.pipe.Control(func(fd uintptr) {
			size, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
			g.nap = err == nil && size >= napPipeMin
		})
		return g
	}
	// Only a non-blocking descriptor can be read without waiting; a
	// blocking one (none today: pipes from os.Pipe and PTY masters made
	// pollable are non-blocking) keeps one read per chunk, never held.
	if rc, err := f.SyscallConn(); err == nil {
		var fl int
		var ferr error
		if err := rc.Control(func(fd uintptr) { fl, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err == nil && ferr == nil && fl&unix.O_NONBLOCK != 0 {
			g.rc = rc
			g.hold = hold
		}
	}
	return g
}

// close closes the stream (and ends a read in progress: a pipe's wait
// first, then its descriptor).
func (g *gatherer) close() error {
	if g.q != nil {
		g.q.close()
	}
	return g.f.Close()
}

// readWait reads what the stream has, waiting for its first bytes (until
// the deadline set by setDeadline). It returns io.EOF at the end. idle:
// the caller has nothing in hand (see gatherer.idle).
func (g *gatherer) readWait(buf []byte, idle bool) (int, error) {
	if g.q == nil {
		if !idle || g.rc == nil {
			return g.f.Read(buf)
		}
		g.dst = buf
		err := g.rc.Read(g.readIdle)
		n, rerr := g.got, g.gotErr
		g.dst = nil
		if g.idle.Load()%2 == 1 {
			g.idle.Add(1)
		}
		switch {
		case err != nil:
			return 0, err // closed under us
		case rerr != nil:
			return 0, &os.PathError{Op: "read", Path: g.f.Name(), Err: rerr}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
	for {
		g.dst = buf
		err := g.rc.Read(g.readNow)
		n, rerr := g.got, g.gotErr
		g.dst = nil
		switch {
		case err != nil:
			return 0, err // closed under us
		case rerr == unix.EAGAIN:
			if idle {
				g.idle.Add(1)
			}
			err := g.q.wait()
			if idle {
				g.idle.Add(1) // before the read that takes what woke it
			}
			if err != nil {
				return 0, err
			}
		case rerr != nil:
			return 0, &os.PathError{Op: "read", Path: g.f.Name(), Err: rerr}
		case n == 0:
			return 0, io.EOF
		default:
			return n, nil
		}
	}
}

// drained reports whether the pump has emitted everything the stream held
// when drained was called: it has ended, or it waits for more with nothing
// in hand while the stream is empty (the same wait throughout: idle did
// not change). Any goroutine may call it.
func (g *gatherer) drained() bool {
	if g.ended.Load() {
		return true
	}
	s := g.idle.Load()
	if s%2 == 0 || g.rc == nil {
		return false
	}
	empty := false
	if err := g.rc.Control(func(fd uintptr) { empty = streamEmpty(int(fd)) }); err != nil {
		return g.ended.Load()
	}
	return empty && g.idle.Load() == s
}

// streamEmpty reports whether nothing is to be read from fd now: no byte
// in a pipe (FIONREAD), and poll finds no input. For a PTY master, poll
// (n_tty_poll) first waits for the pending flush of what the other side
// wrote (tty_buffer_flush_work), which FIONREAD does not.
func streamEmpty(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || (n > 0 && pfd[0].Revents&unix.POLLIN != 0) {
			return false
		}
		break
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCINQ) // FIONREAD
	return err == nil && n == 0
}

func (g *gatherer) setDeadline(t time.Time) error {
	if g.q != nil {
		return g.q.setDeadline(t)
	}
	return g.f.SetReadDeadline(t)
}

// read fills buf with what the stream has at hand (see gatherer). It
// returns n > 0 with a nil error, or the stream's end or error (io.EOF, EIO
// from a PTY whose other side is gone, os.ErrClosed) with n == 0.
func (g *gatherer) read(buf []byte) (int, error) {
	if g.pending != nil {
		return 0, g.pending
	}
	n, err := g.readWait(buf, true)
	if n == 0 {
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	if err != nil {
		g.pending = err
		return n, nil
	}
	if n >= drainMin {
		n = g.drain(buf, n)
	}
	now := time.Now()
	if g.hold > 0 && g.pending == nil && n < len(buf) && g.prevN >= bulkMin && now.Sub(g.prevAt) < g.hold {
		n = g.holdFor(buf, n, now.Add(g.hold))
		now = time.Now()
	}
	g.prevN, g.prevAt = n, now
	return n, nil
}

// drain adds to buf[:n] what the stream has at hand, without waiting. It
// stops at a read that comes back short of both what it asked for and
// drainMin: the stream is drained.
func (g *gatherer) drain(buf []byte, n int) int {
	for g.rc != nil && n < len(buf) {
		g.dst = buf[n:]
		err := g.rc.Read(g.readNow)
		m, rerr := g.got, g.gotErr
		g.dst = nil
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) { // holdFor's: its own read ends the hold
				g.pending = err // closed under us
			}
			return n
		}
		if rerr == unix.EAGAIN {
			return n
		}
		if rerr != nil || m <= 0 {
			if rerr == nil {
				rerr = io.EOF
			}
			g.pending = rerr
			return n
		}
		asked := len(buf) - n
		n += m
		if m < asked && m < drainMin {
			return n
		}
	}
	return n
}

// maxNap bounds a hold's sleep; napPipeMin is the smallest pipe a hold
// sleeps on. A hold happens only when the pump found the pipe nearly
// empty (it keeps up with the child), so while it sleeps the child's
// writes go into the pipe, and at bulk rates they wake nobody: one wake-up
// per held chunk instead of one per 4 KiB write. A child up to napPipeMin
// per maxNap (256 MB/s) never finds the pipe full meanwhile; a faster one
// fills it, and then the pump finds full chunks and does not hold. The
// server's pipes are 1 MiB (spawn); a smaller one (F_SETPIPE_SZ refused)
// holds by waking at each write, as a PTY does.
const (
	maxNap     = time.Millisecond
	napPipeMin = 256 << 10
)

// holdFor adds to buf[:n] what the stream writes until buf is full or the
// deadline passes.
func (g *gatherer) holdFor(buf []byte, n int, deadline time.Time) int {
	if g.nap {
		time.Sleep(min(time.Until(deadline), maxNap))
		if n = g.drain(buf, n); n == len(buf) || g.pending != nil || !time.Now().Before(deadline) {
			return n
		}
	}
	if g.setDeadline(deadline) != nil {
		return n
	}
	defer g.setDeadline(time.Time{})
	for n < len(buf) && g.pending == nil {
		m, err := g.readWait(buf[n:], false)
		n += m
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err == nil && m == 0 {
			err = io.EOF
		}
		if err != nil {
			g.pending = err
			break
		}
		if m >= drainMin {
			n = g.drain(buf, n)
		}
	}
	return n
}

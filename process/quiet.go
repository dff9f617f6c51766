package process

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// quietWait lets a pipe's reader wait for data without the pipe being in
// the Go runtime's epoll set.
//
// Why: Linux wakes every epoll watcher of a pipe on every write to it once
// the pipe has been polled (pipe_write: "Epoll nonsensically wants a
// wakeup whether the pipe was already empty or not"). A child writing
// 4 KiB at a time (head, cat, most stdio programs) into a pipe registered
// with the runtime's poller therefore woke the server's idle thread, parked
// in epoll_wait, once per 4 KiB while the output pump was busy encoding and
// sending: each wake-up found an event nobody waited for, and the thread
// went back to sleep. On two cores that was a quarter of the server's CPU
// for streamed output (runtime.findRunnable, runtime.netpoll).
//
// Instead the pipe is registered, EPOLLONESHOT, in a private epoll
// instance, and that instance in the runtime's poller. A oneshot item that
// has fired is disarmed: later writes wake nobody until the reader, having
// found the pipe empty, re-arms it (EPOLL_CTL_MOD, which also reports data
// that came meanwhile) and waits. So the runtime hears of a pipe only when
// its reader is waiting for it.
type quietWait struct {
	ep    *os.File        // the private epoll instance (pollable)
	eprc  syscall.RawConn // ep's
	pipe  syscall.RawConn // the pipe's read end (not pollable)
	arm   unix.EpollEvent
	evs   [1]unix.EpollEvent
	poll  func(fd uintptr) bool // made once (a closure per wait allocates)
	rearm func(fd uintptr)
	err   error
}

// quietPipe returns the read end of a pipe taken out of the runtime's
// poller (a non-blocking descriptor read without waiting) and its
// quietWait. f is closed on success; on failure f is returned unchanged
// with a nil quietWait.
func quietPipe(f *os.File) (*os.File, *quietWait) {
	rc, err := f.SyscallConn()
	if err != nil {
		return f, nil
	}
	dup := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if derr = unix.Fstat(int(fd), &st); derr != nil {
			return
		}
		if st.Mode&unix.S_IFMT != unix.S_IFIFO {
			derr = unix.EINVAL
			return
		}
		dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil || derr != nil {
		return f, nil
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		unix.Close(dup)
		return f, nil
	}
	q := &quietWait{arm: unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(dup)}}
	// The dup shares f's open file description, and so its O_NONBLOCK:
	// cleared for os.NewFile, which leaves a blocking descriptor out of
	// the poller, then set again (reads must never block a thread).
	if unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, dup, &q.arm) != nil ||
		unix.SetNonblock(epfd, true) != nil ||
		unix.SetNonblock(dup, false) != nil {
		unix.Close(epfd)
		unix.Close(dup)
		return f, nil
	}
	pf := os.NewFile(uintptr(dup), f.Name())
	q.ep = os.NewFile(uintptr(epfd), "epoll")
	_ = unix.SetNonblock(dup, true)
	prc, err1 := pf.SyscallConn()
	eprc, err2 := q.ep.SyscallConn()
	if err1 != nil || err2 != nil {
		pf.Close()
		q.ep.Close()
		return f, nil
	}
	q.pipe, q.eprc = prc, eprc
	q.poll = func(fd uintptr) bool {
		for {
			n, err := unix.EpollWait(int(fd), q.evs[:], 0)
			if err == unix.EINTR {
				continue
			}
			// An event (the item is disarmed again), or an error
			// that waiting would not cure: wait returns it, so the
			// reader ends instead of reading, finding nothing and
			// waiting again in a loop.
			q.err = err
			return n > 0 || err != nil
		}
	}
	q.rearm = func(epfd uintptr) {
		q.err = unix.EpollCtl(int(epfd), unix.EPOLL_CTL_MOD, int(q.arm.Fd), &q.arm)
	}
	// From now on only the dup is read: f leaves the runtime's poller.
	f.Close()
	return pf, q
}

// wait re-arms the pipe's item and waits until the pipe has data (or its
// writer is gone), the deadline set by setDeadline passes
// (os.ErrDeadlineExceeded) or the wait is closed (os.ErrClosed).
func (q *quietWait) wait() error {
	q.err = nil
	if err := q.eprc.Control(q.rearm); err != nil {
		return err
	}
	if q.err != nil {
		return q.err
	}
	if err := q.eprc.Read(q.poll); err != nil {
		return err
	}
	return q.err
}

// setDeadline bounds the waits that follow. A wait that ends at its
// deadline leaves the pipe's item armed; it is not disarmed (EPOLL_CTL_MOD
// with no events) because an armed oneshot item costs at most one wake-up
// of the runtime's poller, at the next write, and then disarms itself:
// the same order of cost as the syscall that would disarm it, paid only
// when the child writes again before the reader waits again (the next
// wait re-arms it in any case). The stale readiness that wake-up leaves on
// ep is harmless: a wait polls ep (q.poll) before it trusts the runtime's
// readiness, and waits again when the poll finds nothing.
func (q *quietWait) setDeadline(t time.Time) error { return q.ep.SetReadDeadline(t) }

// close ends a wait in progress and every later one.
func (q *quietWait) close() error { return q.ep.Close() }

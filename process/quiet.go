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
func quietPipe(f *os.File) (*os.File, *quietWait) { return quietFile(f, unix.S_IFIFO) }

// quietFile is quietPipe for a file of type kind (S_IFIFO, or S_IFCHR for
// a PTY master: its line discipline wakes the master's epoll watchers at
// every flush of the child's output).
func quietFile(f *os.File, kind uint32) (*os.File, *quietWait) {
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
		if st.Mode&unix.S_IFMT != kind {
			derr = unix.EINVAL
			return
		}
		dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil || derr != nil {
		return f, nil
	}
	// The dup shares f's open file description, and so its O_NONBLOCK:
	// cleared for os.NewFile, which leaves a blocking descriptor out of
	// the poller, then set again (reads must never block a thread).
	if unix.SetNonblock(dup, false) != nil {
		unix.Close(dup)
		return f, nil
	}
	pf := os.NewFile(uintptr(dup), f.Name())
	_ = unix.SetNonblock(dup, true)
	q, err := newQuietWait(pf, unix.EPOLLIN|unix.EPOLLRDHUP)
	if err != nil {
		pf.Close()
		return f, nil
	}
	// From now on only the dup is read: f leaves the runtime's poller.
	f.Close()
	return pf, q
}

// newQuietWait makes a quietWait for events (EPOLLIN, EPOLLOUT) of f, a
// non-blocking descriptor outside the runtime's poller. It holds f's
// descriptor number: f must outlive it (or close it first).
func newQuietWait(f *os.File, events uint32) (*quietWait, error) {
	prc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	if err := prc.Control(func(d uintptr) { fd = int(d) }); err != nil {
		return nil, err
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	q := &quietWait{arm: unix.EpollEvent{Events: events | unix.EPOLLONESHOT, Fd: int32(fd)}}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &q.arm); err != nil {
		unix.Close(epfd)
		return nil, err
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, err
	}
	q.ep = os.NewFile(uintptr(epfd), "epoll")
	eprc, err := q.ep.SyscallConn()
	if err != nil {
		q.ep.Close()
		return nil, err
	}
	q.pipe, q.eprc = prc, eprc
	q.poll = func(fd uintptr) bool {
		for {
			n, err := unix.EpollWait(int(fd), q.evs[:], 0)
			if err == unix.EINTR {
				continue
			}
			// An event (the item is disarmed again), or an error
			// that waiting would not cure.
			return n > 0 || err != nil
		}
	}
	q.rearm = func(epfd uintptr) {
		q.err = unix.EpollCtl(int(epfd), unix.EPOLL_CTL_MOD, int(q.arm.Fd), &q.arm)
	}
	return q, nil
}

// wait re-arms the item and waits until the file is ready (or its other
// side is gone), the deadline set by setDeadline passes
// (os.ErrDeadlineExceeded) or the wait is closed (os.ErrClosed).
func (q *quietWait) wait() error {
	q.err = nil
	if err := q.eprc.Control(q.rearm); err != nil {
		return err
	}
	if q.err != nil {
		return q.err
	}
	return q.eprc.Read(q.poll)
}

func (q *quietWait) setDeadline(t time.Time) error { return q.ep.SetReadDeadline(t) }

// close ends a wait in progress and every later one.
func (q *quietWait) close() error { return q.ep.Close() }

package sandbox

import (
	"time"

	"golang.org/x/sys/unix"
)

// TCP connects made on a blocking socket, which may wait for minutes (a
// SYN nobody answers), are started non-blocking on the supervisor's copy
// of the socket and their end waited for with epoll by serve, beside the
// notifications: no thread per connect. Each used to be a goroutine
// blocked in connect(2), a thread of the init's each; the init counts in
// the sandbox's process bound, so a command that filled it and then
// connected made the Go runtime fail to start a thread, and the init (and
// the sandbox) died of it (TestCommandConnectsAtPidsMax).

// pendingConnect is a connect the supervisor started for a caller whose
// socket blocks: answered when the socket is connected or has failed
// (connectReady), when its SO_SNDTIMEO passes (connectTimers), or dropped
// unanswered when the caller is gone (reapConnects).
type pendingConnect struct {
	id   uint64
	sock int    // the supervisor's copy of the caller's socket
	addr []byte // as read once from the caller
	// deadline is the socket's SO_SNDTIMEO from the call (zero: none);
	// onTimeout what a blocking connect says when it passes: EINPROGRESS
	// (or EALREADY for a socket already connecting), the connection going
	// on without the caller.
	deadline  time.Time
	onTimeout unix.Errno
	// quietUntil, where serve waits with poll (s.ep < 0): an event
	// that did not end the connect (POLLERR from an error queue while
	// it goes on, which poll reports for as long as it lasts) leaves
	// the socket out of the poll until then, so serve does not spin.
	quietUntil time.Time
}

// connectQuiet is how long a connect whose event did not end it stays
// out of serve's poll.
const connectQuiet = 10 * time.Millisecond

// connectReap is how often the connects in flight are checked for a
// caller gone (killed: only a fatal signal ends its wait, WAIT_KILLABLE_RECV),
// whose socket would otherwise stay in a slot until the kernel gives up
// on it (minutes for a SYN nobody answers). A connect refused for room
// checks them at once first.
const connectReap = time.Second

// connectInet connects sock, the caller's socket of a family other than
// AF_UNIX, to addr for notification id, and owns sock. A socket that
// never waits in connect (non-blocking, or not a TCP stream: UDP connects
// at once) is connected here; a blocking TCP connect is started
// non-blocking and waited for in serve (pendingConnect). Any other
// blocking stream protocol a command could open (SCTP, where the kernel
// has it) is connected here too and holds the supervisor's other calls
// until it ends, as a unix stream connect to a full backlog does: a
// thread for it is what the process bound can deny.
func (s *supervisor) connectInet(id uint64, sock int, addr []byte) {
	done := func(errno unix.Errno) {
		unix.Close(sock)
		s.answer(id, noFD, errno)
	}
	if !s.connectRoom() {
		s.reapConnects()
		if !s.connectRoom() {
			// Each holds a descriptor of the supervisor's: they must
			// not run it out of them. ENOBUFS, not EAGAIN: a caller
			// reads EAGAIN from connect as "in progress" (asyncio,
			// curl) and would wait on a socket that never connects.
			done(unix.ENOBUFS)
			return
		}
	}
	if !s.idValid(id) {
		unix.Close(sock)
		return
	}
	fl, err := unix.FcntlInt(uintptr(sock), unix.F_GETFL, 0)
	if err != nil {
		done(toErrno(err))
		return
	}
	if fl&unix.O_NONBLOCK != 0 {
		done(rawConnect(sock, addr))
		return
	}
	if !tcpStream(sock) {
		// Datagram, raw, netlink and packet sockets connect without
		// waiting. A connection-oriented socket of another protocol
		// is none a sandboxed command could open (the filter refuses
		// them, seccomp_linux.go): one handed in from outside is
		// started without waiting, its caller told EINPROGRESS as
		// when a blocking connect's SO_SNDTIMEO passes, rather than
		// hold serve's thread (and every other call of the sandbox)
		// for as long as the peer does not answer.
		if typ, err := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_TYPE); err == nil &&
			(typ == unix.SOCK_DGRAM || typ == unix.SOCK_RAW) {
			done(rawConnect(sock, addr))
		} else {
			done(connectNonblock(sock, addr))
		}
		return
	}
	c := &pendingConnect{id: id, sock: sock, addr: addr}
	if tv, err := unix.GetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_SNDTIMEO); err == nil && (tv.Sec > 0 || tv.Usec > 0) && tv.Sec < 1<<32 {
		c.deadline = time.Now().Add(time.Duration(tv.Sec)*time.Second + time.Duration(tv.Usec)*time.Microsecond)
	}
	c.onTimeout = connectNonblock(sock, addr)
	if c.onTimeout != unix.EINPROGRESS && c.onTimeout != unix.EALREADY {
		done(c.onTimeout) // connected, or failed, at once
		return
	}
	if s.ep >= 0 {
		// Edge-triggered: one event when the connection is made or
		// fails (an already finished one is reported at once), none
		// while a condition that is no end (an error queue) lasts.
		ev := unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLET, Fd: int32(sock)}
		if err := unix.EpollCtl(s.ep, unix.EPOLL_CTL_ADD, sock, &ev); err != nil {
			done(unix.ENOBUFS) // no watch to wait with (max_user_watches)
			return
		}
	}
	s.connects[sock] = c
}

// tcpStream reports whether sock is a TCP (or MPTCP) stream socket, whose
// connect may be started non-blocking and finished by connecting again
// (__inet_stream_connect: EALREADY while it goes on, then 0 or the error,
// consumed as a blocking connect consumes it).
func tcpStream(sock int) bool {
	dom, err1 := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, err2 := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_TYPE)
	proto, err3 := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	return err1 == nil && err2 == nil && err3 == nil &&
		(dom == unix.AF_INET || dom == unix.AF_INET6) && typ == unix.SOCK_STREAM &&
		(proto == unix.IPPROTO_TCP || proto == unix.IPPROTO_MPTCP)
}

// connectNonblock is connect(2) on sock without waiting. The open file is
// the caller's (pidfd_getfd), whose blocking mode connect takes from its
// flags: O_NONBLOCK is set for this call only and cleared right after if
// the flags are still the ones set. Another process or thread of the
// command using the socket in that instant sees it non-blocking (a read
// of it then fails with EAGAIN where it would wait), and one that changes
// the flags in that instant keeps what it set, O_NONBLOCK included (its
// F_SETFL may have been made from flags read with ours on: the socket
// then stays non-blocking); the caller itself is stopped in the call.
func connectNonblock(sock int, addr []byte) unix.Errno {
	fl, err := unix.FcntlInt(uintptr(sock), unix.F_GETFL, 0)
	if err != nil {
		return toErrno(err)
	}
	if fl&unix.O_NONBLOCK != 0 {
		return rawConnect(sock, addr) // the command made it non-blocking itself
	}
	if _, err := unix.FcntlInt(uintptr(sock), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
		return toErrno(err)
	}
	errno := rawConnect(sock, addr)
	if now, err := unix.FcntlInt(uintptr(sock), unix.F_GETFL, 0); err == nil && now == fl|unix.O_NONBLOCK {
		_, _ = unix.FcntlInt(uintptr(sock), unix.F_SETFL, fl)
	}
	return errno
}

// connectReady finishes c once its socket reported an event
// (connectResult); EALREADY: not finished yet.
func (s *supervisor) connectReady(c *pendingConnect) {
	if connectSettle > 0 {
		time.Sleep(connectSettle)
	}
	errno := connectResult(c.sock, c.addr)
	if errno == unix.EALREADY || errno == unix.EINPROGRESS {
		if s.ep < 0 {
			c.quietUntil = time.Now().Add(connectQuiet)
		}
		return
	}
	s.endConnect(c, errno)
}

// connectSettle, set by tests only, is how long serve waits before it
// looks at a connect that reported an event: the time a loaded machine
// may take to run it, in which the peer can already have reset the
// connection (TestCommandConnectResetAfterAccept).
var connectSettle time.Duration

// connectResult is what the caller's blocking connect returns by now.
// Connecting again gives it (0, or the error, taken off the socket:
// SO_ERROR is then 0, as after a blocking connect), with one exception:
// a connection made and then reset by the peer (a proxy that refuses
// after its accept, netproxy's reset) before serve came to it. The
// kernel woke the caller's own connect when the connection was made, and
// it returned 0; the reset is for its first read or write. Connecting
// again would report the reset (ECONNRESET) as the connect's failure, so
// such a socket is answered 0 and left as it is, its error pending.
// What tells it from a connect refused (the RST answering the SYN, also
// TCP_CLOSE): the SYN-ACK was taken, which acknowledged the SYN
// (tcpi_bytes_acked counts it; a segment the kernel rejected while it
// waited does not, where tcpi_segs_in would).
func connectResult(sock int, addr []byte) unix.Errno {
	if ti, err := unix.GetsockoptTCPInfo(sock, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil &&
		ti.State == tcpClose && ti.Bytes_acked >= 1 {
		return 0
	}
	errno := connectNonblock(sock, addr)
	if errno == unix.EISCONN {
		// Another connect on the socket (a second caller's, waiting
		// beside this one, or the command's own) finished it first:
		// connected, which a blocking connect waiting on it returns
		// as 0 too (__inet_stream_connect).
		return 0
	}
	if errno == unix.ECONNRESET || errno == unix.EPIPE {
		// Reset between the look above and the connect: only a
		// connection that was made is reset (tcp_reset answers a SYN
		// with ECONNREFUSED). The caller's read finds no error left
		// (ENOTCONN) rather than ECONNRESET; it still fails.
		return 0
	}
	return errno
}

// tcpClose is TCP_CLOSE, the state of struct tcp_info's tcpi_state.
const tcpClose = 7

// connectTimers answers the connects whose SO_SNDTIMEO has passed by now
// and, every connectReap, drops those whose caller is gone.
func (s *supervisor) connectTimers(now time.Time) {
	if len(s.connects) == 0 {
		return
	}
	for _, c := range s.connects {
		if c.deadline.IsZero() || now.Before(c.deadline) {
			continue
		}
		errno := connectResult(c.sock, c.addr)
		if errno == unix.EALREADY || errno == unix.EINPROGRESS {
			errno = c.onTimeout
		}
		s.endConnect(c, errno)
	}
	if now.Sub(s.reaped) >= connectReap {
		s.reapConnects()
		s.reaped = now
	}
}

// connectWake lowers timeout (ms, -1: none) to the next connectTimers due.
func (s *supervisor) connectWake(now time.Time, timeout int) int {
	if len(s.connects) == 0 {
		return timeout
	}
	next := s.reaped.Add(connectReap)
	for _, c := range s.connects {
		if !c.deadline.IsZero() && c.deadline.Before(next) {
			next = c.deadline
		}
		if s.ep < 0 && c.quietUntil.After(now) && c.quietUntil.Before(next) {
			next = c.quietUntil
		}
	}
	ms := int((next.Sub(now) + time.Millisecond - 1) / time.Millisecond)
	ms = max(ms, 0)
	if timeout < 0 || ms < timeout {
		return ms
	}
	return timeout
}

// reapConnects drops, unanswered, the connects whose notification no
// longer stands (the caller was killed), freeing their slots.
func (s *supervisor) reapConnects() {
	for _, c := range s.connects {
		if !s.idValid(c.id) {
			s.dropConnect(c)
		}
	}
}

// endConnect answers c's caller with errno and drops c.
func (s *supervisor) endConnect(c *pendingConnect, errno unix.Errno) {
	s.dropConnect(c)
	s.answer(c.id, noFD, errno)
}

// dropConnect forgets c and closes its socket. The watch is removed
// first: the caller's descriptor keeps the open file, and with it the
// watch, past the close of ours.
func (s *supervisor) dropConnect(c *pendingConnect) {
	if s.ep >= 0 {
		_ = unix.EpollCtl(s.ep, unix.EPOLL_CTL_DEL, c.sock, nil)
	}
	unix.Close(c.sock)
	delete(s.connects, c.sock)
}

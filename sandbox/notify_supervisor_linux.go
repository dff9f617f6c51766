package sandbox

import (
	"errors"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// The supervisor's loop (notify_linux.go has the map of the layers):
// receive a notification, decode the call, hand it to its handler, answer.

// maxPendingOpens bounds the opens waiting in one sandbox's supervisor
// (pendingOpen): no real workload has a thousand FIFO opens waiting at
// once; past it an open fails with ENFILE. Each holds a descriptor of the
// supervisor's, so the bound is also kept below the supervisor's
// RLIMIT_NOFILE (pendingRoom).
const maxPendingOpens = 1024

// fdReserve is what pendingRoom keeps free of the supervisor's descriptor
// table for the call at hand: a rename's walk holds one per level
// (renameWalkDepth), the rest (the target's memory, root and its two
// procfs directories, /proc/TGID and its task/TID, the bases, the walk,
// the new file, a pin, the scan's directories) a few more.
const fdReserve = renameWalkDepth + 32

// supervisor serves the notifications of one command tree.
type supervisor struct {
	listener int
	p        *policy.Plan
	pending  []pendingOpen
	scan     scanSchedule // the scan for FIFO readers' silent writers
	// full: no room for another pending open, for the call being
	// handled (handle): a wait is refused before any open is done.
	full bool
	// cwd is the init's directory (O_PATH), to come back to after a bind
	// made relative to another one (this thread's own: CLONE_FS
	// unshared); -1: binds to a path are refused.
	cwd int
	// lock is the creation lock (creationLock), -1 without deny globs.
	lock int
	// baseFDs is how many descriptors the init had open when it began
	// to serve (pendingRoom; fdRoom counts again near the limit).
	baseFDs int
	// connects are the TCP connects in flight (pendingConnect), by the
	// supervisor's socket, each holding it: counted in pendingRoom and
	// bounded (connectRoom).
	connects map[int]*pendingConnect
	reaped   time.Time // the last reapConnects by connectTimers
	// ep is the epoll instance serve waits on (the listener and the
	// connects' sockets), -1 when it waits with poll.
	ep    int
	evs   [64]unix.EpollEvent
	ready []int // the connects' sockets the last wait found ready
}

// maxConnects bounds the connects in flight in one supervisor (each a
// descriptor): past it a connect fails with ENOBUFS (connectInet says
// why not EAGAIN). A variable for the tests only.
var maxConnects = 1024

// fdSlack is how far below the RLIMIT_NOFILE fdRoom trusts its reckoning
// (baseFDs and what it holds) without counting the table. The init opens
// no descriptor of its own for long after it began to serve (the Go
// runtime's poller and its cgroup files for GOMAXPROCS are open before;
// 13 descriptors at start and seconds later, with supervised creations, a
// bind and a connect between), so the reckoning is exact today; the count
// keeps the reserve whole should that change.
const fdSlack = 32

// pendingRoom reports whether another open may wait here. Besides
// maxPendingOpens, the pending opens' descriptors, the in-flight
// connects' sockets, the init's own and fdReserve must fit under the supervisor's RLIMIT_NOFILE as it is now (a
// command running as the init's user can lower it with prlimit): were its
// table to fill, every supervised call would fail, the pending opens'
// retries too. Past it an open fails with ENFILE, as past the count.
func (s *supervisor) pendingRoom() bool {
	return len(s.pending) < maxPendingOpens && s.fdRoom()
}

// connectRoom reports whether another connect may go on its goroutine:
// below maxConnects, and its socket fits as a pending open's descriptor
// would (fdRoom).
func (s *supervisor) connectRoom() bool {
	return len(s.connects) < maxConnects && s.fdRoom()
}

// fdRoom reports whether one more descriptor held for long (a pending
// open's, an in-flight connect's) leaves fdReserve free under the
// RLIMIT_NOFILE as it is now. The descriptors are reckoned from baseFDs,
// counted once at start; within fdSlack of the limit they are counted
// (those of the call at hand with them, which errs on the safe side), so
// descriptors the init opened since cannot take the reserve's place.
func (s *supervisor) fdRoom() bool {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) != nil {
		return false
	}
	held := s.baseFDs + len(s.pending) + len(s.connects)
	if uint64(held+fdReserve+fdSlack) < rl.Cur {
		return true
	}
	held = max(held, countFDs())
	return uint64(held+fdReserve) < rl.Cur
}

// countFDs is how many descriptors this process has open (fail closed: a
// count it cannot take is a full table's).
func countFDs() int {
	names, err := readNames("/proc/self/fd")
	if err != nil {
		return maxPendingOpens + fdReserve + 1<<20
	}
	return len(names) - 1 // the directory read itself
}

// wait waits up to timeout ms (-1: for ever) for the listener and the
// connects' sockets, on the epoll instance s.ep, or with poll where
// s.ep < 0. revents are the listener's, in poll's bits (EPOLLIN,
// EPOLLERR and EPOLLHUP have POLLIN's, POLLERR's and POLLHUP's values);
// the connects' sockets with an event are in s.ready.
func (s *supervisor) wait(timeout int) (revents int16, err error) {
	s.ready = s.ready[:0]
	if s.ep < 0 {
		fds := make([]unix.PollFd, 1, 1+len(s.connects))
		fds[0] = unix.PollFd{Fd: int32(s.listener), Events: unix.POLLIN}
		now := time.Now()
		for sock, c := range s.connects {
			if c.quietUntil.After(now) {
				continue // connectReady: its last event did not end it
			}
			fds = append(fds, unix.PollFd{Fd: int32(sock), Events: unix.POLLOUT})
		}
		if _, err = unix.Poll(fds, timeout); err != nil {
			return 0, err
		}
		for _, f := range fds[1:] {
			if f.Revents != 0 {
				s.ready = append(s.ready, int(f.Fd))
			}
		}
		return fds[0].Revents, nil
	}
	n, err := unix.EpollWait(s.ep, s.evs[:], timeout)
	for _, ev := range s.evs[:max(n, 0)] {
		if int(ev.Fd) == s.listener {
			revents = int16(ev.Events)
		} else {
			s.ready = append(s.ready, int(ev.Fd))
		}
	}
	return revents, err
}

// serve handles notifications until the listener fails (every command
// process gone). It runs on the init's locked thread.
func (s *supervisor) serve() {
	s.connects, s.ep = map[int]*pendingConnect{}, -1
	// What the pending opens and connects hold (a reader's descriptor
	// keeps its FIFO open for reading) goes with the supervisor, not with
	// the init.
	defer func() {
		for _, po := range s.pending {
			po.close()
		}
		s.pending = nil
		for _, c := range s.connects {
			s.dropConnect(c)
		}
		if s.ep >= 0 {
			unix.Close(s.ep)
		}
	}()
	// The pending opens are looked at every 5 ms (each backs off or
	// waits for its scan: retryPending), also while notifications
	// keep coming (a poll that never times out would starve them).
	var retried time.Time
	// The listener is waited on with epoll, not poll: poll fails with
	// EINVAL once its descriptor count passes the soft RLIMIT_NOFILE
	// (a command running as the init's user may set it to 0), which
	// ended serving for good (every later call ENOSYS); epoll_wait does
	// not look at the limit. Without epoll, poll it is.
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err == nil {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.listener)}
		if unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, s.listener, &ev) != nil {
			unix.Close(ep)
			ep = -1
		}
	} else {
		ep = -1
	}
	s.ep = ep
	s.baseFDs = countFDs()
	for {
		now := time.Now()
		s.connectTimers(now)
		timeout := -1
		if len(s.pending) > 0 {
			timeout = 5
			if now.Sub(retried) >= 5*time.Millisecond {
				s.retryPending()
				retried = time.Now()
				continue
			}
		}
		timeout = s.connectWake(now, timeout)
		revents, err := s.wait(timeout)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EINVAL && s.ep < 0 {
			// poll over the soft RLIMIT_NOFILE: wait for it to rise.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err != nil {
			return
		}
		for _, sock := range s.ready {
			if c := s.connects[sock]; c != nil {
				s.connectReady(c)
			}
		}
		if revents == 0 {
			continue // a connect's event, or a retry or timer due
		}
		if revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 && revents&unix.POLLIN == 0 {
			return
		}
		var req seccompNotif
		if e := notifIoctl(s.listener, unix.SECCOMP_IOCTL_NOTIF_RECV, &req); e != 0 {
			if e == unix.EINTR || e == unix.ENOENT {
				continue
			}
			return
		}
		if uintptr(req.Nr) == unix.SYS_CONNECT && req.Arch == seccompArch {
			s.connect(&req)
			continue
		}
		room := s.pendingRoom()
		if !room && len(s.connects) > 0 {
			s.reapConnects() // slots of callers gone
			room = s.pendingRoom()
		}
		r := s.handle(&req, room)
		if r.pending != nil && !room {
			// Each holds a descriptor of the supervisor's: a command
			// must not run its own supervisor out of them (or out of
			// memory). The kernel's answer when its file table is full.
			r.pending.close()
			r = replyErrno(unix.ENFILE)
		}
		if r.pending != nil {
			r.pending.id = req.ID
			if r.pending.reader {
				s.scan.readerCame()
				retried = time.Time{} // its scan is due: retry at once
			}
			s.pending = append(s.pending, *r.pending)
			continue
		}
		s.answer(req.ID, r.fd, r.errno)
	}
}

// answer completes notification id: with fd installed in the target (the
// syscall's result) when fd >= 0 (closed here), else with errno (0: the
// call returns 0). An answer to a notification gone meanwhile (the target
// was interrupted or died) fails with ENOENT: nothing to do.
//
// The descriptor is added, then the reply sent, in two calls rather than
// one SECCOMP_ADDFD_FLAG_SEND: that flag marks the notification answered
// before the target has taken the descriptor, and when a signal to this
// thread (a reparented orphan's SIGCHLD) interrupts the wait for it the
// kernel withdraws the descriptor but not the answer. The target's open
// then returned 0, a descriptor it never opened, and the restarted ioctl
// found the notification gone (TestCommandCreateUnderSignals). Without
// the flag, an interrupted add is withdrawn whole (and restarted) or was
// done and returns its number. Between the two calls the target waits
// killably (WAIT_KILLABLE_RECV); only on kernels before 5.19 can a signal
// to it restart the call, leaving it the descriptor of its own creation.
func (s *supervisor) answer(id uint64, fd fdResult, errno unix.Errno) {
	resp := seccompResp{ID: id}
	if fd.fd >= 0 {
		add := seccompAddfd{ID: id, Srcfd: uint32(fd.fd)}
		if fd.cloexec {
			add.NewfdFlags = unix.O_CLOEXEC
		}
		n, e := notifAddfd(s.listener, &add)
		for e == unix.EINTR {
			n, e = notifAddfd(s.listener, &add)
		}
		unix.Close(fd.fd)
		switch e {
		case 0:
			resp.Val, errno = int64(n), 0
		case unix.ENOENT:
			return
		default:
			errno = e // fail closed: the call fails with the reason
		}
	}
	if errno != 0 {
		resp.Error = -int32(errno)
	}
	// SEND, ID_VALID and ADDFD first take the listener's lock
	// interruptibly (mutex_lock_interruptible in kernel/seccomp.c): a
	// signal while they wait for it fails them with EINTR, which no
	// SA_RESTART restarts, having done nothing. Retried: a SEND given up
	// left its target waiting for an answer for good, an ID_VALID taken
	// for "gone" answered ENOENT to a live call (or nothing at all).
	for notifIoctl(s.listener, unix.SECCOMP_IOCTL_NOTIF_SEND, &resp) == unix.EINTR {
	}
}

// idValid reports whether notification id still stands: its target is
// still in the call (neither interrupted nor dead, so its tid still names
// it) and unanswered. Everything read from the target, and every path
// resolved through its /proc entries, before a true idValid was the
// target's own (see handle).
func (s *supervisor) idValid(id uint64) bool {
	for {
		switch notifIoctl(s.listener, ioctlNotifIDValid, &id) {
		case 0:
			return true
		case unix.EINTR:
			continue // see answer
		default:
			return false
		}
	}
}

// fdResult is a descriptor to install in the target (-1 for none).
type fdResult struct {
	fd      int
	cloexec bool
}

var noFD = fdResult{fd: -1}

// reply completes a notification: a descriptor to install in the target
// (the call's result), an errno (0: the call returns 0), or, for a FIFO
// with no reader yet, later (pending: retried between notifications).
type reply struct {
	fd      fdResult
	errno   unix.Errno
	pending *pendingOpen
}

func replyErrno(e unix.Errno) reply      { return reply{fd: noFD, errno: e} }
func install(fd int, cloexec bool) reply { return reply{fd: fdResult{fd, cloexec}} }
func later(p *pendingOpen) reply         { return reply{fd: noFD, pending: p} }

// op is what a notification asks the supervisor to do in the target's place.
type op uint8

const (
	opOpen op = iota + 1 // open, creat, openat (O_CREAT), openat2
	opMkdir
	opMknod
	opLink
	opSymlink
	opRename
	opBind
)

var opNames = [...]string{opOpen: "open", opMkdir: "mkdir", opMknod: "mknod", opLink: "link",
	opSymlink: "symlink", opRename: "rename", opBind: "bind"}

func (o op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// call is a notification decoded: which operation, on which paths.
type call struct {
	op            op
	dirfd, dirfd2 int
	path, path2   uint64 // addresses; path2 is link's/rename's new path, symlink's link path
	flags         int
	mode          uint32
	dev           uint64
	how           uint64 // openat2's struct open_how
	howSize       uint64
	sock          int    // bind's socket, in the target
	addr          uint64 // bind's address and its length
	addrLen       int
}

func decodeCall(req *seccompNotif) (call, bool) {
	a := req.Args
	fdOf := func(v uint64) int { return int(int32(uint32(v))) }
	nr := uintptr(req.Nr)
	switch nr {
	case unix.SYS_OPENAT:
		return call{op: opOpen, dirfd: fdOf(a[0]), path: a[1], flags: int(int32(a[2])), mode: uint32(a[3])}, true
	case unix.SYS_OPENAT2:
		return call{op: opOpen, dirfd: fdOf(a[0]), path: a[1], how: a[2], howSize: a[3]}, true
	case unix.SYS_MKDIRAT:
		return call{op: opMkdir, dirfd: fdOf(a[0]), path: a[1], mode: uint32(a[2])}, true
	case unix.SYS_MKNODAT:
		return call{op: opMknod, dirfd: fdOf(a[0]), path: a[1], mode: uint32(a[2]), dev: a[3]}, true
	case unix.SYS_LINKAT:
		return call{op: opLink, dirfd: fdOf(a[0]), path: a[1], dirfd2: fdOf(a[2]), path2: a[3], flags: int(int32(a[4]))}, true
	case unix.SYS_SYMLINKAT:
		return call{op: opSymlink, path: a[0], dirfd2: fdOf(a[1]), path2: a[2]}, true
	case unix.SYS_RENAMEAT:
		return call{op: opRename, dirfd: fdOf(a[0]), path: a[1], dirfd2: fdOf(a[2]), path2: a[3]}, true
	case unix.SYS_BIND:
		return call{op: opBind, sock: fdOf(a[0]), addr: a[1], addrLen: int(int32(uint32(a[2])))}, true
	case unix.SYS_RENAMEAT2:
		return call{op: opRename, dirfd: fdOf(a[0]), path: a[1], dirfd2: fdOf(a[2]), path2: a[3], flags: int(int32(a[4]))}, true
	}
	cwd := unix.AT_FDCWD
	for name, lnr := range legacyCreate {
		if lnr != nr {
			continue
		}
		switch name {
		case "open":
			return call{op: opOpen, dirfd: cwd, path: a[0], flags: int(int32(a[1])), mode: uint32(a[2])}, true
		case "creat":
			return call{op: opOpen, dirfd: cwd, path: a[0], flags: unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC, mode: uint32(a[1])}, true
		case "mkdir":
			return call{op: opMkdir, dirfd: cwd, path: a[0], mode: uint32(a[1])}, true
		case "mknod":
			return call{op: opMknod, dirfd: cwd, path: a[0], mode: uint32(a[1]), dev: a[2]}, true
		case "link":
			return call{op: opLink, dirfd: cwd, path: a[0], dirfd2: cwd, path2: a[1]}, true
		case "symlink":
			return call{op: opSymlink, path: a[0], dirfd2: cwd, path2: a[1]}, true
		case "rename":
			return call{op: opRename, dirfd: cwd, path: a[0], dirfd2: cwd, path2: a[1]}, true
		}
	}
	return call{}, false
}

// handle does one notification's call; every failure is an errno (fail
// closed), never a continue.
func (s *supervisor) handle(req *seccompNotif, room bool) reply {
	s.full = !room
	defer func() { s.full = false }()
	c, ok := decodeCall(req)
	if !ok || req.Arch != seccompArch {
		return replyErrno(unix.ENOSYS)
	}
	t, errno := openTarget(int(req.Pid))
	if errno != 0 {
		return replyErrno(errno)
	}
	defer t.close()
	if c.op == opBind {
		unlock, errno := lockCreation(s.lock, false)
		if errno != 0 {
			return replyErrno(errno)
		}
		defer unlock()
		return replyErrno(s.bind(t, c, req.ID))
	}
	// Read everything from the target's memory first, then check that the
	// notification still stands (the tid was not reused: /proc/TID is the
	// notifying task), then act on the copies only.
	var p1, p2 string
	var how unix.OpenHow
	if c.op == opOpen && c.how != 0 {
		if errno = t.readHow(c.how, c.howSize, &how); errno != 0 {
			return replyErrno(errno)
		}
		c.flags, c.mode = int(how.Flags), uint32(how.Mode)
		// openat2 refuses what openat ignores: a mode with bits beyond
		// 07777, or one without O_CREAT or O_TMPFILE.
		if how.Flags>>32 != 0 || how.Mode&^0o7777 != 0 ||
			(how.Mode != 0 && how.Flags&(unix.O_CREAT|(unix.O_TMPFILE&^unix.O_DIRECTORY)) == 0) {
			return replyErrno(unix.EINVAL)
		}
		// No set-user-ID or set-group-ID file (the other filter checks
		// the modes of every other call).
		if how.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			return replyErrno(unix.EPERM)
		}
	}
	if p1, errno = t.readPath(c.path); errno != 0 {
		return replyErrno(errno)
	}
	if c.path2 != 0 {
		if p2, errno = t.readPath(c.path2); errno != 0 {
			return replyErrno(errno)
		}
	}
	base1, base2 := -1, -1
	defer func() {
		for _, fd := range []int{base1, base2} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	if c.op != opSymlink {
		if base1, errno = t.base(c.dirfd, p1, c.op == opLink && c.flags&unix.AT_EMPTY_PATH != 0); errno != 0 {
			return replyErrno(errno)
		}
	}
	if c.path2 != 0 {
		if base2, errno = t.base(c.dirfd2, p2, false); errno != 0 {
			return replyErrno(errno)
		}
	}
	if !s.idValid(req.ID) {
		return replyErrno(unix.ENOENT)
	}
	// From the check of a new name to its creation, no supervised rename
	// (of any sandbox, of any server) may move a directory on its path;
	// a rename, walked and done, excludes every creation.
	unlock, errno := lockCreation(s.lock, c.op == opRename)
	if errno != 0 {
		return replyErrno(errno)
	}
	defer unlock()
	// Again after the lock, which may have waited: act walks the paths
	// again, and a /proc/self on them names the target by its tid, which
	// another process of the sandbox may have by now if the target died.
	if !s.idValid(req.ID) {
		return replyErrno(unix.ENOENT)
	}
	unix.Umask(t.umask) // the target's, for what the kernel makes here
	return s.act(t, c, base1, p1, base2, p2, how)
}

// act does c in the target's place, once handle has read its paths from
// the target's memory, resolved their bases and taken the creation lock.
func (s *supervisor) act(t *target, c call, base1 int, p1 string, base2 int, p2 string, how unix.OpenHow) reply {
	switch c.op {
	case opOpen:
		r := s.open(t, c, base1, p1, how)
		if r.fd.fd >= 0 && inSupervisor(r.fd.fd) {
			// Reopened through a descriptor of the command that names a
			// file of the supervisor (an O_PATH one on /proc/1/mem).
			unix.Close(r.fd.fd)
			return replyErrno(unix.EACCES)
		}
		return r
	case opMkdir, opMknod, opSymlink:
		dir, name, slash, errno := t.walkParent(base1Or2(c, base1, base2), pathOf(c, p1, p2))
		if errno != 0 {
			return replyErrno(errno)
		}
		defer unix.Close(dir)
		if errno := s.checkNew(dir, name); errno != 0 {
			return replyErrno(errno)
		}
		var err error
		switch c.op {
		case opMkdir:
			err = unix.Mkdirat(dir, name, c.mode)
		case opMknod:
			if slash {
				return replyErrno(existsErr(dir, name, unix.ENOENT))
			}
			err = unix.Mknodat(dir, name, c.mode, int(c.dev))
		case opSymlink:
			if slash {
				return replyErrno(existsErr(dir, name, unix.ENOENT))
			}
			if errno := s.checkSymlink(t, dir, name, p1); errno != 0 {
				return replyErrno(errno)
			}
			err = unix.Symlinkat(p1, dir, name)
		}
		return replyErrno(toErrno(err))
	case opLink:
		return replyErrno(s.link(t, base1, p1, base2, p2, c.flags))
	case opRename:
		return replyErrno(s.rename(t, base1, p1, base2, p2, c.flags))
	}
	return replyErrno(unix.ENOSYS)
}

func base1Or2(c call, b1, b2 int) int {
	if c.op == opSymlink {
		return b2
	}
	return b1
}

func pathOf(c call, p1, p2 string) string {
	if c.op == opSymlink {
		return p2
	}
	return p1
}

// existsErr is EEXIST when dir/name exists, else def.
func existsErr(dir int, name string, def unix.Errno) unix.Errno {
	var st unix.Stat_t
	if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		return unix.EEXIST
	}
	return def
}

func toErrno(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EACCES
}

package sandbox

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// The supervisor's loop (notify_linux.go has the map of the layers):
// receive a notification, decode the call, hand it to its handler, answer.

// supervisor serves the notifications of one command tree.
type supervisor struct {
	listener int
	p        *policy.Plan
	pending  []pendingOpen
	// cwd is the init's directory (O_PATH), to come back to after a bind
	// made relative to another one (this thread's own: CLONE_FS
	// unshared); -1: binds to a path are refused.
	cwd int
	// lock is the creation lock (creationLock), -1 without deny globs.
	lock int
}

// pendingOpen is an O_CREAT open of an existing FIFO for writing that has
// no reader yet: the kernel would wait; the supervisor retries it between
// notifications rather than block them all.
type pendingOpen struct {
	id    uint64
	dir   int
	name  string
	flags int
}

// serve handles notifications until the listener fails (every command
// process gone). It runs on the init's locked thread.
func (s *supervisor) serve() {
	// The pending opens are retried every 5 ms, also while notifications
	// keep coming (a poll that never times out would starve them).
	var retried time.Time
	for {
		timeout := -1
		if len(s.pending) > 0 {
			timeout = 5
			if time.Since(retried) >= 5*time.Millisecond {
				s.retryPending()
				retried = time.Now()
				continue
			}
		}
		fds := []unix.PollFd{{Fd: int32(s.listener), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if n == 0 {
			continue // the retry is due
		}
		if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 && fds[0].Revents&unix.POLLIN == 0 {
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
		fd, errno, pend := s.handle(&req)
		if pend != nil {
			pend.id = req.ID
			s.pending = append(s.pending, *pend)
			continue
		}
		s.answer(req.ID, fd, errno)
	}
}

// answer completes notification id: with fd installed in the target (the
// syscall's result) when fd >= 0 (closed here), else with errno (0: the
// call returns 0). An answer to a notification gone meanwhile (the target
// was interrupted or died) fails with ENOENT: nothing to do.
func (s *supervisor) answer(id uint64, fd fdResult, errno unix.Errno) {
	if fd.fd >= 0 {
		add := seccompAddfd{ID: id, Flags: unix.SECCOMP_ADDFD_FLAG_SEND, Srcfd: uint32(fd.fd)}
		if fd.cloexec {
			add.NewfdFlags = unix.O_CLOEXEC
		}
		e := notifIoctl(s.listener, ioctlNotifAddfd, &add)
		unix.Close(fd.fd)
		if e == 0 || e == unix.ENOENT {
			return
		}
		errno = e // fail closed: the call fails with the reason
	}
	resp := seccompResp{ID: id}
	if errno != 0 {
		resp.Error = -int32(errno)
	}
	_ = notifIoctl(s.listener, unix.SECCOMP_IOCTL_NOTIF_SEND, &resp)
}

func (s *supervisor) idValid(id uint64) bool {
	return notifIoctl(s.listener, ioctlNotifIDValid, &id) == 0
}

func (s *supervisor) retryPending() {
	keep := s.pending[:0]
	for _, po := range s.pending {
		if !s.idValid(po.id) { // interrupted or gone: the kernel asks again
			unix.Close(po.dir)
			continue
		}
		fd, errno, again := openFIFO(po.dir, po.name, po.flags)
		if again {
			keep = append(keep, po)
			continue
		}
		unix.Close(po.dir)
		s.answer(po.id, fdResult{fd, po.flags&unix.O_CLOEXEC != 0}, errno)
	}
	s.pending = keep
}

// fdResult is a descriptor to install in the target (-1 for none).
type fdResult struct {
	fd      int
	cloexec bool
}

var noFD = fdResult{fd: -1}

// call is a notification decoded: which operation, on which paths.
type call struct {
	op            string // open, mkdir, mknod, link, symlink, rename
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
		return call{op: "open", dirfd: fdOf(a[0]), path: a[1], flags: int(int32(a[2])), mode: uint32(a[3])}, true
	case unix.SYS_OPENAT2:
		return call{op: "open", dirfd: fdOf(a[0]), path: a[1], how: a[2], howSize: a[3]}, true
	case unix.SYS_MKDIRAT:
		return call{op: "mkdir", dirfd: fdOf(a[0]), path: a[1], mode: uint32(a[2])}, true
	case unix.SYS_MKNODAT:
		return call{op: "mknod", dirfd: fdOf(a[0]), path: a[1], mode: uint32(a[2]), dev: a[3]}, true
	case unix.SYS_LINKAT:
		return call{op: "link", dirfd: fdOf(a[0]), path: a[1], dirfd2: fdOf(a[2]), path2: a[3], flags: int(int32(a[4]))}, true
	case unix.SYS_SYMLINKAT:
		return call{op: "symlink", path: a[0], dirfd2: fdOf(a[1]), path2: a[2]}, true
	case unix.SYS_RENAMEAT:
		return call{op: "rename", dirfd: fdOf(a[0]), path: a[1], dirfd2: fdOf(a[2]), path2: a[3]}, true
	case unix.SYS_BIND:
		return call{op: "bind", sock: fdOf(a[0]), addr: a[1], addrLen: int(int32(uint32(a[2])))}, true
	case unix.SYS_RENAMEAT2:
		return call{op: "rename", dirfd: fdOf(a[0]), path: a[1], dirfd2: fdOf(a[2]), path2: a[3], flags: int(int32(a[4]))}, true
	}
	cwd := unix.AT_FDCWD
	for name, lnr := range legacyCreate {
		if lnr != nr {
			continue
		}
		switch name {
		case "open":
			return call{op: "open", dirfd: cwd, path: a[0], flags: int(int32(a[1])), mode: uint32(a[2])}, true
		case "creat":
			return call{op: "open", dirfd: cwd, path: a[0], flags: unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC, mode: uint32(a[1])}, true
		case "mkdir":
			return call{op: "mkdir", dirfd: cwd, path: a[0], mode: uint32(a[1])}, true
		case "mknod":
			return call{op: "mknod", dirfd: cwd, path: a[0], mode: uint32(a[1]), dev: a[2]}, true
		case "link":
			return call{op: "link", dirfd: cwd, path: a[0], dirfd2: cwd, path2: a[1]}, true
		case "symlink":
			return call{op: "symlink", path: a[0], dirfd2: cwd, path2: a[1]}, true
		case "rename":
			return call{op: "rename", dirfd: cwd, path: a[0], dirfd2: cwd, path2: a[1]}, true
		}
	}
	return call{}, false
}

// handle does one notification's call; every failure is an errno (fail
// closed), never a continue.
func (s *supervisor) handle(req *seccompNotif) (fdResult, unix.Errno, *pendingOpen) {
	c, ok := decodeCall(req)
	if !ok || req.Arch != seccompArch {
		return noFD, unix.ENOSYS, nil
	}
	t, errno := openTarget(int(req.Pid))
	if errno != 0 {
		return noFD, errno, nil
	}
	defer t.close()
	if c.op == "bind" {
		unlock, errno := lockCreation(s.lock, false)
		if errno != 0 {
			return noFD, errno, nil
		}
		defer unlock()
		return noFD, s.bind(t, c, req.ID), nil
	}
	// Read everything from the target's memory first, then check that the
	// notification still stands (the tid was not reused: /proc/TID is the
	// notifying task), then act on the copies only.
	var p1, p2 string
	var how unix.OpenHow
	if c.op == "open" && c.how != 0 {
		if errno = t.readHow(c.how, c.howSize, &how); errno != 0 {
			return noFD, errno, nil
		}
		c.flags, c.mode = int(how.Flags), uint32(how.Mode)
		// openat2 refuses what openat ignores: a mode with bits beyond
		// 07777, or one without O_CREAT or O_TMPFILE.
		if how.Flags>>32 != 0 || how.Mode&^0o7777 != 0 ||
			(how.Mode != 0 && how.Flags&(unix.O_CREAT|(unix.O_TMPFILE&^unix.O_DIRECTORY)) == 0) {
			return noFD, unix.EINVAL, nil
		}
		// No set-user-ID or set-group-ID file (the other filter checks
		// the modes of every other call).
		if how.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			return noFD, unix.EPERM, nil
		}
	}
	if p1, errno = t.readPath(c.path); errno != 0 {
		return noFD, errno, nil
	}
	if c.path2 != 0 {
		if p2, errno = t.readPath(c.path2); errno != 0 {
			return noFD, errno, nil
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
	if c.op != "symlink" {
		if base1, errno = t.base(c.dirfd, p1, c.op == "link" && c.flags&unix.AT_EMPTY_PATH != 0); errno != 0 {
			return noFD, errno, nil
		}
	}
	if c.path2 != 0 {
		if base2, errno = t.base(c.dirfd2, p2, false); errno != 0 {
			return noFD, errno, nil
		}
	}
	if !s.idValid(req.ID) {
		return noFD, unix.ENOENT, nil
	}
	// From the check of a new name to its creation, no supervised rename
	// (of any sandbox, of any server) may move a directory on its path;
	// a rename, walked and done, excludes every creation.
	unlock, errno := lockCreation(s.lock, c.op == "rename")
	if errno != 0 {
		return noFD, errno, nil
	}
	defer unlock()
	unix.Umask(t.umask) // the target's, for what the kernel makes here
	switch c.op {
	case "open":
		fd, errno, pend := s.open(t, c, base1, p1, how)
		if fd.fd >= 0 && inSupervisor(fd.fd) {
			// Reopened through a descriptor of the command that names a
			// file of the supervisor (an O_PATH one on /proc/1/mem).
			unix.Close(fd.fd)
			return noFD, unix.EACCES, nil
		}
		return fd, errno, pend
	case "mkdir", "mknod", "symlink":
		dir, name, slash, errno := t.walkParent(base1Or2(c, base1, base2), pathOf(c, p1, p2))
		if errno != 0 {
			return noFD, errno, nil
		}
		defer unix.Close(dir)
		if errno := s.checkNew(dir, name); errno != 0 {
			return noFD, errno, nil
		}
		var err error
		switch c.op {
		case "mkdir":
			err = unix.Mkdirat(dir, name, c.mode)
		case "mknod":
			if slash {
				return noFD, existsErr(dir, name, unix.ENOENT), nil
			}
			err = unix.Mknodat(dir, name, c.mode, int(c.dev))
		case "symlink":
			if slash {
				return noFD, existsErr(dir, name, unix.ENOENT), nil
			}
			if errno := s.checkSymlink(t, dir, name, p1); errno != 0 {
				return noFD, errno, nil
			}
			err = unix.Symlinkat(p1, dir, name)
		}
		return noFD, toErrno(err), nil
	case "link":
		return noFD, s.link(t, base1, p1, base2, p2, c.flags), nil
	case "rename":
		return noFD, s.rename(t, base1, p1, base2, p2, c.flags), nil
	}
	return noFD, unix.ENOSYS, nil
}

func base1Or2(c call, b1, b2 int) int {
	if c.op == "symlink" {
		return b2
	}
	return b1
}

func pathOf(c call, p1, p2 string) string {
	if c.op == "symlink" {
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

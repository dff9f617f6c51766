package sandbox

import (
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The open family done in the command's place: creating opens (checked
// against the deny globs), plain opens through the supervisor, FIFOs.

// open is the open family: openat2 without O_CREAT, or a creating open.
func (s *supervisor) open(t *target, c call, base int, p string, how unix.OpenHow) reply {
	if c.flags&unix.O_CREAT != 0 && c.flags&(unix.O_TMPFILE&^unix.O_DIRECTORY) != 0 {
		return replyErrno(unix.EINVAL)
	}
	if c.how != 0 && c.flags&unix.O_CREAT == 0 {
		// openat2 without O_CREAT creates nothing: done as asked,
		// from a directory resolved here (for /proc/self).
		return s.openPlain(t, base, p, how)
	}
	return s.openCreate(t, base, p, c.flags, c.mode, how.Resolve)
}

// checkNew refuses a new name in dir that a deny glob matches (or a path
// in a denied directory); EACCES when dir cannot be named (fail closed).
func (s *supervisor) checkNew(dir int, name string) unix.Errno {
	if name == "." || name == ".." {
		return 0 // names nothing new
	}
	d, ok := realDir(dir)
	if !ok {
		return unix.EACCES
	}
	if s.p.DeniedByGlob(filepath.Join(d, name)) {
		return unix.EACCES
	}
	return 0
}

// openCreate is open with O_CREAT: a missing name is checked and created
// with O_EXCL (a name that appears meanwhile is looked at again); an
// existing one is opened without O_CREAT (one that goes meanwhile is looked
// at again); a symlink is followed as the kernel would (unless O_EXCL or
// O_NOFOLLOW), so that a dangling one cannot create a denied target.
func (s *supervisor) openCreate(t *target, base int, p string, flags int, mode uint32, resolve uint64) reply {
	cloexec := flags&unix.O_CLOEXEC != 0
	flags |= unix.O_CLOEXEC
	var dir int
	var name string
	var slash bool
	var errno unix.Errno
	if resolve != 0 {
		// openat2's resolve rules: the directory is found by the kernel
		// under them; a final symlink is not followed here.
		d, n := filepath.Split(p)
		if n == "" {
			return replyErrno(unix.EISDIR)
		}
		if d == "" {
			d = "."
		}
		fd, errno := openParent2(base, d, resolve)
		if errno != 0 {
			return replyErrno(errno)
		}
		dir, name = fd, n
	} else if dir, name, slash, errno = t.walkParent(base, p); errno != 0 {
		return replyErrno(errno)
	}
	defer func() { unix.Close(dir) }()
	if slash {
		return replyErrno(unix.EISDIR)
	}
	hops := 0
	for try := 0; try < 100; try++ {
		var st unix.Stat_t
		err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err == unix.ENOENT:
			if errno := s.checkNew(dir, name); errno != 0 {
				return replyErrno(errno)
			}
			fd, err := unix.Openat(dir, name, flags|unix.O_EXCL|unix.O_NOFOLLOW, mode)
			if err == unix.EEXIST && flags&unix.O_EXCL == 0 {
				continue // made meanwhile (by the host): look again
			}
			if err != nil {
				return replyErrno(toErrno(err))
			}
			return install(fd, cloexec)
		case err != nil:
			return replyErrno(toErrno(err))
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			if flags&unix.O_EXCL != 0 {
				return replyErrno(unix.EEXIST)
			}
			if flags&unix.O_NOFOLLOW != 0 || resolve&unix.RESOLVE_NO_SYMLINKS != 0 {
				return replyErrno(unix.ELOOP)
			}
			if resolve != 0 {
				return replyErrno(unix.EACCES) // not emulated: refused
			}
			if hops++; hops > maxSymlinkHops {
				return replyErrno(unix.ELOOP)
			}
			rest, magic, errno := t.readLink(dir, name)
			if errno != 0 {
				return replyErrno(errno)
			}
			if magic {
				// A procfs link of the target names an existing object:
				// nothing is created through it.
				r, _ := s.openAt(dir, name, openArgs{flags: flags &^ (unix.O_CREAT | unix.O_EXCL)}, cloexec)
				return r
			}
			nd, nn, nslash, errno := t.walkLink(dir, rest)
			if errno != 0 {
				return replyErrno(errno)
			}
			unix.Close(dir)
			dir, name = nd, nn
			if nslash {
				return replyErrno(unix.EISDIR)
			}
		default:
			if flags&unix.O_EXCL != 0 {
				return replyErrno(unix.EEXIST)
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return replyErrno(unix.EISDIR)
			}
			r, errno := s.openAt(dir, name, openArgs{flags: (flags &^ unix.O_CREAT) | unix.O_NOFOLLOW}, cloexec)
			if (errno == unix.ENOENT || errno == unix.ELOOP) && flags&unix.O_NOFOLLOW == 0 {
				continue // removed or replaced meanwhile: look again
			}
			return r
		}
	}
	return replyErrno(unix.EAGAIN)
}

// openParent2 opens directory d from base under openat2's resolve rules
// (the kernel's walk: its /proc/self is the supervisor's, hence the check).
func openParent2(base int, d string, resolve uint64) (int, unix.Errno) {
	fd, err := unix.Openat2(base, d, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return -1, toErrno(err)
	}
	if inSupervisor(fd) {
		unix.Close(fd)
		return -1, unix.EACCES
	}
	return fd, 0
}

// openPlain is openat2 without O_CREAT: the directory is resolved here
// (with resolve rules, by the kernel and checked), the last component
// opened as asked. A final symlink is followed here too, never by the
// kernel's walk for the supervisor, whose /proc/self is the init's (its
// descriptors, the target's memory); with resolve rules it is refused
// (not emulated), as for a creating open.
func (s *supervisor) openPlain(t *target, base int, p string, how unix.OpenHow) reply {
	var dir int
	var name string
	var errno unix.Errno
	if how.Resolve != 0 {
		d, n := filepath.Split(p)
		if n == "" {
			n = "."
		}
		if d == "" {
			d = "."
		}
		if dir, errno = openParent2(base, d, how.Resolve); errno != 0 {
			return replyErrno(errno)
		}
		name = n
	} else if dir, name, _, errno = t.walkParent(base, p); errno != 0 {
		return replyErrno(errno)
	}
	defer func() { unix.Close(dir) }()
	cloexec := how.Flags&unix.O_CLOEXEC != 0
	flags := how.Flags | unix.O_CLOEXEC
	// A trailing slash follows a final symlink whatever O_NOFOLLOW says,
	// and wants a directory: opened without it, O_DIRECTORY says the same.
	slash := strings.HasSuffix(p, "/")
	if slash {
		flags |= unix.O_DIRECTORY
	}
	follow := how.Flags&unix.O_NOFOLLOW == 0 || slash
	hops := 0
	for try := 0; try < 100; try++ {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK && follow {
			if how.Resolve&unix.RESOLVE_NO_SYMLINKS != 0 {
				return replyErrno(unix.ELOOP)
			}
			if how.Resolve != 0 {
				return replyErrno(unix.EACCES) // not emulated: refused
			}
			if hops++; hops > maxSymlinkHops {
				return replyErrno(unix.ELOOP)
			}
			rest, magic, errno := t.readLink(dir, name)
			if errno != 0 {
				return replyErrno(errno)
			}
			if magic {
				// A procfs link in a directory of the target (never the
				// init's: walkParent refuses those) names its object.
				r, _ := s.openAt(dir, name, openArgs{two: true, how: unix.OpenHow{Flags: flags, Mode: how.Mode}}, cloexec)
				return r
			}
			nd, nn, nslash, errno := t.walkLink(dir, rest)
			if errno != 0 {
				return replyErrno(errno)
			}
			unix.Close(dir)
			dir, name = nd, nn
			if nslash {
				flags |= unix.O_DIRECTORY
			}
			continue
		}
		// Not a symlink (or not to be followed): O_NOFOLLOW keeps the
		// kernel from following one put there meanwhile.
		r, errno := s.openAt(dir, name, openArgs{two: true, how: unix.OpenHow{Flags: flags | unix.O_NOFOLLOW, Mode: how.Mode, Resolve: how.Resolve}}, cloexec)
		if errno == unix.ELOOP && follow {
			continue // replaced by a symlink meanwhile: look again
		}
		return r
	}
	return replyErrno(unix.EAGAIN)
}

// openAt is openNoWait as a reply (the descriptor, the failure, or later)
// and the open's errno, for a caller that looks again on some.
func (s *supervisor) openAt(dir int, name string, a openArgs, cloexec bool) (reply, unix.Errno) {
	a.full = s.full
	fd, errno, wait := openNoWait(dir, name, a)
	if wait != nil {
		wait.cloexec = cloexec
		return later(wait), 0
	}
	if errno != 0 {
		return replyErrno(errno), errno
	}
	return install(fd, cloexec), 0
}

// openNoWait opens dir/name as a asks, but never waits: every open done
// here in a command's place serves all its other processes' calls too, and
// a FIFO with no partner (or a device waiting for a carrier) would block
// them all. So O_NONBLOCK is added, then cleared unless asked for. An
// open the kernel would make wait comes back as a wait (non-nil) for the
// supervisor to complete between notifications (pendingOpen): a FIFO's
// writer with no reader yet, an open held up by a lease, a FIFO's reader
// with no writer yet (its non-blocking reader kept until one comes:
// fifoReady).
//
// The kernel's open waits on the inode its walk found: a writer or an
// open held up by a lease keeps that inode (an O_PATH descriptor) and is
// retried through it (pendingOpen.retry), whatever becomes of the name
// meanwhile (removed, replaced by another file or a symlink), as the
// kernel's would complete on the inode it waits on.
func openNoWait(dir int, name string, a openArgs) (int, unix.Errno, *pendingOpen) {
	for try := 0; ; try++ {
		fd, errno, w, rd := attempt(dir, name, a)
		if w == noWait {
			return fd, errno, rd
		}
		obj, perr := a.pin(dir, name)
		if perr != 0 {
			return -1, perr, nil // gone meanwhile: as an open a moment later
		}
		if w.holds(obj) {
			po := &pendingOpen{obj: obj, args: a.reopen()}
			var st unix.Stat_t
			if w == waitNoReader && unix.Fstat(obj, &st) == nil {
				po.fifo = fileID{st.Dev, st.Ino}
			}
			return -1, 0, po
		}
		// Not what made the open wait: replaced meanwhile, look again.
		unix.Close(obj)
		if try == 10 {
			return -1, errno, nil
		}
	}
}

// waitKind is why a non-blocking open did not complete where the
// kernel's blocking one would have waited.
type waitKind uint8

const (
	noWait       waitKind = iota
	waitLease             // EAGAIN: a lease being broken
	waitNoReader          // ENXIO: a FIFO's writer with no reader (if a FIFO)
)

// holds reports whether obj (O_PATH) is a file the kernel would wait on
// for w: a FIFO for a writer, a regular file for a lease.
func (w waitKind) holds(obj int) bool {
	var st unix.Stat_t
	if unix.Fstat(obj, &st) != nil {
		return false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return w == waitNoReader
	case unix.S_IFREG:
		return w == waitLease
	}
	return false
}

// attempt is one open of dir/name as a asks, without waiting: the
// descriptor (O_NONBLOCK cleared unless asked), or the errno, or a wait:
// w (with the errno the open gave) or, for a FIFO's reader, rd.
func attempt(dir int, name string, a openArgs) (fd int, errno unix.Errno, w waitKind, rd *pendingOpen) {
	flags := a.flags
	if a.two {
		flags = int(a.how.Flags)
	}
	if flags&(unix.O_NONBLOCK|unix.O_PATH) != 0 {
		fd, err := a.open(dir, name, 0)
		if err != nil {
			return -1, toErrno(err), noWait, nil
		}
		return fd, 0, noWait, nil
	}
	if a.full && flags&unix.O_ACCMODE == unix.O_RDONLY {
		// No room for another pending open: refused before the open, as
		// a FIFO reader's open wakes the writers waiting for one (then
		// closed, they would get SIGPIPE). Without a descriptor to look
		// with, it is refused too: the open would risk just that.
		if fifo, errno := isFIFO(dir, name, a); fifo || errno != 0 {
			return -1, unix.ENFILE, noWait, nil
		}
	}
	fd, err := a.open(dir, name, unix.O_NONBLOCK)
	switch err {
	case unix.EAGAIN:
		// A lease on the file (F_SETLEASE, an NFS delegation, an SMB
		// oplock) being broken: the kernel answers a non-blocking open
		// at once where it would have made a blocking one wait for the
		// break. Wait as it would, between notifications.
		return -1, unix.EAGAIN, waitLease, nil
	case unix.ENXIO:
		// A FIFO's writer with no reader, or a socket, or a device
		// without its driver (ENXIO as asked): waitKind.holds tells.
		return -1, unix.ENXIO, waitNoReader, nil
	case nil:
	default:
		return -1, toErrno(err), noWait, nil
	}
	if flags&unix.O_ACCMODE == unix.O_RDONLY {
		// A FIFO's reader: the kernel's open waits for a writer (one
		// there already, or one that comes: fifoReady, writersOf). The
		// scan for a silent writer (writersOf) is never done here, under
		// the machine-wide creation lock: the reader waits, its scan due
		// at once, and retryPending does it outside the lock.
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			if !fifoReady(fd) {
				if a.full { // replaced by a FIFO since isFIFO looked
					unix.Close(fd)
					return -1, unix.ENFILE, noWait, nil
				}
				return -1, 0, noWait, newPendingReader(fd, fileID{st.Dev, st.Ino})
			}
		}
	}
	if errno := clearNonblock(fd); errno != 0 {
		// The command did not ask for a non-blocking descriptor; one it
		// writes its output through could fail its writes with EAGAIN.
		unix.Close(fd)
		return -1, errno, noWait, nil
	}
	return fd, 0, noWait, nil
}

// isFIFO reports whether dir/name, as a would open it, is a FIFO; errno
// is EMFILE or ENFILE when there was no descriptor to look with (any
// other failure to look is the open's to tell: a name to create is not
// there yet).
func isFIFO(dir int, name string, a openArgs) (fifo bool, errno unix.Errno) {
	obj, errno := a.pin(dir, name)
	if errno == unix.EMFILE || errno == unix.ENFILE {
		return false, errno
	}
	if errno != 0 {
		return false, 0
	}
	defer unix.Close(obj)
	var st unix.Stat_t
	return unix.Fstat(obj, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO, 0
}

// openArgs is an open done here: openat's flags (an int, as the kernel
// takes them: unknown bits ignored), or openat2's open_how (two).
type openArgs struct {
	flags int
	two   bool
	how   unix.OpenHow
	// full: the supervisor has no room for another pending open
	// (maxPendingOpens); a FIFO's reader that would wait gets ENFILE
	// before anything is opened.
	full bool
}

func (a openArgs) open(dir int, name string, extra int) (int, error) {
	if a.two {
		how := a.how
		how.Flags |= uint64(extra)
		return unix.Openat2(dir, name, &how)
	}
	return unix.Openat(dir, name, a.flags|extra, 0)
}

// pin opens (O_PATH) the file that opening dir/name as a would open: the
// same walk, the same final symlink rule.
func (a openArgs) pin(dir int, name string) (int, unix.Errno) {
	if a.two {
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | a.how.Flags&unix.O_NOFOLLOW, Resolve: a.how.Resolve}
		fd, err := unix.Openat2(dir, name, &how)
		return fd, toErrno(err)
	}
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_CLOEXEC|a.flags&unix.O_NOFOLLOW, 0)
	return fd, toErrno(err)
}

// reopen is a as an open of a pinned file through /proc/self/fd: a magic
// link to follow (no O_NOFOLLOW, no resolve rules), nothing to create.
func (a openArgs) reopen() openArgs {
	const drop = unix.O_NOFOLLOW | unix.O_CREAT | unix.O_EXCL
	if a.two {
		a.how.Flags &^= drop
		a.how.Mode, a.how.Resolve = 0, 0
		return a
	}
	a.flags &^= drop
	return a
}

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
				fd, err := unix.Openat(dir, name, flags&^(unix.O_CREAT|unix.O_EXCL), 0)
				if err != nil {
					return replyErrno(toErrno(err))
				}
				return install(fd, cloexec)
			}
			nd, nn, nslash, errno := t.walkParent(dir, rest.path())
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
			if st.Mode&unix.S_IFMT == unix.S_IFIFO && flags&unix.O_NONBLOCK == 0 {
				fd, errno, again := openFIFO(dir, name, flags)
				if again {
					d, _ := unix.Dup(dir)
					unix.CloseOnExec(d)
					return later(&pendingOpen{dir: d, name: name, flags: flags})
				}
				return reply{fd: fdResult{fd, cloexec}, errno: errno}
			}
			fd, err := unix.Openat(dir, name, (flags&^unix.O_CREAT)|unix.O_NOFOLLOW, 0)
			if (err == unix.ENOENT || err == unix.ELOOP) && flags&unix.O_NOFOLLOW == 0 {
				continue // removed or replaced meanwhile: look again
			}
			if err != nil {
				return replyErrno(toErrno(err))
			}
			return install(fd, cloexec)
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
				fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: flags, Mode: how.Mode})
				if err != nil {
					return replyErrno(toErrno(err))
				}
				return install(fd, cloexec)
			}
			nd, nn, nslash, errno := t.walkParent(dir, rest.path())
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
		fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: flags | unix.O_NOFOLLOW, Mode: how.Mode, Resolve: how.Resolve})
		if err == unix.ELOOP && follow {
			continue // replaced by a symlink meanwhile: look again
		}
		if err != nil {
			return replyErrno(toErrno(err))
		}
		return install(fd, cloexec)
	}
	return replyErrno(unix.EAGAIN)
}

// openFIFO opens an existing FIFO without waiting (again: no reader yet
// for a writer, try later) and makes it blocking as asked.
func openFIFO(dir int, name string, flags int) (int, unix.Errno, bool) {
	fd, err := unix.Openat(dir, name, (flags&^unix.O_CREAT)|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err == unix.ENXIO {
		return -1, 0, true
	}
	if err != nil {
		return -1, toErrno(err), false
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	return fd, 0, false
}

package sandbox

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The supervised task as the supervisor sees it: its memory (paths,
// open_how), its directories and the path walk done in its place.

// target is what the supervisor knows of the task behind a notification.
type target struct {
	tid, tgid int
	umask     int
	mem       int // /proc/TID/mem
	root      int // "/" of the view (the command cannot chroot)
	// The target's /proc/TGID and /proc/TGID/task/TID (O_PATH), what its
	// /proc/self and /proc/thread-self name. Opened by number before the
	// notification's first ID check, which then proves they are the
	// target's; a procfs directory stays its process's (lookups in it fail
	// once it is gone), so the walks done after the last check (act) never
	// look a number up again, which by then could name another process of
	// the sandbox had the target died and its number been reused.
	proc, task int
}

func (t *target) close() {
	for _, fd := range []int{t.mem, t.root, t.proc, t.task} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func openTarget(tid int) (*target, unix.Errno) {
	t := &target{tid: tid, mem: -1, root: -1, proc: -1, task: -1}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return nil, unix.EACCES
	}
	var ok bool
	if t.umask, t.tgid, ok = parseStatus(b); !ok {
		return nil, unix.EACCES
	}
	if t.mem, err = unix.Open("/proc/"+strconv.Itoa(tid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return nil, unix.EACCES
	}
	if t.root, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		t.close()
		return nil, unix.EACCES
	}
	proc := "/proc/" + strconv.Itoa(t.tgid)
	if t.proc, err = unix.Open(proc, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		t.close()
		return nil, unix.EACCES
	}
	if t.task, err = unix.Open(proc+"/task/"+strconv.Itoa(tid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		t.close()
		return nil, unix.EACCES
	}
	return t, 0
}

// parseStatus reads the umask and the thread group id from a
// /proc/PID/status text.
func parseStatus(b []byte) (umask, tgid int, ok bool) {
	umask, tgid = -1, -1
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "Umask":
			if n, err := strconv.ParseUint(v, 8, 32); err == nil && n <= 0o777 {
				umask = int(n)
			}
		case "Tgid":
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				tgid = n
			}
		}
	}
	return umask, tgid, umask >= 0 && tgid > 0
}

// readPath reads a NUL-terminated path of at most PATH_MAX bytes from the
// target's memory, a page at a time (a read past the end of a mapping
// fails).
func (t *target) readPath(addr uint64) (string, unix.Errno) {
	if addr == 0 {
		return "", unix.EFAULT
	}
	var out []byte
	buf := make([]byte, 4096)
	for len(out) < unix.PathMax {
		n := 4096 - int(addr%4096)
		n = min(n, unix.PathMax-len(out))
		m, err := unix.Pread(t.mem, buf[:n], int64(addr))
		if err != nil || m <= 0 {
			return "", unix.EFAULT
		}
		for i := 0; i < m; i++ {
			if buf[i] == 0 {
				return string(append(out, buf[:i]...)), 0
			}
		}
		out = append(out, buf[:m]...)
		addr += uint64(m)
	}
	return "", unix.ENAMETOOLONG
}

func (t *target) readHow(addr, size uint64, how *unix.OpenHow) unix.Errno {
	if size < openHowSize {
		return unix.EINVAL
	}
	if size > 4096 {
		return unix.E2BIG
	}
	b := make([]byte, size)
	if m, err := unix.Pread(t.mem, b, int64(addr)); err != nil || m != len(b) {
		return unix.EFAULT
	}
	for _, x := range b[openHowSize:] {
		if x != 0 {
			return unix.E2BIG
		}
	}
	*how = openHowOf(b)
	return 0
}

// base opens the directory a path is relative to, as the target sees it:
// its root for an absolute path, its cwd for AT_FDCWD, else its
// descriptor dirfd (reopened through /proc, which follows it to the same
// file). emptyOK allows a file that is not a directory (AT_EMPTY_PATH).
func (t *target) base(dirfd int, p string, emptyOK bool) (int, unix.Errno) {
	if strings.HasPrefix(p, "/") {
		fd, err := unix.Dup(t.root)
		if err != nil {
			return -1, unix.EMFILE
		}
		unix.CloseOnExec(fd)
		return fd, 0
	}
	var link string
	if dirfd == unix.AT_FDCWD {
		link = "/proc/" + strconv.Itoa(t.tid) + "/cwd"
	} else if dirfd >= 0 {
		link = "/proc/" + strconv.Itoa(t.tid) + "/fd/" + strconv.Itoa(dirfd)
	} else {
		return -1, unix.EBADF
	}
	fd, err := unix.Open(link, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return -1, unix.EBADF
		}
		return -1, unix.EACCES
	}
	if !emptyOK || p != "" {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return -1, unix.ENOTDIR
		}
	}
	return fd, 0
}

// walkParent resolves p from base as the kernel would for the target, but
// its last component: every symlink on the way is followed here, with the
// target's /proc/self (procfs's self and thread-self links name the
// caller). It returns the last directory (O_PATH), the last component
// ("." for "/") and whether p ended in a slash.
func (t *target) walkParent(base int, p string) (int, string, bool, unix.Errno) {
	if p == "" {
		return -1, "", false, unix.ENOENT
	}
	slash := strings.HasSuffix(p, "/")
	comps := splitComps(p)
	dir, err := unix.Dup(base)
	if err != nil {
		return -1, "", false, unix.EMFILE
	}
	unix.CloseOnExec(dir)
	if strings.HasPrefix(p, "/") {
		unix.Close(dir)
		dir, _ = unix.Dup(t.root)
		unix.CloseOnExec(dir)
	}
	if inSupervisor(dir) {
		unix.Close(dir)
		return -1, "", false, unix.EACCES
	}
	if len(comps) == 0 {
		return dir, ".", slash, 0
	}
	hops := 0
	for len(comps) > 1 {
		c := comps[0]
		comps = comps[1:]
		next, rest, errno := t.step(dir, c, &hops)
		if errno != 0 {
			unix.Close(dir)
			return -1, "", false, errno
		}
		if next >= 0 {
			unix.Close(dir)
			dir = next
		}
		if rest != nil {
			// A symlink: its target's components come first.
			if rest.pinned {
				unix.Close(dir)
				if dir, errno = pinnedDir(rest.from); errno != 0 {
					return -1, "", false, errno
				}
			} else if rest.abs {
				unix.Close(dir)
				dir, _ = unix.Dup(t.root)
				unix.CloseOnExec(dir)
			}
			comps = append(rest.comps, comps...)
			if len(comps) == 0 {
				comps = []string{"."}
			}
		}
	}
	return dir, comps[0], slash, 0
}

type linkRest struct {
	abs   bool
	comps []string
	// pinned: procfs's self or thread-self, walked on from the target's
	// own directory (from: target.proc or target.task), not by number.
	pinned bool
	from   int
}

// walkLink resolves a final symlink's rest from dir (its directory) as
// walkParent does.
func (t *target) walkLink(dir int, rest *linkRest) (int, string, bool, unix.Errno) {
	if rest.pinned {
		return t.walkParent(rest.from, ".")
	}
	return t.walkParent(dir, rest.path())
}

// pinnedDir is a copy of the target's own procfs directory fd (never the
// supervisor's: checked all the same).
func pinnedDir(fd int) (int, unix.Errno) {
	d, err := unix.Dup(fd)
	if err != nil {
		return -1, unix.EMFILE
	}
	unix.CloseOnExec(d)
	if inSupervisor(d) {
		unix.Close(d)
		return -1, unix.EACCES
	}
	return d, 0
}

// path is the rest of the walk as a path (absolute when the link was).
func (l *linkRest) path() string {
	p := strings.Join(l.comps, "/")
	if l.abs {
		p = "/" + p
	}
	return p
}

// step walks one intermediate component c from dir: a new directory, or a
// symlink's target to walk instead.
func (t *target) step(dir int, c string, hops *int) (int, *linkRest, unix.Errno) {
	fd, err := unix.Openat(dir, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, toErrno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, toErrno(err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if inSupervisor(fd) {
			unix.Close(fd)
			return -1, nil, unix.EACCES
		}
		return fd, nil, 0
	case unix.S_IFLNK:
		unix.Close(fd)
		if *hops++; *hops > maxSymlinkHops {
			return -1, nil, unix.ELOOP
		}
		rest, magic, errno := t.readLink(dir, c)
		if errno != 0 {
			return -1, nil, errno
		}
		if magic {
			// A procfs link of the target (fd/N, cwd, root): the kernel
			// follows it to the same object for anyone allowed to.
			fd, err := unix.Openat(dir, c, unix.O_PATH|unix.O_CLOEXEC, 0)
			if err != nil {
				return -1, nil, toErrno(err)
			}
			if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				unix.Close(fd)
				return -1, nil, unix.ENOTDIR
			}
			if inSupervisor(fd) {
				unix.Close(fd)
				return -1, nil, unix.EACCES
			}
			return fd, nil, 0
		}
		return -1, rest, 0
	}
	unix.Close(fd)
	return -1, nil, unix.ENOTDIR
}

// readLink reads the symlink dir/c as the target would follow it: procfs's
// self and thread-self name the target, other procfs links are magic
// (followed by the kernel, never by their text).
func (t *target) readLink(dir int, c string) (*linkRest, bool, unix.Errno) {
	var fs unix.Statfs_t
	if unix.Fstatfs(dir, &fs) == nil && fs.Type == unix.PROC_SUPER_MAGIC {
		var st unix.Stat_t
		if unix.Fstat(dir, &st) == nil && st.Ino == 1 && (c == "self" || c == "thread-self") {
			if c == "thread-self" {
				return &linkRest{pinned: true, from: t.task}, false, 0
			}
			return &linkRest{pinned: true, from: t.proc}, false, 0
		}
		return nil, true, 0
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, c, buf)
	if err != nil {
		return nil, false, toErrno(err)
	}
	s := string(buf[:n])
	return &linkRest{abs: strings.HasPrefix(s, "/"), comps: splitComps(s)}, false, 0
}

// splitComps splits a path into its components, dropping empty ones and
// "." (kept as the only one of a path that names its start: "." or "/").
func splitComps(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	if len(out) == 0 && strings.Trim(p, "/") != "" {
		out = []string{"."}
	}
	return out
}

// inSupervisor reports whether fd is in a procfs directory of the init's
// own process (/proc/1, its tasks): the supervisor may open its own memory,
// descriptors (the listener) and the like where the command may not, so it
// never goes there for the command. Fail closed: true when unsure.
func inSupervisor(fd int) bool {
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) != nil {
		return true
	}
	if fs.Type != unix.PROC_SUPER_MAGIC {
		return false
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	if err != nil {
		return true
	}
	p := string(buf[:n])
	if p == "/proc" {
		return false
	}
	rest, ok := strings.CutPrefix(p, "/proc/")
	if !ok {
		return true
	}
	first, _, _ := strings.Cut(rest, "/")
	pid, err := strconv.Atoi(first)
	if err != nil {
		return false // /proc/sys and the like: the same for both
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return true
	}
	_, tgid, ok := parseStatus(b)
	return !ok || tgid == os.Getpid()
}

// realDir is dir's path in the view (= on the host: the view mounts every
// path where it is on the host).
func realDir(dir int) (string, bool) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(dir), buf)
	if err != nil {
		return "", false
	}
	s := string(buf[:n])
	return s, strings.HasPrefix(s, "/") && !strings.HasSuffix(s, " (deleted)")
}

// openFollow opens (O_PATH) what the symlink dir/name leads to, as the
// target would follow it.
func (t *target) openFollow(dir int, name string) (int, unix.Errno) {
	hops := 0
	d, err := unix.Dup(dir)
	if err != nil {
		return -1, unix.EMFILE
	}
	unix.CloseOnExec(d)
	for {
		var st unix.Stat_t
		if err := unix.Fstatat(d, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Close(d)
			return -1, toErrno(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			fd, err := unix.Openat(d, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(d)
			return fd, toErrno(err)
		}
		if hops++; hops > maxSymlinkHops {
			unix.Close(d)
			return -1, unix.ELOOP
		}
		rest, magic, errno := t.readLink(d, name)
		if errno != 0 {
			unix.Close(d)
			return -1, errno
		}
		if magic {
			fd, err := unix.Openat(d, name, unix.O_PATH|unix.O_CLOEXEC, 0)
			unix.Close(d)
			return fd, toErrno(err)
		}
		nd, nn, _, errno := t.walkLink(d, rest)
		unix.Close(d)
		if errno != 0 {
			return -1, errno
		}
		d, name = nd, nn
	}
}

package sandbox

import (
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// The other path-creating calls done in the command's place: link,
// rename (with the walk of a moved directory) and symlink checks.

// link is linkat: the new name is checked; AT_EMPTY_PATH links the
// target's descriptor through /proc (the same file).
func (s *supervisor) link(t *target, base1 int, p1 string, base2 int, p2 string, flags int) unix.Errno {
	if flags&^(unix.AT_SYMLINK_FOLLOW|unix.AT_EMPTY_PATH) != 0 {
		return unix.EINVAL
	}
	nd, nn, nslash, errno := t.walkParent(base2, p2)
	if errno != 0 {
		return errno
	}
	defer unix.Close(nd)
	if errno := s.checkNew(nd, nn); errno != 0 {
		return errno
	}
	if nslash {
		return existsErr(nd, nn, unix.ENOENT)
	}
	if p1 == "" && flags&unix.AT_EMPTY_PATH != 0 {
		src := "/proc/self/fd/" + strconv.Itoa(base1)
		return toErrno(unix.Linkat(unix.AT_FDCWD, src, nd, nn, unix.AT_SYMLINK_FOLLOW))
	}
	od, on, _, errno := t.walkParent(base1, p1)
	if errno != 0 {
		return errno
	}
	defer unix.Close(od)
	if flags&unix.AT_SYMLINK_FOLLOW == 0 {
		// A hard link to a symlink is a symlink at the new name.
		if errno := s.checkMovedSymlink(t, od, on, nd, nn); errno != 0 {
			return errno
		}
	}
	if flags&unix.AT_SYMLINK_FOLLOW != 0 {
		// Resolve a final symlink here too (procfs's self is the target's).
		var st unix.Stat_t
		if unix.Fstatat(od, on, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			fd, errno := t.openFollow(od, on)
			if errno != 0 {
				return errno
			}
			defer unix.Close(fd)
			return toErrno(unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), nd, nn, unix.AT_SYMLINK_FOLLOW))
		}
	}
	return toErrno(unix.Linkat(od, on, nd, nn, 0))
}

// rename is renameat2: the new name is checked, and so is every path a
// moved directory's descendants get; with RENAME_EXCHANGE, both ways.
func (s *supervisor) rename(t *target, base1 int, p1 string, base2 int, p2 string, flags int) unix.Errno {
	od, on, _, errno := t.walkParent(base1, p1)
	if errno != 0 {
		return errno
	}
	defer unix.Close(od)
	nd, nn, _, errno := t.walkParent(base2, p2)
	if errno != 0 {
		return errno
	}
	defer unix.Close(nd)
	if errno := s.checkMove(od, on, nd, nn); errno != 0 {
		return errno
	}
	if errno := s.checkMovedSymlink(t, od, on, nd, nn); errno != 0 {
		return errno
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		if errno := s.checkMove(nd, nn, od, on); errno != 0 {
			return errno
		}
		if errno := s.checkMovedSymlink(t, nd, nn, od, on); errno != 0 {
			return errno
		}
	}
	return toErrno(unix.Renameat2(od, on, nd, nn, uint(flags)))
}

// checkMove checks the paths that moving fromDir/from to toDir/to makes.
func (s *supervisor) checkMove(fromDir int, from string, toDir int, to string) unix.Errno {
	if errno := s.checkNew(toDir, to); errno != 0 {
		return errno
	}
	if to == "." || to == ".." {
		return 0
	}
	d, ok := realDir(toDir)
	if !ok {
		return unix.EACCES
	}
	fd, err := unix.Openat(fromDir, from, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOTDIR || err == unix.ELOOP || err == unix.ENOENT {
		return 0 // not a directory: nothing moves below it
	}
	if err != nil {
		return unix.EACCES // cannot be walked: refused
	}
	count := 0
	if !s.walkClean(fd, filepath.Join(d, to), 0, &count) {
		return unix.EACCES
	}
	return 0
}

// walkClean reports whether no entry under the directory fd (closed here),
// named newPath after the move, matches a deny glob or is a mount point,
// within the bounds.
func (s *supervisor) walkClean(fd int, newPath string, depth int, count *int) bool {
	defer unix.Close(fd)
	if depth > renameWalkDepth {
		return false
	}
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return false
		}
		if n == 0 {
			return true
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			if *count++; *count > renameWalkMax {
				return false
			}
			child := newPath + "/" + name
			if s.p.DeniedByGlob(child) || mountRoot(fd, name) {
				return false
			}
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == unix.ENOTDIR || err == unix.ELOOP || err == unix.ENOENT {
				continue
			}
			if err != nil || !s.walkClean(sub, child, depth+1, count) {
				return false
			}
		}
	}
}

// checkMovedSymlink is checkSymlink for fromDir/from when it is a symlink
// that a rename or a link puts at toDir/to.
func (s *supervisor) checkMovedSymlink(t *target, fromDir int, from string, toDir int, to string) unix.Errno {
	var st unix.Stat_t
	if unix.Fstatat(fromDir, from, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return 0 // not a symlink (or gone: the call fails by itself)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fromDir, from, buf)
	if err != nil {
		return unix.EACCES
	}
	return s.checkSymlink(t, toDir, to, string(buf[:n]))
}

// checkSymlink refuses a symlink dir/name -> text that would give a path a
// deny glob matches to a place the glob does not cover. Deny globs are
// checked on canonical paths; a symlink at W/cfg to a directory in another
// writable root T would let the command make T/x/.env, which W/**/*.env
// does not match, and leave it at W/cfg/.env, which it does. So a symlink
// inside a glob's fixed prefix must lead (now) inside that prefix too, or
// to a file that cannot be replaced (on a read-only mount); a directory
// outside (even read-only: a writable root may be below it), a missing
// target outside, or anything unresolvable is refused.
func (s *supervisor) checkSymlink(t *target, dir int, name, text string) unix.Errno {
	d, ok := realDir(dir)
	if !ok {
		return unix.EACCES
	}
	at := filepath.Join(d, name)
	var scopes []string
	for _, g := range s.p.DenyGlobs {
		if f := fixedPrefix(g); policy.Within(at, f) {
			scopes = append(scopes, f)
		}
	}
	if len(scopes) == 0 {
		return 0
	}
	// procfs links change with the process (fd/N, cwd, root): refused.
	if policy.Within(filepath.Join(d, text), "/proc") || (filepath.IsAbs(text) && policy.Within(filepath.Clean(text), "/proc")) {
		return unix.EACCES
	}
	td, tn, _, errno := t.walkParent(dir, text)
	if errno != 0 {
		return unix.EACCES
	}
	defer unix.Close(td)
	var st unix.Stat_t
	var where string
	if err := unix.Fstatat(td, tn, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
		// Dangling: whatever is made there later is checked where it is.
		td2, ok := realDir(td)
		if !ok {
			return unix.EACCES
		}
		var fs unix.Statfs_t
		if unix.Fstatfs(td, &fs) == nil && fs.Flags&unix.ST_RDONLY != 0 {
			return 0 // it can never be made
		}
		where = filepath.Join(td2, tn)
	} else {
		fd, errno := t.openFollow(td, tn)
		if errno != 0 {
			return unix.EACCES
		}
		defer unix.Close(fd)
		if where, ok = realDir(fd); !ok || unix.Fstat(fd, &st) != nil {
			return unix.EACCES
		}
		var fs unix.Statfs_t
		if st.Mode&unix.S_IFMT != unix.S_IFDIR && unix.Fstatfs(fd, &fs) == nil && fs.Flags&unix.ST_RDONLY != 0 {
			return 0 // a file that stays what it is
		}
	}
	for _, f := range scopes {
		if !policy.Within(where, f) {
			return unix.EACCES
		}
	}
	return 0
}

// fixedPrefix is the directory of a glob's components before its first
// one with a wildcard (an escape counts as one: shorter is safer).
func fixedPrefix(g string) string {
	comps := policy.SplitPath(g)
	n := 0
	for n < len(comps) && !policy.HasMeta(comps[n]) {
		n++
	}
	return "/" + strings.Join(comps[:n], "/")
}

// mountRoot reports whether dir/name is a mount point (true when unsure):
// the kernel moves a mount along with a directory renamed above it, which
// would take a mask or a read-only carve-out off the path the policy names
// and let that path be made anew.
func mountRoot(dir int, name string) bool {
	var stx unix.Statx_t
	if unix.Statx(dir, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_TYPE, &stx) != nil {
		return true
	}
	return stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

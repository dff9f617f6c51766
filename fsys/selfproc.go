package fsys

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox/policy"
)

// The server never serves itself. A file this process opened for a client
// is refused when it is one of the server's secrets (policy.Secret: its
// token or JWT secret file, its TLS key, a file an EXEC_SERVER_*_FILE
// setting names), or when it lies in the server's own /proc directory
// (/proc/self, /proc/thread-self, /proc/<server pid> and its tasks: the
// environment, memory, descriptors, maps, command line). The check is on the
// opened descriptor, never on the path text: a symlink WORK/AGENTS.md ->
// /proc/self/environ that a sandboxed command planted, followed by an
// unsandboxed fs/readFile, is refused like the direct path. It runs once per
// open (an fstatfs, plus a readlink and a statfs or two for files on procfs
// only), never per read.

// checkServable refuses file (opened from path; st its fstat) when it is the
// server's own, with -32600 "Permission denied" naming path.
func checkServable(file *os.File, st os.FileInfo, path string) error {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if s := policy.Secret(sys); s != "" {
			return refusedOwn(path, "is a secret of the exec-server")
		}
	}
	fd := int(file.Fd())
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return err
	}
	if sfs.Type != unix.PROC_SUPER_MAGIC || !ownProcEntry(fd) {
		return nil
	}
	return refusedOwn(path, "is in the exec-server's own /proc directory")
}

func refusedOwn(path, what string) error {
	return protocol.InvalidRequest("Permission denied (os error 13): `%s` %s, which it never serves", path, what).WithKind(protocol.KindPermissionDenied)
}

// ownProcEntry reports whether fd, a file on procfs, is in this process's
// directory there (its own pid's or one of its threads'). It fails closed:
// anything it cannot tell is the server's own.
func ownProcEntry(fd int) bool {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return true
	}
	return ownProcPath(link)
}

// ownProcPath is ownProcEntry for a resolved path on procfs.
func ownProcPath(link string) bool {
	if !strings.HasPrefix(link, "/") {
		return true
	}
	comps := strings.Split(strings.TrimPrefix(link, "/"), "/")
	// The procfs mount is the shortest prefix on procfs; the component
	// after it names a pid (or thread) directory, or a global file.
	for i := 1; i <= len(comps); i++ {
		root := "/" + strings.Join(comps[:i], "/")
		var sfs unix.Statfs_t
		if unix.Statfs(root, &sfs) != nil {
			return true
		}
		if sfs.Type != unix.PROC_SUPER_MAGIC {
			continue
		}
		if i == len(comps) {
			return false // the procfs root itself
		}
		return ownTask(root, comps[i])
	}
	return true
}

// ownTask reports whether name, below the procfs root, is this process or
// one of its threads as that procfs numbers them.
func ownTask(root, name string) bool {
	if _, err := strconv.ParseUint(name, 10, 32); err != nil {
		return false // not a pid directory: /proc/cpuinfo, /proc/sys/...
	}
	self, err := os.Readlink(root + "/self")
	if err != nil {
		// This process is not visible in that procfs (another PID
		// namespace's, where it has no number): none of its entries are
		// this process's.
		return false
	}
	if name == self {
		return true
	}
	_, err = os.Lstat(root + "/self/task/" + name)
	return err == nil
}

// openDir opens a directory to list for a client (fs/readDirectory,
// fs/walk, fs/copy of a tree), refusing the server's own /proc directories.
func openDir(path string) (*os.File, error) {
	dir, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := dir.Stat()
	if err == nil {
		err = checkServable(dir, st, path)
	}
	if err != nil {
		dir.Close()
		return nil, err
	}
	return dir, nil
}

// checkMagicLinks refuses (for fs/canonicalize, which answers where a path
// leads) a path whose resolution follows a magic link of the server's own
// /proc directory (/proc/self/fd/N, cwd, exe, root, map_files/…): the
// answer would name the server's open files. One openat2 tells whether any
// magic link is on the way (the usual answer: none); only then is the path
// walked link by link.
func checkMagicLinks(path string) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS})
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if err != unix.ELOOP && err != unix.ENOSYS {
		return nil // the caller's own resolution already answered
	}
	if viaOwnMagicLink(path) {
		return refusedOwn(path, "leads through the exec-server's own /proc directory")
	}
	return nil
}

// viaOwnMagicLink resolves path as the kernel would, one component at a
// time, and reports whether it follows a symlink that is in this process's
// /proc directory. It fails closed (true) on anything it cannot resolve.
func viaOwnMagicLink(path string) bool {
	pending := strings.Split(strings.TrimPrefix(path, "/"), "/")
	cur := "/"
	for hops := 0; len(pending) > 0; {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		st, err := os.Lstat(next)
		if err != nil {
			return true
		}
		if st.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return true
		}
		var sfs unix.Statfs_t
		if unix.Statfs(cur, &sfs) != nil {
			return true
		}
		if sfs.Type == unix.PROC_SUPER_MAGIC && ownProcPath(next) {
			return true
		}
		target, err := os.Readlink(next)
		if err != nil || !strings.HasPrefix(target, "/") && !strings.Contains(target, "/") && strings.Contains(target, ":") {
			// socket:[N], pipe:[N], anon_inode:…: not a path.
			return err != nil
		}
		if strings.HasPrefix(target, "/") {
			cur = "/"
		}
		pending = append(strings.Split(target, "/"), pending...)
	}
	return false
}

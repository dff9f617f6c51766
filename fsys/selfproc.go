package fsys

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
)

// The server never serves itself. A file this process opened for a client
// is refused when it is one of the server's secrets (sandbox.Secret: its
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
		if s := sandbox.Secret(sys); s != "" {
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
	if err != nil || !strings.HasPrefix(link, "/") {
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

package fsys

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/protocol"
)

func (f *FS) remove(ctx context.Context, _ *Handles, raw json.RawMessage) (any, error) {
	var p protocol.FsRemoveParams
	path, plan, err := f.decodePathParams(raw, &p, "WireFsRemoveParams", &p.Path, &p.Sandbox, protocol.MethodFsRemove, opWrite)
	if err != nil {
		return nil, err
	}
	if plan != nil {
		if err := refuseProtectedRemove(plan, path); err != nil {
			return nil, err
		}
		return f.callConfined(ctx, plan, protocol.MethodFsRemove, raw)
	}
	recursive := p.Recursive == nil || *p.Recursive
	force := p.Force == nil || *p.Force
	if path == "/" {
		return nil, refuseRemove(path, "it is the root directory")
	}
	st, err := os.Lstat(path)
	if err != nil {
		if force && errors.Is(err, fs.ErrNotExist) {
			return protocol.Empty{}, nil
		}
		return nil, err
	}
	// The guard looks at the canonical path: a symlinked parent or ".."
	// cannot smuggle "/" or a mount point past it. The last component is
	// not resolved because a symlink itself is what gets removed.
	parent, err := realpath(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	canon := filepath.Join(parent, filepath.Base(path))
	if canon == "/" {
		return nil, refuseRemove(path, "it is the root directory")
	}
	mounts, err := f.mounts.load()
	if err != nil {
		return nil, protocol.Internal("fs/remove: cannot read the mount table: %v", err)
	}
	if mounts[canon] {
		return nil, refuseRemove(path, "it is the root of a mounted filesystem")
	}
	if !st.IsDir() {
		return protocol.Empty{}, os.Remove(path)
	}
	if !recursive {
		return protocol.Empty{}, syscall.Rmdir(path)
	}
	for m := range mounts {
		if strings.HasPrefix(m, canon+"/") {
			return nil, refuseRemove(path, "a filesystem is mounted inside it at `"+m+"`")
		}
	}
	return protocol.Empty{}, removeTree(ctx, path, devOf(st))
}

func refuseRemove(path, why string) error {
	return protocol.InvalidRequest("fs/remove refuses to remove `%s`: %s", path, why)
}

func devOf(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Dev
	}
	return 0
}

// removeTree removes the directory p and everything below it, checking ctx
// between entries. It works relative to open directory descriptors
// (openat/unlinkat with O_NOFOLLOW), so a directory swapped for a symlink
// while the walk runs cannot redirect it outside the tree, and it never
// crosses into another filesystem (a different st_dev), whatever the mount
// table said.
func removeTree(ctx context.Context, p string, dev uint64) error {
	parent, err := unix.Open(filepath.Dir(p), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: filepath.Dir(p), Err: err}
	}
	defer unix.Close(parent)
	return removeAt(ctx, parent, filepath.Base(p), p, dev)
}

// removeAt removes name (shown as display in errors) inside the directory
// dirfd: a non-directory is unlinked, a directory emptied and removed.
func removeAt(ctx context.Context, dirfd int, name, display string, dev uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := unix.Unlinkat(dirfd, name, 0)
	switch err {
	case nil, unix.ENOENT:
		return nil
	case unix.EISDIR, unix.EPERM:
		// A directory (Linux says EISDIR; POSIX allows EPERM): empty it.
	default:
		return &fs.PathError{Op: "unlink", Path: display, Err: err}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return &fs.PathError{Op: "open", Path: display, Err: err}
	}
	dir := os.NewFile(uintptr(fd), display)
	defer dir.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "fstat", Path: display, Err: err}
	}
	if st.Dev != dev {
		return refuseRemove(display, "it is on another filesystem")
	}
	// Removing entries while reading the directory may make the kernel's
	// listing skip some; rescan from the start while rmdir finds it not
	// empty (a few times: something may also be adding entries).
	for attempt := 0; ; attempt++ {
		for {
			names, rerr := dir.Readdirnames(256)
			for _, n := range names {
				if err := removeAt(ctx, fd, n, display+"/"+n, dev); err != nil {
					return err
				}
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return unwrapSyscall(rerr)
			}
		}
		err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		switch {
		case err == nil || err == unix.ENOENT:
			return nil
		case err == unix.ENOTEMPTY && attempt < 3:
			if _, err := dir.Seek(0, io.SeekStart); err != nil {
				return &fs.PathError{Op: "seek", Path: display, Err: unwrapSyscall(err)}
			}
		default:
			return &fs.PathError{Op: "rmdir", Path: display, Err: err}
		}
	}
}

// mountTable reads the mount points from a mountinfo file each time it is
// asked: mounts change, and fs/remove of a directory is rare enough.
type mountTable struct{ path string }

func (t mountTable) load() (map[string]bool, error) {
	f, err := os.Open(t.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts := make(map[string]bool)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// Fields: id parent major:minor root mountpoint options ...
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 {
			mounts[unescapeMount(fields[4])] = true
		}
	}
	return mounts, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

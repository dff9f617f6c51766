package fsys

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/protocol"
)

func (f *FS) createDirectory(ctx context.Context, _ *Handles, raw json.RawMessage) (any, error) {
	var p protocol.FsCreateDirectoryParams
	path, plan, err := f.decodePathParams(raw, &p, "WireFsCreateDirectoryParams", &p.Path, &p.Sandbox, protocol.MethodFsCreateDirectory, opWrite)
	if err != nil {
		return nil, err
	}
	if plan != nil {
		return f.callConfined(ctx, plan, protocol.MethodFsCreateDirectory, raw)
	}
	if p.Recursive != nil && !*p.Recursive {
		return protocol.Empty{}, f.deny.mkdir(path)
	}
	return protocol.Empty{}, mkdirAll(path, f.deny)
}

// mkdir is os.Mkdir of a path the guard allows.
func (g guard) mkdir(p string) error {
	if err := g.create(p); err != nil {
		return err
	}
	return os.Mkdir(p, 0o777)
}

// mkdirAll is Rust's create_dir_all, whose errors the reference reports: an
// existing non-directory (a dangling symlink included) is EEXIST, where Go's
// os.MkdirAll would say ENOTDIR. Each directory it makes is checked by g.
func mkdirAll(p string, g guard) error {
	err := g.mkdir(p)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
	case isDir(p):
		return nil
	default:
		return err
	}
	parent := filepath.Dir(p)
	if parent == p {
		return err
	}
	if err := mkdirAll(parent, g); err != nil {
		return err
	}
	if err := g.mkdir(p); err != nil && !isDir(p) {
		return err
	}
	return nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func (f *FS) getMetadata(ctx context.Context, _ *Handles, raw json.RawMessage) (any, error) {
	var p protocol.FsGetMetadataParams
	path, plan, err := f.decodePathParams(raw, &p, "WireFsGetMetadataParams", &p.Path, &p.Sandbox, protocol.MethodFsGetMetadata, opRead)
	if err != nil {
		return nil, err
	}
	if plan != nil {
		return f.callConfined(ctx, plan, protocol.MethodFsGetMetadata, raw)
	}
	return metadata(path)
}

// metadata follows symlinks for type, size and times; IsSymlink describes
// the path itself. statx gives the birth time where the filesystem keeps one.
func metadata(path string) (*protocol.FsMetadata, error) {
	var stx unix.Statx_t
	mask := unix.STATX_TYPE | unix.STATX_SIZE | unix.STATX_MTIME | unix.STATX_BTIME
	if err := unix.Statx(unix.AT_FDCWD, path, 0, mask, &stx); err != nil {
		return nil, &fs.PathError{Op: "statx", Path: path, Err: err}
	}
	var lst unix.Stat_t
	if err := unix.Lstat(path, &lst); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	m := &protocol.FsMetadata{
		IsDirectory:  stx.Mode&unix.S_IFMT == unix.S_IFDIR,
		IsFile:       stx.Mode&unix.S_IFMT == unix.S_IFREG,
		IsSymlink:    lst.Mode&unix.S_IFMT == unix.S_IFLNK,
		Size:         int64(stx.Size),
		ModifiedAtMs: stx.Mtime.Sec*1000 + int64(stx.Mtime.Nsec)/1e6,
	}
	if stx.Mask&unix.STATX_BTIME != 0 {
		m.CreatedAtMs = stx.Btime.Sec*1000 + int64(stx.Btime.Nsec)/1e6
	}
	return m, nil
}

func (f *FS) canonicalize(ctx context.Context, _ *Handles, raw json.RawMessage) (any, error) {
	var p protocol.FsCanonicalizeParams
	path, plan, err := f.decodePathParams(raw, &p, "WireFsCanonicalizeParams", &p.Path, &p.Sandbox, protocol.MethodFsCanonicalize, opRead)
	if err != nil {
		return nil, err
	}
	if plan != nil {
		return f.callConfined(ctx, plan, protocol.MethodFsCanonicalize, raw)
	}
	real, err := realpath(path)
	if err != nil {
		return nil, err
	}
	if err := checkMagicLinks(path); err != nil {
		return nil, err
	}
	return protocol.FsCanonicalizeResult{Path: fileuri.FromPath(real)}, nil
}

// realpath resolves every symlink of p (which must exist), like realpath(3).
func realpath(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	return filepath.Abs(real)
}

func (f *FS) readDirectory(ctx context.Context, _ *Handles, raw json.RawMessage) (any, error) {
	var p protocol.FsReadDirectoryParams
	path, plan, err := f.decodePathParams(raw, &p, "WireFsReadDirectoryParams", &p.Path, &p.Sandbox, protocol.MethodFsReadDirectory, opRead)
	if err != nil {
		return nil, err
	}
	if plan != nil {
		return f.callConfined(ctx, plan, protocol.MethodFsReadDirectory, raw)
	}
	dir, err := openDir(path)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	res := protocol.FsReadDirectoryResult{Entries: []protocol.FsDirEntry{}}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Batches keep the listing in the operating system's order (as the
		// reference) while letting a cancelled request stop early.
		ents, err := dir.ReadDir(1024)
		for _, e := range ents {
			t := e.Type()
			if t&fs.ModeSymlink != 0 {
				st, err := os.Stat(filepath.Join(path, e.Name()))
				if err != nil {
					continue // dangling: omitted, as the reference does
				}
				t = st.Mode().Type()
			}
			res.Entries = append(res.Entries, protocol.FsDirEntry{
				FileName:    e.Name(),
				IsDirectory: t.IsDir(),
				IsFile:      t.IsRegular(),
			})
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, unwrapSyscall(err)
		}
	}
	return res, nil
}

// unwrapSyscall turns os.SyscallError and similar wrappers around an errno
// into a PathError-like error that protocol.FromOSError maps by errno.
func unwrapSyscall(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

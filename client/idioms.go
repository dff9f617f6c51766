package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// ExitError reports a process that ran and exited with a non-zero status,
// as os/exec's *ExitError does: Run returns it; errors.As finds it.
type ExitError struct {
	// Code is the exit status, 128+N when a signal N ended the process
	// (the server reports a signal death that way).
	Code int
	// TimedOut: the server killed it when Cmd.Timeout expired.
	TimedOut bool
	// Killed: Run's context ended and the client terminated the process.
	Killed bool
	// SandboxDenied: the server judged the failure a sandbox denial.
	SandboxDenied bool
}

func (e *ExitError) Error() string {
	switch {
	case e.Killed:
		return fmt.Sprintf("exit status %d (killed: the context ended)", e.Code)
	case e.TimedOut:
		return fmt.Sprintf("exit status %d (timed out)", e.Code)
	case e.SandboxDenied:
		return fmt.Sprintf("exit status %d (denied by the sandbox)", e.Code)
	}
	if sig := e.Signal(); sig != 0 {
		return fmt.Sprintf("exit status %d (signal %d)", e.Code, sig)
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// ExitCode is Code, as os/exec's ProcessState.ExitCode.
func (e *ExitError) ExitCode() int { return e.Code }

// Signal is N when Code is 128+N (1..64), else 0. A program that exits
// with such a status on its own is indistinguishable on the wire.
func (e *ExitError) Signal() int {
	if e.Code > 128 && e.Code <= 128+64 {
		return e.Code - 128
	}
	return 0
}

// Run starts cmd, waits for it and returns nil on a zero exit status, an
// *ExitError on any other, or the error that kept it from running or being
// waited for, as os/exec's Cmd.Run. When ctx ends first the process is
// terminated and the *ExitError says Killed.
func (c *Client) Run(ctx context.Context, cmd Cmd) error {
	p, err := c.Start(ctx, cmd)
	if err != nil {
		return err
	}
	code, err := p.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	if code == 0 {
		return nil
	}
	return &ExitError{Code: code, TimedOut: p.TimedOut(), Killed: ctx.Err() != nil, SandboxDenied: p.SandboxDenied()}
}

// renameScript renames $1 to $2 with mv(1): the protocol has no rename. A
// missing $1 exits 3; a directory at $2 (which mv would move $1 into)
// exits 4.
const renameScript = `[ -e "$1" ] || [ -L "$1" ] || exit 3
if [ -d "$2" ] && [ ! -L "$2" ]; then exit 4; fi
exec mv -f -- "$1" "$2"`

// Rename renames (moves) oldpath to newpath on the server, replacing a
// file at newpath, as os.Rename (within one file system it is rename(2)).
// The protocol has no rename method: it runs mv through /bin/sh on the
// server, so it needs a POSIX shell there. Errors are *os.LinkError; a
// missing oldpath matches fs.ErrNotExist, a directory at newpath
// fs.ErrExist.
func (c *Client) Rename(ctx context.Context, oldpath, newpath string) error {
	for _, p := range []string{oldpath, newpath} {
		if !path.IsAbs(p) {
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: errNotAbsolute}
		}
	}
	var stderr strings.Builder
	_, code, err := c.Output(ctx, Cmd{Argv: []string{"/bin/sh", "-c", renameScript, "sh", oldpath, newpath},
		Env: map[string]string{"LC_ALL": "C"}, InheritEnv: "core", Stderr: &stderr, Sandbox: sandboxOf(ctx)})
	switch {
	case err != nil:
	case code == 0:
		return nil
	case code == 3:
		err = fs.ErrNotExist
	case code == 4:
		err = fs.ErrExist
	default:
		err = errors.New(strings.TrimSpace(stderr.String()))
	}
	return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
}

func sandboxOf(ctx context.Context) *Sandbox {
	s, _ := ctx.Value(sandboxKey{}).(*Sandbox)
	return s
}

// FS returns the server's file system as an fs.FS rooted at "/", so that
// fs.WalkDir, fs.Glob, http.FS, template.ParseFS and the like work against
// it: name "etc/hosts" is /etc/hosts. Every call uses ctx (and its
// WithSandbox policy). Use fs.Sub for a subtree. Files are read in blocks
// (fs/open, fs/readBlock) as they are read; directories are listed whole.
func (c *Client) FS(ctx context.Context) fs.FS { return remoteFS{c: c, ctx: ctx} }

type remoteFS struct {
	c   *Client
	ctx context.Context
}

var (
	_ fs.StatFS     = remoteFS{}
	_ fs.ReadDirFS  = remoteFS{}
	_ fs.ReadFileFS = remoteFS{}
)

// abs turns an fs.FS name into a server path, refusing what fs.ValidPath
// refuses.
func (r remoteFS) abs(op, name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return path.Join("/", name), nil
}

// rename swaps the server path in an error for the fs.FS name.
func rename(err error, op, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: op, Path: name, Err: pe.Err}
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// namedInfo is a FileInfo under its fs.FS name ("." for the root).
type namedInfo struct {
	*FileInfo
	name string
}

func (n namedInfo) Name() string { return n.name }

func (r remoteFS) Stat(name string) (fs.FileInfo, error) {
	p, err := r.abs("stat", name)
	if err != nil {
		return nil, err
	}
	fi, err := r.c.Stat(r.ctx, p)
	if err != nil {
		return nil, rename(err, "stat", name)
	}
	return namedInfo{fi, path.Base(name)}, nil
}

func (r remoteFS) ReadDir(name string) ([]fs.DirEntry, error) {
	p, err := r.abs("readdir", name)
	if err != nil {
		return nil, err
	}
	ents, err := r.c.ReadDir(r.ctx, p)
	if err != nil {
		return nil, rename(err, "readdir", name)
	}
	return ents, nil
}

func (r remoteFS) ReadFile(name string) ([]byte, error) {
	p, err := r.abs("readfile", name)
	if err != nil {
		return nil, err
	}
	fi, err := r.c.Stat(r.ctx, p)
	if err != nil {
		return nil, rename(err, "readfile", name)
	}
	if fi.IsDir() {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: errors.New("is a directory")}
	}
	b, err := r.c.ReadFile(r.ctx, p)
	if err != nil {
		return nil, rename(err, "readfile", name)
	}
	return b, nil
}

func (r remoteFS) Open(name string) (fs.File, error) {
	p, err := r.abs("open", name)
	if err != nil {
		return nil, err
	}
	fi, err := r.c.Stat(r.ctx, p)
	if err != nil {
		return nil, rename(err, "open", name)
	}
	info := namedInfo{fi, path.Base(name)}
	if fi.IsDir() {
		return &remoteDir{r: r, name: name, path: p, info: info}, nil
	}
	f, err := r.c.Open(r.ctx, p)
	if err != nil {
		return nil, rename(err, "open", name)
	}
	return &remoteFile{f: f, ctx: r.ctx, name: name, info: info}, nil
}

// remoteFile is an open file of FS: sequential reads by block.
type remoteFile struct {
	f    *File
	ctx  context.Context
	name string
	info namedInfo
	off  int64
}

func (f *remoteFile) Stat() (fs.FileInfo, error) { return f.info, nil }

func (f *remoteFile) Read(p []byte) (int, error) {
	if len(p) > BlockSize {
		p = p[:BlockSize]
	}
	n, err := f.f.ReadAtContext(f.ctx, p, f.off)
	f.off += int64(n)
	if err != nil && err != io.EOF {
		err = rename(err, "read", f.name)
	}
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (f *remoteFile) Close() error { return f.f.Close() }

// remoteDir is an open directory of FS, listed on the first ReadDir.
type remoteDir struct {
	r      remoteFS
	name   string
	path   string
	info   namedInfo
	ents   []fs.DirEntry
	listed bool
	offset int
}

func (d *remoteDir) Stat() (fs.FileInfo, error) { return d.info, nil }

func (d *remoteDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.name, Err: errors.New("is a directory")}
}

func (d *remoteDir) Close() error { return nil }

func (d *remoteDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if !d.listed {
		ents, err := d.r.ReadDir(d.name)
		if err != nil {
			return nil, err
		}
		d.ents, d.listed = ents, true
	}
	rest := d.ents[d.offset:]
	if n <= 0 {
		d.offset = len(d.ents)
		return slices.Clone(rest), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.offset += n
	return slices.Clone(rest[:n]), nil
}

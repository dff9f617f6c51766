package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/protocol"
)

// Paths in the file methods are absolute paths on the server's machine; the
// client turns them into the protocol's file: URIs.

func uri(op, p string) (string, error) {
	if !path.IsAbs(p) {
		return "", &fs.PathError{Op: opName(op), Path: p, Err: errNotAbsolute}
	}
	return fileuri.FromPath(p), nil
}

var errNotAbsolute = errors.New("not an absolute path")

// opName is the fs.PathError Op of a method, in os's words ("stat",
// "readdir", "open", "remove", "mkdir", ...).
func opName(method string) string {
	switch method {
	case "ReadFile", "Open", "Download", "FS":
		return "open"
	case "WriteFile", "Create", "Upload":
		return "write"
	case "ReadDir":
		return "readdir"
	case "RemoveAll":
		return "remove"
	case "MkdirAll":
		return "mkdir"
	}
	return strings.ToLower(method)
}

// pathErr wraps a failed call as os does: an *fs.PathError naming the op
// and the path, whose Err is the *Error (or ErrConnectionLost...), so
// errors.Is(err, fs.ErrNotExist) and errors.As(err, &*Error) still hold.
func pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return err
	}
	return &fs.PathError{Op: opName(op), Path: name, Err: err}
}

func ptr[T any](v T) *T { return &v }

// BlockSize is the largest block fs/readBlock and fs/writeBlock move.
const BlockSize = protocol.FsMaxBlockLen

// streamThreshold is the size above which WriteFile streams through blocks
// instead of one fs/writeFile message (a variable for tests).
var streamThreshold = 16 << 20

// ReadFile returns the whole file (fs/readFile). For large files prefer
// Download or Open, which move the file in blocks.
func (c *Client) ReadFile(ctx context.Context, name string) ([]byte, error) {
	u, err := uri("ReadFile", name)
	if err != nil {
		return nil, err
	}
	var res readFileResult
	if err := c.call(ctx, protocol.MethodFsReadFile, protocol.FsReadFileParams{Path: u}, &res, true); err != nil {
		return nil, pathErr("ReadFile", name, err)
	}
	if res.DataBase64 == nil {
		res.DataBase64 = []byte{}
	}
	return res.DataBase64, nil
}

// WriteFile creates or truncates the file and writes data (fs/writeFile;
// data over 16 MiB is streamed in blocks).
func (c *Client) WriteFile(ctx context.Context, name string, data []byte) error {
	if len(data) > streamThreshold {
		_, err := c.Upload(ctx, name, &sliceReader{b: data}, nil)
		return err
	}
	u, err := uri("WriteFile", name)
	if err != nil {
		return err
	}
	if data == nil {
		data = []byte{}
	}
	return pathErr("WriteFile", name, c.call(ctx, protocol.MethodFsWriteFile, protocol.FsWriteFileParams{Path: u, DataBase64: data}, nil, true))
}

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// FileInfo describes a file (fs/getMetadata); it implements fs.FileInfo.
// Type and size follow symlinks; IsSymlink describes the path itself.
type FileInfo struct {
	path                     string
	isDir, isFile, isSymlink bool
	size                     int64
	modTime, created         time.Time
}

// Name is the base name of the path.
func (fi *FileInfo) Name() string { return path.Base(fi.path) }

// Path is the absolute path on the server that was asked about.
func (fi *FileInfo) Path() string { return fi.path }

// Size is the length in bytes (of the target, for a symlink).
func (fi *FileInfo) Size() int64 { return fi.size }

// Mode reports the file's type: fs.ModeDir for a directory, 0 for a regular
// file, fs.ModeIrregular for a FIFO, socket or device. The protocol carries
// no permission bits: they are always 0 here (exec-server cp and ls -l
// learn them with ls on the server).
func (fi *FileInfo) Mode() fs.FileMode {
	switch {
	case fi.isDir:
		return fs.ModeDir
	case fi.isFile:
		return 0
	}
	return fs.ModeIrregular
}

// ModTime is the modification time (millisecond precision).
func (fi *FileInfo) ModTime() time.Time { return fi.modTime }

// IsDir reports a directory (or a symlink to one).
func (fi *FileInfo) IsDir() bool { return fi.isDir }

// IsFile reports a regular file (or a symlink to one).
func (fi *FileInfo) IsFile() bool { return fi.isFile }

// IsSymlink reports that the path itself is a symlink.
func (fi *FileInfo) IsSymlink() bool { return fi.isSymlink }

// Created is the birth time, zero when the server's file system does not
// record it.
func (fi *FileInfo) Created() time.Time { return fi.created }

// Sys is nil.
func (fi *FileInfo) Sys() any { return nil }

// Stat describes a file (fs/getMetadata).
func (c *Client) Stat(ctx context.Context, name string) (*FileInfo, error) {
	u, err := uri("Stat", name)
	if err != nil {
		return nil, err
	}
	var m protocol.FsMetadata
	if err := c.call(ctx, protocol.MethodFsGetMetadata, protocol.FsGetMetadataParams{Path: u}, &m, true); err != nil {
		return nil, pathErr("Stat", name, err)
	}
	fi := &FileInfo{path: name, isDir: m.IsDirectory, isFile: m.IsFile, isSymlink: m.IsSymlink, size: m.Size, modTime: time.UnixMilli(m.ModifiedAtMs)}
	if m.CreatedAtMs != 0 {
		fi.created = time.UnixMilli(m.CreatedAtMs)
	}
	return fi, nil
}

// DirEntry is one entry of a directory; it implements fs.DirEntry.
// Symlinks are resolved; the server omits dangling ones.
type DirEntry struct {
	c             *Client
	ctx           context.Context
	dir, name     string
	isDir, isFile bool
}

// Name is the entry's name in its directory.
func (e *DirEntry) Name() string { return e.name }

// IsDir reports a directory (or a symlink to one).
func (e *DirEntry) IsDir() bool { return e.isDir }

// IsFile is false for directories and for special files (FIFOs, sockets,
// devices).
func (e *DirEntry) IsFile() bool { return e.isFile }

// Type is the type bits of Info().Mode().
func (e *DirEntry) Type() fs.FileMode {
	return (&FileInfo{isDir: e.isDir, isFile: e.isFile}).Mode().Type()
}

// Info asks the server (fs/getMetadata, with ReadDir's context).
func (e *DirEntry) Info() (fs.FileInfo, error) {
	fi, err := e.c.Stat(e.ctx, path.Join(e.dir, e.name))
	if err != nil {
		return nil, err
	}
	return fi, nil
}

// ReadDir lists a directory (fs/readDirectory), sorted by name; each entry
// is a *DirEntry.
func (c *Client) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	u, err := uri("ReadDir", name)
	if err != nil {
		return nil, err
	}
	var res protocol.FsReadDirectoryResult
	if err := c.call(ctx, protocol.MethodFsReadDirectory, protocol.FsReadDirectoryParams{Path: u}, &res, true); err != nil {
		return nil, pathErr("ReadDir", name, err)
	}
	out := make([]fs.DirEntry, len(res.Entries))
	for i, e := range res.Entries {
		out[i] = &DirEntry{c: c, ctx: ctx, dir: name, name: e.FileName, isDir: e.IsDirectory, isFile: e.IsFile}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// WalkOptions bound a Walk; zero fields take the protocol's maxima (depth
// 64, 10000 directories, 50000 entries).
type WalkOptions struct {
	MaxDepth, MaxDirectories, MaxEntries int
	FollowDirectorySymlinks              bool
}

// WalkEntry is one path under the walked root. Kind is "file",
// "directory", "symlink" or "other".
type WalkEntry struct {
	Path string
	Kind string
}

// WalkResult is what Walk found. Errors maps paths that could not be read
// to the reason; Truncated is true when a limit stopped the walk.
type WalkResult struct {
	Entries   []WalkEntry
	Errors    map[string]string
	Truncated bool
}

// Walk lists everything under root (fs/walk), not including root itself.
func (c *Client) Walk(ctx context.Context, root string, opts WalkOptions) (*WalkResult, error) {
	u, err := uri("Walk", root)
	if err != nil {
		return nil, err
	}
	def := func(v, d int) uint64 {
		if v <= 0 {
			return uint64(d)
		}
		return uint64(v)
	}
	params := protocol.FsWalkParams{Path: u, Options: protocol.FsWalkOptions{
		MaxDepth:                def(opts.MaxDepth, protocol.FsWalkMaxDepth),
		MaxDirectories:          def(opts.MaxDirectories, protocol.FsWalkMaxDirectories),
		MaxEntries:              def(opts.MaxEntries, protocol.FsWalkMaxEntries),
		FollowDirectorySymlinks: opts.FollowDirectorySymlinks,
	}}
	var res protocol.FsWalkResult
	if err := c.call(ctx, protocol.MethodFsWalk, params, &res, true); err != nil {
		return nil, pathErr("Walk", root, err)
	}
	out := &WalkResult{Truncated: res.Truncated}
	for _, e := range res.Entries {
		p, err := fileuri.Parse(e.Path)
		if err != nil {
			return nil, fmt.Errorf("exec-server client: fs/walk returned %q: %w", e.Path, err)
		}
		out.Entries = append(out.Entries, WalkEntry{Path: p, Kind: e.Kind})
	}
	for _, e := range res.Errors {
		if out.Errors == nil {
			out.Errors = map[string]string{}
		}
		p, err := fileuri.Parse(e.Path)
		if err != nil {
			p = e.Path
		}
		out.Errors[p] = e.Message
	}
	return out, nil
}

// Remove removes a file or an empty directory; a missing path is an error
// (fs/remove without recursion or force).
func (c *Client) Remove(ctx context.Context, name string) error {
	return c.remove(ctx, "Remove", name, false)
}

// RemoveAll removes a path and everything under it; a missing path is not
// an error (fs/remove, recursive and forced). Symlinks are removed, not
// followed.
func (c *Client) RemoveAll(ctx context.Context, name string) error {
	return c.remove(ctx, "RemoveAll", name, true)
}

func (c *Client) remove(ctx context.Context, op, name string, all bool) error {
	if path.Clean(name) == "/" {
		return fmt.Errorf("exec-server client: %s: refusing to remove /", op)
	}
	u, err := uri(op, name)
	if err != nil {
		return err
	}
	return pathErr(op, name, c.call(ctx, protocol.MethodFsRemove, protocol.FsRemoveParams{Path: u, Recursive: ptr(all), Force: ptr(all)}, nil, true))
}

// Mkdir creates one directory; its parent must exist.
func (c *Client) Mkdir(ctx context.Context, name string) error {
	return c.mkdir(ctx, "Mkdir", name, false)
}

// MkdirAll creates a directory and any missing parents; an existing
// directory is not an error.
func (c *Client) MkdirAll(ctx context.Context, name string) error {
	return c.mkdir(ctx, "MkdirAll", name, true)
}

func (c *Client) mkdir(ctx context.Context, op, name string, all bool) error {
	u, err := uri(op, name)
	if err != nil {
		return err
	}
	return pathErr(op, name, c.call(ctx, protocol.MethodFsCreateDirectory, protocol.FsCreateDirectoryParams{Path: u, Recursive: ptr(all)}, nil, true))
}

// Copy copies a file, symlink or directory tree on the server (fs/copy).
// A file overwrites an existing file; a directory merges into an existing
// one.
func (c *Client) Copy(ctx context.Context, src, dst string) error {
	su, err := uri("Copy", src)
	if err != nil {
		return err
	}
	du, err := uri("Copy", dst)
	if err != nil {
		return err
	}
	if err := c.call(ctx, protocol.MethodFsCopy, protocol.FsCopyParams{SourcePath: su, DestinationPath: du, Recursive: true}, nil, true); err != nil {
		return &os.LinkError{Op: "copy", Old: src, New: dst, Err: err}
	}
	return nil
}

// Canonicalize resolves symlinks and returns the real absolute path
// (fs/canonicalize).
func (c *Client) Canonicalize(ctx context.Context, name string) (string, error) {
	u, err := uri("Canonicalize", name)
	if err != nil {
		return "", err
	}
	var res protocol.FsCanonicalizeResult
	if err := c.call(ctx, protocol.MethodFsCanonicalize, protocol.FsCanonicalizeParams{Path: u}, &res, true); err != nil {
		return "", pathErr("Canonicalize", name, err)
	}
	return fileuri.Parse(res.Path)
}

// File is an open remote file, read or written by position in blocks of at
// most BlockSize (fs/open, fs/readBlock, fs/writeBlock, fs/close). It is
// safe for concurrent use. Handles belong to a connection: after a
// reconnect a file opened for reading is reopened transparently, while a
// file opened with Create fails with ErrConnectionLost (reopening would
// truncate it).
type File struct {
	c     *Client
	name  string
	uri   string
	write bool

	mu     sync.Mutex
	handle string
	gen    uint64 // connection generation the handle belongs to
	closed bool
}

// Open opens a file for reading; it implements io.ReaderAt.
func (c *Client) Open(ctx context.Context, name string) (*File, error) {
	return c.openFile(ctx, "Open", name, false)
}

// Create creates or truncates a file for writing; it implements
// io.WriterAt. Holes left by writes past the end read as zeros.
func (c *Client) Create(ctx context.Context, name string) (*File, error) {
	return c.openFile(ctx, "Create", name, true)
}

func (c *Client) openFile(ctx context.Context, op, name string, write bool) (*File, error) {
	u, err := uri(op, name)
	if err != nil {
		return nil, err
	}
	f := &File{c: c, name: name, uri: u, write: write}
	if _, _, err := f.handleFor(ctx); err != nil {
		return nil, pathErr(op, name, err)
	}
	return f, nil
}

// handleFor returns a handle valid on the current connection, opening (or,
// for reading, reopening) it as needed.
func (f *File) handleFor(ctx context.Context) (string, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return "", 0, fmt.Errorf("exec-server client: %s: %w", f.name, errFileClosed)
	}
	_, gen, err := f.c.current(ctx)
	if err != nil {
		return "", 0, err
	}
	if f.handle != "" && f.gen == gen {
		return f.handle, gen, nil
	}
	if f.handle != "" && f.write {
		return "", 0, fmt.Errorf("%w: %s: the write handle did not survive a reconnect", ErrConnectionLost, f.name)
	}
	mode := protocol.FsOpenRead
	if f.write {
		mode = protocol.FsOpenReplace
	}
	for {
		id := fmt.Sprintf("%s-h%d", f.c.idPrefix, f.c.nextProc.Add(1))
		g, err := f.c.callGen(ctx, 0, protocol.MethodFsOpen, protocol.FsOpenParams{HandleID: id, Path: f.uri, Mode: mode}, nil)
		if errors.Is(err, errConnLost) && !f.write && f.c.dialer != nil {
			continue // a reconnect is under way; open on the next connection
		}
		if errors.Is(err, errConnLost) {
			return "", 0, fmt.Errorf("%w: %s: %v", ErrConnectionLost, f.name, err)
		}
		if err != nil {
			return "", 0, err
		}
		f.handle, f.gen = id, g
		return id, g, nil
	}
}

var errFileClosed = errors.New("file already closed")

// testHookHandleChosen, set by tests, runs in do between choosing a handle
// and sending the request that uses it.
var testHookHandleChosen atomic.Pointer[func()]

// do runs one handle request, reopening a read handle across reconnects.
func (f *File) do(ctx context.Context, method string, params func(handle string) any, result any) error {
	for {
		h, gen, err := f.handleFor(ctx)
		if err != nil {
			return err
		}
		if hook := testHookHandleChosen.Load(); hook != nil {
			(*hook)()
		}
		// Sent only on the handle's own connection: a reconnect since
		// handleFor means the handle is unknown on the new one.
		_, err = f.c.callGen(ctx, gen, method, params(h), result)
		if errors.Is(err, errConnLost) && !f.write && f.c.dialer != nil {
			continue
		}
		if errors.Is(err, errConnLost) {
			return fmt.Errorf("%w: %s: %v", ErrConnectionLost, method, err)
		}
		return err
	}
}

// readBlock reads at most n (≤ BlockSize) bytes at off.
func (f *File) readBlock(ctx context.Context, off int64, n int) ([]byte, bool, error) {
	var res readBlockResult
	err := f.do(ctx, protocol.MethodFsReadBlock, func(h string) any {
		return protocol.FsReadBlockParams{HandleID: h, Offset: uint64(off), Len: uint64(n)}
	}, &res)
	return res.Chunk, res.EOF, err
}

// ReadAt implements io.ReaderAt with a background context.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.ReadAtContext(f.c.ctx, p, off)
}

// ReadAtContext is ReadAt with a context.
func (f *File) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("exec-server client: ReadAt %s: negative offset %d", f.name, off)
	}
	n := 0
	for n < len(p) {
		chunk, eof, err := f.readBlock(ctx, off+int64(n), min(len(p)-n, BlockSize))
		n += copy(p[n:], chunk)
		if err != nil {
			return n, err
		}
		if eof && n < len(p) {
			return n, io.EOF
		}
		if len(chunk) == 0 && !eof {
			return n, io.ErrNoProgress
		}
	}
	return n, nil
}

// WriteAt implements io.WriterAt with a background context.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	return f.WriteAtContext(f.c.ctx, p, off)
}

// WriteAtContext is WriteAt with a context.
func (f *File) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("exec-server client: WriteAt %s: negative offset %d", f.name, off)
	}
	n := 0
	for n < len(p) {
		m := min(len(p)-n, BlockSize)
		block := p[n : n+m]
		at := off + int64(n)
		err := f.do(ctx, protocol.MethodFsWriteBlock, func(h string) any {
			return protocol.FsWriteBlockParams{HandleID: h, Offset: uint64(at), Chunk: block}
		}, nil)
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// Close releases the handle (fs/close). Data written is on the server's
// disk already.
func (f *File) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	h, gen := f.handle, f.gen
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(f.c.ctx, 10*time.Second)
	defer cancel()
	rc, cur, err := f.c.current(ctx)
	if err != nil || cur != gen {
		return nil // the connection that held the handle is gone, and the handle with it
	}
	err = rc.call(ctx, protocol.MethodFsClose, protocol.FsCloseParams{HandleID: h}, nil)
	if errors.Is(err, errConnLost) {
		return nil
	}
	return err
}

// transferWindow is how many blocks Download and Upload keep in flight, so
// a transfer is not one round trip per MiB.
const transferWindow = 4

// Download copies a remote file to w in blocks, with a few blocks in flight
// and at most that many in memory. progress, when not nil, is called with
// the running total after each block. It returns the bytes written.
func (c *Client) Download(ctx context.Context, name string, w io.Writer, progress func(done int64)) (int64, error) {
	f, err := c.Open(ctx, name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(ctx)
	type block struct {
		data []byte
		eof  bool
		err  error
	}
	var inflight []chan block
	var wg sync.WaitGroup
	defer wg.Wait() // every reader goroutine ends before the handle closes
	defer cancel()  // runs first: stops the blocks still in flight
	var next, total int64
	window := 1 // grows once the file proves larger than one block
	for {
		for len(inflight) < window {
			ch := make(chan block, 1)
			off := next
			next += BlockSize
			wg.Add(1)
			go func() {
				defer wg.Done()
				data, eof, err := f.readBlock(ctx, off, BlockSize)
				ch <- block{data, eof, err}
			}()
			inflight = append(inflight, ch)
		}
		b := <-inflight[0]
		inflight = inflight[1:]
		if b.err != nil {
			return total, b.err
		}
		if len(b.data) > 0 {
			if _, err := w.Write(b.data); err != nil {
				return total, err
			}
			total += int64(len(b.data))
			if progress != nil {
				progress(total)
			}
		}
		if b.eof {
			return total, nil
		}
		window = transferWindow
		if len(b.data) < BlockSize {
			// Positional reads of a regular file are short only at its
			// end, which the server marks with eof; anything else would
			// leave a hole in the copy.
			return total, fmt.Errorf("exec-server client: Download %s: short block of %d bytes at offset %d without end of file", name, len(b.data), total-int64(len(b.data)))
		}
	}
}

// Upload creates or truncates a remote file and copies r into it in
// blocks, with a few blocks in flight and at most that many in memory.
// progress, when not nil, is called with the running total of bytes
// acknowledged. It returns the bytes written.
func (c *Client) Upload(ctx context.Context, name string, r io.Reader, progress func(done int64)) (int64, error) {
	f, err := c.Create(ctx, name)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, transferWindow)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	var acked int64
	var off int64
	for {
		mu.Lock()
		failed := firstErr
		mu.Unlock()
		if failed != nil {
			break
		}
		buf := make([]byte, BlockSize)
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			sem <- struct{}{}
			wg.Add(1)
			at := off
			go func(block []byte) {
				defer wg.Done()
				defer func() { <-sem }()
				_, err := f.WriteAtContext(ctx, block, at)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					return
				}
				acked += int64(len(block))
				if progress != nil {
					progress(acked)
				}
			}(buf[:n])
			off += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = rerr
			}
			mu.Unlock()
			break
		}
	}
	wg.Wait()
	cerr := f.Close()
	if firstErr != nil {
		return acked, firstErr
	}
	return acked, cerr
}

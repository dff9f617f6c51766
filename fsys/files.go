package fsys

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/internal/b64codec"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/protocol"
)

// ioPiece is how much one read or write moves before the context is checked
// again, so a cancelled request stops within one piece.
const ioPiece = 8 << 20

// openRegular opens p without ever blocking (O_NONBLOCK: a FIFO with no peer
// or a device cannot hold the call) and refuses anything but a regular file
// with -32600. /proc and /sys pseudo files are regular files and pass.
// A directory is refused as the reference does ("path `p` is not a file"),
// except when opening for writing, where the kernel's EISDIR stands.
func openRegular(p string, flag int) (*os.File, os.FileInfo, error) {
	// Devices and FIFOs are refused before open, which can have side
	// effects on a device; the fstat below closes the race with a swap.
	if st, err := os.Stat(p); err == nil && !st.Mode().IsRegular() && !st.IsDir() {
		return nil, nil, notAFile(p)
	}
	f, err := os.OpenFile(p, flag|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0o666)
	if err != nil {
		// ENXIO: a FIFO without a reader, or a socket; neither is a file.
		if errors.Is(err, syscall.ENXIO) {
			return nil, nil, notAFile(p)
		}
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, notAFile(p)
	}
	if err := checkServable(f, st, p); err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

func (f *FS) readFile(ctx context.Context, _ *Handles, raw json.RawMessage) (any, error) {
	var p protocol.FsReadFileParams
	path, plan, err := f.decodePathParams(raw, &p, "WireFsReadFileParams", &p.Path, &p.Sandbox, protocol.MethodFsReadFile, opRead)
	if err != nil {
		return nil, err
	}
	// Under a plan the file is opened (and checked to be a regular file)
	// inside the view; the data is read here either way.
	file, err := f.openRead(ctx, protocol.MethodFsReadFile, plan, p.Sandbox, path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > f.opts.MaxFileBytes {
		return nil, tooLarge(protocol.MethodFsReadFile, path, st.Size(), f.opts.MaxFileBytes)
	}
	// A file with a size is encoded as it is read; a pseudo file (size 0,
	// as in /proc) or one that changes under the read is read to EOF.
	if st.Size() > 0 {
		reply, err := readEncoded(ctx, file, st.Size())
		if err == nil {
			return reply, nil
		}
		if err != errChanged {
			return nil, err
		}
		if _, err := file.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
	}
	data, err := f.readAll(ctx, file, path, st.Size())
	if err != nil {
		return nil, err
	}
	return &readFileResult{data: data}, nil
}

// readAll reads file to EOF in pieces, checking ctx and the size cap. The
// buffer starts at the size fstat gave, so a file of known size costs one
// allocation; /proc files (size 0) grow as they are read.
func (f *FS) readAll(ctx context.Context, file *os.File, path string, size int64) ([]byte, error) {
	limit := f.opts.MaxFileBytes
	// One byte more than the size: reading it tells EOF without a regrow.
	buf := make([]byte, 0, size+1)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return nil, tooLarge(protocol.MethodFsReadFile, path, -1, limit)
			}
			buf = slices.Grow(buf, min(max(len(buf), 4096), ioPiece))
		}
		n, err := file.Read(buf[len(buf):min(cap(buf), len(buf)+ioPiece)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)) > limit {
		return nil, tooLarge(protocol.MethodFsReadFile, path, int64(len(buf)), limit)
	}
	return buf, nil
}

// readFileResult encodes {"dataBase64":"..."} straight into the outgoing
// frame (jsonrpc.Appender): the base64 text is never a separate string.
type readFileResult struct{ data []byte }

// AppendJSON implements jsonrpc.Appender.
func (r *readFileResult) AppendJSON(dst []byte) []byte {
	dst = grow(dst, frameSlack+len(`{"dataBase64":""}`)+base64.StdEncoding.EncodedLen(len(r.data)))
	dst = append(dst, `{"dataBase64":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, r.data)
	return append(dst, `"}`...)
}

// MarshalJSON makes the result usable with encoding/json too.
func (r *readFileResult) MarshalJSON() ([]byte, error) { return r.AppendJSON(nil), nil }

// DataLen reports the bytes of file data the result carries (for metrics).
func (r *readFileResult) DataLen() int { return len(r.data) }

// writeFileParams is fs/writeFile's params with dataBase64 kept raw: it is
// decoded here, straight from the request bytes into a buffer of the
// decoded size.
type writeFileParams struct {
	Path    string
	Data    []byte // the base64 text, unquoted
	Sandbox json.RawMessage
	// inMessage: Data is the request's own bytes (the string had no
	// escapes), which the handler may decode over.
	inMessage bool
}

// decodeWriteFile walks the params once, cutting the big string out, and
// decodes the small members as every other method's params (jsonscan), so
// errors read the same.
func decodeWriteFile(raw json.RawMessage, known []byte) (*writeFileParams, error) {
	var p struct {
		Path       string          `json:"path"`
		DataBase64 string          `json:"dataBase64"`
		Sandbox    json.RawMessage `json:"sandbox"`
	}
	cut, err := jsonscan.Decode(raw, &p, jsonscan.Spec{Type: "WireFsWriteFileParams", Required: []string{"path"}, Cut: []string{"dataBase64"}, Known: known})
	if err != nil {
		return nil, err
	}
	dataRaw := cut[0]
	switch {
	case dataRaw == nil:
		return nil, protocol.InvalidParams("missing field `dataBase64`")
	case string(dataRaw) == "null":
		// A null is a type error, not a missing field.
		return nil, protocol.InvalidParams("invalid type: null, expected a string")
	}
	out := &writeFileParams{Path: p.Path, Sandbox: p.Sandbox}
	if isKnown(dataRaw, known) || bytes.IndexByte(dataRaw, '\\') < 0 {
		out.Data = dataRaw[1 : len(dataRaw)-1]
		out.inMessage = true
	} else {
		// Escapes (such as "\/") are legal JSON; unquote the slow way.
		var s string
		if err := json.Unmarshal(dataRaw, &s); err != nil {
			return nil, protocol.InvalidParams("invalid string for field `dataBase64`: %v", err)
		}
		out.Data = []byte(s)
	}
	return out, nil
}

func (f *FS) writeFile(ctx context.Context, _ *Handles, raw json.RawMessage) (any, error) {
	p, err := decodeWriteFile(raw, knownOf(ctx))
	if err != nil {
		return nil, err
	}
	noteParams(ctx, p.Path, p.Sandbox)
	path, err := parsePath(p.Path)
	if err != nil {
		return nil, err
	}
	plan, err := f.confinement(protocol.MethodFsWriteFile, p.Sandbox, opWrite)
	if err != nil {
		return nil, err
	}
	if n := int64(len(p.Data)) / 4 * 3; n > f.opts.MaxFileBytes+3 {
		return nil, tooLarge(protocol.MethodFsWriteFile, path, n, f.opts.MaxFileBytes)
	}
	var data []byte
	if plan == nil && p.inMessage {
		// Decoded over its own base64 in the request's buffer: no copy
		// of the payload is allocated (the raw params are not read again).
		data, err = b64codec.DecodeInPlace(p.Data)
	} else {
		// A confined call forwards raw to the helper as it is.
		data, err = b64codec.Decode(p.Data)
	}
	if err != nil {
		// The reference answers -32600 here, not the -32602 of process/write.
		return nil, protocol.InvalidRequest("fs/writeFile requires valid base64 dataBase64: %v", err)
	}
	if int64(len(data)) > f.opts.MaxFileBytes {
		return nil, tooLarge(protocol.MethodFsWriteFile, path, int64(len(data)), f.opts.MaxFileBytes)
	}
	if plan != nil {
		// Checked here first: a bad request costs no helper.
		if _, err := f.callConfined(ctx, plan, protocol.MethodFsWriteFile, raw); err != nil {
			return nil, err
		}
		// The helper's result is {} as ours: this one also carries the
		// count for the metrics.
		return writtenReply(len(data)), nil
	}
	if err := f.deny.create(path); err != nil {
		return nil, err
	}
	if err := writeWhole(ctx, path, data); err != nil {
		return nil, err
	}
	return writtenReply(len(data)), nil
}

// writtenReply is the {} result of fs/writeFile and fs/writeBlock that also
// tells the metrics how many bytes were written, so that they need not
// look at the params again (they once re-scanned every payload).
type writtenReply int

// WrittenLen reports the bytes written (for metrics).
func (r writtenReply) WrittenLen() int { return int(r) }

// AppendJSON implements jsonrpc.Appender: the result is {}.
func (writtenReply) AppendJSON(dst []byte) []byte { return append(dst, "{}"...) }

// MarshalJSON makes the result usable with encoding/json too.
func (writtenReply) MarshalJSON() ([]byte, error) { return []byte("{}"), nil }

// writeWhole creates or truncates path (following symlinks) and writes data
// in pieces. The file is truncated only once it is known to be a regular
// file, so a FIFO or device is refused without being touched.
func writeWhole(ctx context.Context, path string, data []byte) error {
	file, st, err := openRegular(path, os.O_WRONLY|os.O_CREATE)
	if err != nil {
		return err
	}
	// An empty file (a new one, the usual case) is not truncated: on ext4
	// a truncate to zero also marks the file for writeback at close (its
	// auto_da_alloc heuristic for files replaced by truncation), which
	// the closing call then pays: a fresh 16 MiB file cost 0.41 s/GB of
	// CPU with the truncate, 0.37 without.
	// An empty write still truncates, as O_TRUNC does: it moves the
	// file's modification time even when the file was empty already.
	if st.Size() != 0 || len(data) == 0 {
		if err := file.Truncate(0); err != nil {
			file.Close()
			return err
		}
	}
	if len(data) >= preallocMin {
		preallocate(file, int64(len(data)))
	}
	for off := 0; off < len(data); {
		if err := ctx.Err(); err != nil {
			_ = file.Truncate(int64(off))
			file.Close()
			return err
		}
		end := min(off+ioPiece, len(data))
		n, err := file.Write(data[off:end])
		off += n
		if err != nil {
			// Blocks reserved past what was written are given back.
			_ = file.Truncate(int64(off))
			file.Close()
			return err
		}
	}
	return file.Close()
}

// emptyForReplace empties a file fs/open opened for replace, as the
// reference's O_TRUNC does, but truncates only a file that has bytes. An
// empty one (a new file, the usual case) only has its modification time
// moved, which is all O_TRUNC does to it: on ext4 a truncate to zero, even
// of an empty file, marks it for writeback at close (auto_da_alloc, as in
// writeWhole), so fs/close paid the writeback of every block written in
// the server's CPU (3.4 % of fs-writeBlock's samples, ~0.1 ms per 1 MiB
// block; docs/performance.md, "Thirteenth round").
func emptyForReplace(file *os.File, st os.FileInfo) error {
	if st.Size() != 0 {
		return file.Truncate(0)
	}
	c, err := file.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		// futimens(fd, {UTIME_OMIT, UTIME_NOW}): mtime and ctime, as
		// O_TRUNC moves them; atime is left alone.
		ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_NOW}}
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if e != 0 {
			serr = &os.PathError{Op: "futimens", Path: file.Name(), Err: e}
		}
	}); err != nil {
		return err
	}
	return serr
}

// preallocMin is the size from which writeWhole reserves a file's blocks
// before writing it.
const preallocMin = 1 << 20

// preallocate reserves n bytes of blocks for file in one call, leaving its
// size alone (FALLOC_FL_KEEP_SIZE: the file still grows only as it is
// written, so a failed write leaves the size a plain write would). ext4 then
// skips its per-page delayed-allocation work: a fresh 16 MiB file cost
// 0.37 s/GB of CPU without, 0.28 with. Best effort: a filesystem without
// fallocate, or without the room, fails or succeeds the writes as before.
func preallocate(file *os.File, n int64) {
	if c, err := file.SyscallConn(); err == nil {
		_ = c.Control(func(fd uintptr) {
			_ = unix.Fallocate(int(fd), unix.FALLOC_FL_KEEP_SIZE, 0, n)
		})
	}
}

// frameSlack is room left after a result for the rest of the frame (the
// closing brace of the response, a newline), so finishing the frame does
// not reallocate a buffer of tens of megabytes.
const frameSlack = 64

// grow makes room for n more bytes with one allocation of exactly the size
// needed (slices.Grow rounds up, and under the race detector it also
// allocates a zeroed temporary of n bytes).
func grow(dst []byte, n int) []byte {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	nd := make([]byte, len(dst), len(dst)+n)
	copy(nd, dst)
	return nd
}

// Package fsys implements the exec-server's fs/* methods: whole-file reads
// and writes, directories, metadata, copy, remove, walk, and handle-based
// block streaming. It knows nothing of transports: the server hands it a
// method name and raw params and gets back a result value or an error.
//
// Every client path goes through fileuri.Parse before anything touches the
// disk. A call with a sandbox policy runs in this process only when the
// policy cannot restrict it (reads under full-disk read, mutations under
// full-disk write, docs/sandbox.md); otherwise it runs confined in the sandbox
// helper (policy.Plan.Run), where the kernel decides, with the reference's
// codes: EROFS outside the writable roots (-32603), EACCES on deny masks
// (-32600), ENOENT for what a restricted read view hides and for a missing
// parent (-32004). When the kernel cannot give the sandbox the call fails
// closed (-32603, naming what is missing). It is safer than the reference on
// purpose: it never removes / or a mount root, never blocks on a FIFO or
// device, caps whole-file transfers, and stops work when the request's
// context ends.
//
// Answers match the reference (codex 0.169.0) request for request, texts
// included, except where this package is deliberately different:
//   - fs/remove refuses / and mount roots (and trees with a mount inside);
//   - FIFOs, sockets and devices are refused (-32600) instead of blocking
//     (so a sandboxed fs/writeFile to a FIFO answers, where the reference
//     hangs);
//   - fs/readFile and fs/writeFile are capped (Options.MaxFileBytes);
//   - fs/copy of a file onto itself leaves it alone (the reference empties it);
//   - createdAtMs is the birth time where the filesystem keeps one (the
//     reference's musl build always says 0);
//   - a negative number is reported with the field's name rather than as
//     "invalid number" (same code, -32602);
//   - paths that are not valid UTF-8 are refused (fileuri.Parse);
//   - under a sandbox, a new path matching a deny glob is refused (-32600
//     "Permission denied") inside the helper; the reference expands deny
//     globs once and lets a new match through;
//   - under a sandbox, fs/remove of a writable root or a protected path
//     (.git, .agents, .codex, .aws), or of a directory holding one, is
//     refused up front (-32600); the reference fails half-way with EBUSY;
//   - under a sandbox policy, fs/readFile and fs/open of a file on procfs
//     run confined even under full-disk read: the client sees the
//     sandbox's /proc, not the server's /proc/self (its environment and
//     descriptors), which the reference serves in-process;
//   - with or without a policy, a file opened here that is in the server's
//     own /proc directory or is one of its secret files is refused (-32600
//     Permission denied, selfproc.go); the reference serves
//     /proc/self/environ;
//   - fs/open with mode "replace" counts as a mutation (confined unless the
//     policy gives full-disk write), not as a read;
//   - a confined operation has a deadline (30 s) and ends with the
//     request; the reference's helper has none.
package fsys

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox/policy"
)

// Options configure an FS. Zero fields take their defaults.
type Options struct {
	// MaxFileBytes caps fs/readFile and fs/writeFile (default 512 MiB).
	// Larger files go through fs/open and blocks.
	MaxFileBytes int64
	// MaxHandles caps the open fs/open handles of one connection (default 128).
	MaxHandles int
}

// Defaults.
const (
	DefaultMaxFileBytes = 512 << 20
	DefaultMaxHandles   = 128
)

// FS serves the fs/* methods. It is shared by all connections and safe for
// concurrent use; per-connection state lives in Handles.
type FS struct {
	opts    Options
	methods map[string]func(context.Context, *Handles, json.RawMessage) (any, error)
	mounts  mountTable
	// confined: this FS serves inside the sandbox helper, where every call
	// runs as it is; deny refuses new paths matching a deny glob there.
	confined bool
	deny     guard
}

// New returns an FS with opts (zero fields take defaults).
func New(opts Options) *FS {
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = DefaultMaxFileBytes
	}
	if opts.MaxHandles <= 0 {
		opts.MaxHandles = DefaultMaxHandles
	}
	f := &FS{opts: opts, mounts: mountTable{path: "/proc/self/mountinfo"}}
	f.methods = map[string]func(context.Context, *Handles, json.RawMessage) (any, error){
		protocol.MethodFsReadFile:        f.readFile,
		protocol.MethodFsWriteFile:       f.writeFile,
		protocol.MethodFsCreateDirectory: f.createDirectory,
		protocol.MethodFsGetMetadata:     f.getMetadata,
		protocol.MethodFsCanonicalize:    f.canonicalize,
		protocol.MethodFsReadDirectory:   f.readDirectory,
		protocol.MethodFsRemove:          f.remove,
		protocol.MethodFsCopy:            f.copy,
		protocol.MethodFsWalk:            f.walk,
		protocol.MethodFsOpen:            f.open,
		protocol.MethodFsReadBlock:       f.readBlock,
		protocol.MethodFsWriteBlock:      f.writeBlock,
		protocol.MethodFsClose:           f.closeHandle,
	}
	return f
}

// Methods lists the method names Call serves.
func (f *FS) Methods() []string {
	return []string{
		protocol.MethodFsReadFile,
		protocol.MethodFsWriteFile,
		protocol.MethodFsCreateDirectory,
		protocol.MethodFsGetMetadata,
		protocol.MethodFsCanonicalize,
		protocol.MethodFsReadDirectory,
		protocol.MethodFsRemove,
		protocol.MethodFsCopy,
		protocol.MethodFsWalk,
		protocol.MethodFsOpen,
		protocol.MethodFsReadBlock,
		protocol.MethodFsWriteBlock,
		protocol.MethodFsClose,
	}
}

// Call decodes params, validates them, runs the operation and returns the
// result value or an error (a *protocol.Error, or an OS error that
// protocol.ToError maps). h is the calling connection's handle table; it may
// be nil for methods other than fs/open, fs/readBlock, fs/writeBlock and
// fs/close. The operation stops early when ctx ends.
func (f *FS) Call(ctx context.Context, h *Handles, method string, params json.RawMessage) (any, error) {
	m, ok := f.methods[method]
	if !ok {
		return nil, protocol.Errorf(protocol.CodeMethodNotFound, "exec-server stub does not implement `%s` yet", method)
	}
	if err := ctx.Err(); err != nil {
		return nil, protocol.Internal("%s cancelled: %v", method, err)
	}
	res, err := m(ctx, h, params)
	if err != nil {
		return nil, toError(ctx, method, err)
	}
	return res, nil
}

// ConsumesParams reports whether method keeps no reference to its params
// once Call returns: fs/writeFile and fs/writeBlock decode their payload
// over the params' own bytes (the request's message) and keep nothing of
// them, not even under a sandbox (the helper gets a copy). The server lets
// the transport reuse such a message's buffer for the next large message.
func ConsumesParams(method string) bool {
	return method == protocol.MethodFsWriteFile || method == protocol.MethodFsWriteBlock
}

// ParamsNote receives, from fs/writeFile and fs/writeBlock (the methods
// that consume their params, ConsumesParams), the members an observer logs,
// taken from the call's own walk of its params: the payload is decoded
// over the params, so a walk after the call would read the decoded data
// (and find a path written inside it), and one before it would pass over
// the payload once more. Filled is false when the params did not decode
// (nothing was decoded over them).
type ParamsNote struct {
	Filled    bool
	Path      string // fs/writeFile's path as sent (a file: URI)
	Sandboxed bool   // a sandbox policy was given
}

type noteKey struct{}

// WithParamsNote returns ctx carrying n, for Call to fill.
func WithParamsNote(ctx context.Context, n *ParamsNote) context.Context {
	return context.WithValue(ctx, noteKey{}, n)
}

// noteParams fills ctx's ParamsNote, if any.
func noteParams(ctx context.Context, path string, sandbox json.RawMessage) {
	if n, _ := ctx.Value(noteKey{}).(*ParamsNote); n != nil {
		*n = ParamsNote{Filled: true, Path: path, Sandboxed: len(sandbox) > 0 && string(sandbox) != "null"}
	}
}

type knownKey struct{}

// WithKnown returns ctx telling Call that known, the body of a string in
// the call's params (between its quotes, aliasing them), was already
// found to hold no quote, no backslash and nothing but ASCII
// (jsonrpc.Message.Bulk): fs/writeFile and fs/writeBlock then pass over
// their payload without scanning it for its end or for escapes. The
// result is the same as without it.
func WithKnown(ctx context.Context, known []byte) context.Context {
	if len(known) == 0 {
		return ctx
	}
	return context.WithValue(ctx, knownKey{}, known)
}

func knownOf(ctx context.Context) []byte {
	k, _ := ctx.Value(knownKey{}).([]byte)
	return k
}

// isKnown reports whether the JSON string value v (with its quotes) is
// known's string.
func isKnown(v, known []byte) bool {
	return len(known) > 0 && len(v) == len(known)+2 && &v[1] == &known[0]
}

// toError maps err to the wire error; cancellation is reported as such rather
// than as whatever OS error the interrupted step produced.
func toError(ctx context.Context, method string, err error) *protocol.Error {
	if ctx.Err() != nil && !isProtocolError(err) {
		return protocol.Internal("%s cancelled: %v", method, ctx.Err())
	}
	return protocol.ToError(err)
}

func isProtocolError(err error) bool {
	_, ok := err.(*protocol.Error)
	return ok
}

// parsePath is the one gate for client paths.
func parsePath(uri string) (string, error) { return fileuri.Parse(uri) }

// decodePathParams decodes params whose required "path" names the file to
// act on, then parses that URI and decides the sandbox (confinement), in the
// reference's order. uri and sb point into p. A nil plan means the call
// runs in this process.
func (f *FS) decodePathParams(raw json.RawMessage, p any, typeName string, uri *string, sb *json.RawMessage, method string, kind opKind) (string, *policy.Plan, error) {
	if err := jsonscan.DecodeParams(raw, p, typeName, "path"); err != nil {
		return "", nil, err
	}
	path, err := parsePath(*uri)
	if err != nil {
		return "", nil, err
	}
	plan, err := f.confinement(method, *sb, kind)
	if err != nil {
		return "", nil, err
	}
	return path, plan, nil
}

// callConfined runs the call in the sandbox helper and returns its result.
func (f *FS) callConfined(ctx context.Context, plan *policy.Plan, method string, raw json.RawMessage) (any, error) {
	res, file, err := f.runConfined(ctx, plan, method, raw)
	if file != nil {
		file.Close()
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// notAFile is the reference's refusal of a path that is not a regular file.
func notAFile(p string) error { return protocol.InvalidRequest("path `%s` is not a file", p) }

// tooLarge explains the whole-file cap and what to use instead.
func tooLarge(method, p string, size, limit int64) error {
	return protocol.InvalidRequest("%s: `%s` is %s, over the %s limit of %d bytes; use fs/open with fs/readBlock or fs/writeBlock for large files",
		method, p, byteCount(size), method, limit)
}

func byteCount(n int64) string {
	if n < 0 {
		return "larger than the limit"
	}
	return fmt.Sprintf("%d bytes", n)
}

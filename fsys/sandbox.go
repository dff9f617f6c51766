package fsys

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
	"github.com/execgo/exec-server/sandbox/policy"
)

// Sandboxed operations (docs/sandbox.md). A call whose params carry a policy
// runs in this process when the policy cannot make a difference to it:
// read-type methods under full-disk read, mutating ones under full-disk
// write. Anything else runs confined: the same method, with the same
// params minus the policy, is handed to a helper process (policy.Plan.Run)
// whose view of the filesystem is the plan's, so that the kernel, not this
// code, decides what is reachable; the helper's answer (result or error)
// comes back as it is. fs/open and fs/readFile under a restricted view open
// the file in the helper and get the descriptor back: the data then moves
// in this process, with no copy through the helper.

// sandboxOpName is the operation fsys registers with the sandbox.
const sandboxOpName = "fs"

// sandboxTimeout bounds one confined operation (helper start included);
// the request's own context can end it earlier. A variable for the tests.
var sandboxTimeout = 30 * time.Second

func init() { sandbox.RegisterOp(sandboxOpName, runInHelper) }

// opKind is what a method does to the filesystem.
type opKind uint8

const (
	opRead  opKind = iota // needs full-disk read to run unconfined
	opWrite               // needs full-disk write to run unconfined
	opAny                 // confined under any policy that restricts the filesystem
)

// resolvePlan and probeSandbox are the sandbox package's (variables for
// the tests).
var (
	resolvePlan  = policy.Resolve
	probeSandbox = sandbox.Probe
)

// confinement decides how a call with the policy sb runs: nil for this
// process, else the plan to run it under. It fails closed: a policy that
// needs the sandbox when the kernel cannot give one is an error that names
// what is missing. Inside the helper every call runs as it is (the helper
// is already confined and gets no policy).
func (f *FS) confinement(method string, sb json.RawMessage, kind opKind) (*policy.Plan, error) {
	if f.confined {
		return nil, nil
	}
	pol, err := policy.Parse(sb)
	if err != nil || pol == nil {
		return nil, err
	}
	return f.confine(method, pol, kind)
}

// confine resolves pol; the plan is nil when kind of operation runs here
// (opAny: only when the policy restricts nothing).
func (f *FS) confine(method string, pol *policy.Policy, kind opKind) (*policy.Plan, error) {
	plan, err := resolvePlan(pol, policy.ServerEnv())
	if err != nil {
		return nil, protocol.ToError(err)
	}
	if (kind == opRead && plan.FullRead) || (plan.FullWrite && kind != opRead) {
		return nil, nil
	}
	if s := probeSandbox(); !s.Available {
		return nil, protocol.Internal("%s needs the filesystem sandbox, which is not available on this server: missing %s", method, s.Missing)
	}
	return plan, nil
}

// openRead opens path for reading (fs/readFile, fs/open "read"): in the
// helper under plan, else here. Under a policy, a file opened here that is
// on procfs is opened again in the helper: full-disk read lets a client
// read everything the sandbox shows, and the sandbox's /proc is its own,
// while this process's /proc/self holds the server's environment and
// descriptors (the reference serves them). The check is on
// the opened descriptor, so no symlink swapped in meanwhile escapes it.
func (f *FS) openRead(ctx context.Context, method string, plan *policy.Plan, sb json.RawMessage, path string) (*os.File, error) {
	if plan != nil {
		return f.confinedOpen(ctx, plan, path, protocol.FsOpenRead)
	}
	file, _, err := openRegular(path, os.O_RDONLY)
	if err != nil || f.confined || !onProcfs(file) {
		return file, err
	}
	pol, err := policy.Parse(sb)
	if err != nil || pol == nil {
		return file, err
	}
	if plan, err = f.confine(method, pol, opAny); err != nil || plan == nil {
		if err != nil {
			file.Close()
			return nil, err
		}
		return file, nil // a policy that restricts nothing
	}
	file.Close()
	return f.confinedOpen(ctx, plan, path, protocol.FsOpenRead)
}

func onProcfs(file *os.File) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(int(file.Fd()), &st) == nil && st.Type == unix.PROC_SUPER_MAGIC
}

// sandboxRequest is what the server hands the helper: a method and its
// params without the policy, and what the helper must enforce itself.
type sandboxRequest struct {
	Method       string          `json:"method"`
	Params       json.RawMessage `json:"params"`
	MaxFileBytes int64           `json:"maxFileBytes"`
	DenyGlobs    []string        `json:"denyGlobs,omitempty"`
}

// sandboxReply is the helper's answer: a result or the call's own error.
type sandboxReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *protocol.Error `json:"error,omitempty"`
}

// runConfined runs method with params (the policy removed) under plan and
// returns its result, its error, and for fs/open the opened file.
func (f *FS) runConfined(ctx context.Context, plan *policy.Plan, method string, params json.RawMessage) (json.RawMessage, *os.File, error) {
	params, _ = jsonscan.CutMember(params, "sandbox")
	req := make([]byte, 0, len(params)+256)
	req = append(req, `{"method":`...)
	req = strconv.AppendQuote(req, method)
	req = append(req, `,"maxFileBytes":`...)
	req = strconv.AppendInt(req, f.opts.MaxFileBytes, 10)
	if len(plan.DenyGlobs) > 0 {
		globs, _ := json.Marshal(plan.DenyGlobs)
		req = append(req, `,"denyGlobs":`...)
		req = append(req, globs...)
	}
	// params last: the helper cuts it out without scanning a big payload
	// twice.
	req = append(req, `,"params":`...)
	req = append(req, params...)
	req = append(req, '}')

	rctx, cancel := context.WithTimeout(ctx, sandboxTimeout)
	defer cancel()
	out, file, err := sandbox.Run(rctx, plan, sandboxOpName, req)
	if err != nil {
		if file != nil {
			file.Close()
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if rctx.Err() != nil {
			return nil, nil, protocol.Internal("fs sandbox helper failed: %s did not finish within %v", method, sandboxTimeout)
		}
		return nil, nil, protocol.Internal("fs sandbox helper failed: %v", err)
	}
	var rep sandboxReply
	if err := json.Unmarshal(out, &rep); err != nil || (rep.Error == nil && rep.Result == nil) {
		if file != nil {
			file.Close()
		}
		if err == nil {
			err = errors.New("neither a result nor an error")
		}
		return nil, nil, protocol.Internal("fs sandbox helper failed: decoding its reply: %v", err)
	}
	if rep.Error != nil {
		if file != nil {
			file.Close()
		}
		return nil, nil, rep.Error
	}
	return rep.Result, file, nil
}

// runInHelper is the helper's side: it runs the call with this package's
// ordinary code, inside the view, and encodes what came of it.
func runInHelper(req []byte) ([]byte, *os.File) {
	rest, params := jsonscan.CutMember(req, "params")
	var r sandboxRequest
	if err := json.Unmarshal(rest, &r); err != nil || params == nil {
		return helperError(protocol.Internal("fs sandbox helper: malformed request: %v", err)), nil
	}
	f := New(Options{MaxFileBytes: r.MaxFileBytes, MaxHandles: 1})
	f.confined = true
	f.deny = guard(r.DenyGlobs)
	h := f.NewHandles()
	res, err := f.Call(context.Background(), h, r.Method, params)
	if err != nil {
		return helperError(protocol.ToError(err)), nil
	}
	out, err := jsonrpc.AppendValue([]byte(`{"result":`), res)
	if err != nil {
		return helperError(protocol.Internal("fs sandbox helper: encoding the result: %v", err)), nil
	}
	out = append(out, '}')
	var file *os.File
	if r.Method == protocol.MethodFsOpen {
		// The one handle fs/open made goes to the server.
		h.mu.Lock()
		for _, fh := range h.files {
			file = fh.file
		}
		h.mu.Unlock()
	}
	return out, file
}

func helperError(e *protocol.Error) []byte {
	b, _ := json.Marshal(sandboxReply{Error: e})
	return b
}

// confinedOpen opens path in the helper (through fs/open's own code) and
// returns the descriptor: mode is "read" or "replace".
func (f *FS) confinedOpen(ctx context.Context, plan *policy.Plan, path, mode string) (*os.File, error) {
	params, _ := json.Marshal(map[string]string{"handleId": "h", "path": fileuri.FromPath(path), "mode": mode})
	_, file, err := f.runConfined(ctx, plan, protocol.MethodFsOpen, params)
	if err != nil {
		return nil, err
	}
	if file == nil {
		return nil, protocol.Internal("fs sandbox helper failed: fs/open returned no file")
	}
	return file, nil
}

// refuseProtectedRemove refuses, before any helper runs, to remove a
// writable root of plan, or a path the plan keeps read-only or masks inside
// one (protected subpaths, read and deny carve-outs), or a directory that
// holds either: the mounts that make them would fail the removal half-way
// (EBUSY), and removing them is never what a confined client may do.
func refuseProtectedRemove(plan *policy.Plan, p string) error {
	targets := []string{p}
	if parent, err := realpath(filepath.Dir(p)); err == nil {
		targets = append(targets, filepath.Join(parent, filepath.Base(p)))
	}
	// names gives the forms of a mount's path to compare: as planned and
	// resolved. A root may be an alias (a symlink) of the directory it
	// makes writable; a protected symlink is masked itself, not its target.
	names := func(m policy.Mount) []string {
		n := []string{m.Path}
		if m.Access == policy.AccessWrite {
			if real, err := realpath(m.Path); err == nil {
				n = append(n, real)
			}
		} else if parent, err := realpath(filepath.Dir(m.Path)); err == nil {
			n = append(n, filepath.Join(parent, filepath.Base(m.Path)))
		}
		return n
	}
	var roots []string
	for _, m := range plan.Mounts {
		if m.Access == policy.AccessWrite && !m.Missing {
			roots = append(roots, names(m)...)
		}
	}
	for _, m := range plan.Mounts {
		var what string
		switch {
		case m.Missing && !m.Protected:
			continue // not in the view
		case m.Access == policy.AccessWrite:
			what = "a writable root of the sandbox"
		case m.Protected:
			what = "a protected path of the sandbox"
		case !withinAny(m.Path, roots):
			continue // the kernel refuses it (EROFS), as the reference does
		case m.Access == policy.AccessRead:
			what = "kept read-only by the sandbox"
		default:
			what = "denied by the sandbox"
		}
		for _, t := range targets {
			for _, n := range names(m) {
				switch {
				case n == t:
					return refuseRemove(p, "it is "+what)
				case within(n, t):
					return refuseRemove(p, "it holds `"+m.Path+"`, which is "+what)
				}
			}
		}
	}
	return nil
}

// within reports whether p is strictly below dir.
func within(p, dir string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func withinAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if within(p, d) {
			return true
		}
	}
	return false
}

// guard holds the deny glob patterns of a plan (policy.Plan.DenyGlobs).
// The sandbox masks the paths that matched when it was built; a guard
// refuses, inside the helper, to create a new one (the reference lets it
// through).
type guard []string

// create checks that creating p (following a dangling symlink, as an open
// with O_CREAT does) makes no path that a deny glob matches, itself or
// through a parent.
func (g guard) create(p string) error {
	if len(g) == 0 {
		return nil
	}
	plan := policy.Plan{DenyGlobs: g}
	for _, c := range newNames(p) {
		if plan.DeniedByGlob(c) {
			return &fs.PathError{Op: "create", Path: p, Err: syscall.EACCES}
		}
	}
	return nil
}

// newNames lists the names under which creating p makes a new entry: none
// when p exists; else p itself (as given and with its parent resolved), or
// for a dangling symlink its final target.
func newNames(p string) []string {
	var names []string
	for hops := 0; hops < 40; hops++ {
		st, err := os.Lstat(p)
		if err == nil {
			if st.Mode()&fs.ModeSymlink == 0 {
				return names
			}
			target, err := os.Readlink(p)
			if err != nil {
				return names
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(p), target)
			}
			p = filepath.Clean(target)
			continue
		}
		names = append(names, p)
		if parent, err := realpath(filepath.Dir(p)); err == nil {
			names = append(names, filepath.Join(parent, filepath.Base(p)))
		}
		return names
	}
	// A symlink loop: the create itself fails with ELOOP.
	return names
}

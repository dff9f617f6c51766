package sandbox

import (
	"context"
	"os"

	"github.com/execgo/exec-server/sandbox/policy"
)

// This file is the kernel side's API (implemented in the *_linux.go files;
// elsewhere every call fails closed).

// Support is what the running kernel offers the sandbox, probed once.
type Support struct {
	// Available: a sandbox can be built. When false, Missing names what is
	// missing (for example "user namespaces (kernel.unprivileged_userns_clone=0)")
	// and every sandboxed request fails with -32603 naming it.
	Available bool
	Missing   string
	// What was found, for the start-up log and environment/info.
	UserNS      bool // needed (and used) when the server is not root
	LandlockABI int  // 0 when Landlock is unavailable
	Seccomp     bool
}

// Spec is how to start a command confined by a plan: start Path with Argv
// and Env in the namespaces Cloneflags asks for (with the ID maps, when
// set) instead of the command itself. The started process is the
// sandbox's init: it builds the view, drops every privilege, becomes PID 1
// of its namespace, runs the command with the requested environment and cwd
// (its own stdin, stdout, stderr and, for a PTY, controlling terminal are
// the command's), ignores signals the command gets through its process
// group, and exits with the command's status (128+N for a signal N) as
// soon as the command exits, taking every other process of the sandbox
// with it.
//
// Release must be called exactly once, after the started process has been
// reaped or when the start failed: it removes what the sandbox needed on
// the host (mount points of missing protected paths).
type Spec struct {
	Path        string
	Argv        []string
	Env         []string
	Cloneflags  uintptr
	UidMappings []IDMap
	GidMappings []IDMap
	Release     func()
}

// IDMap is one line of a user namespace's uid or gid map (as
// syscall.SysProcIDMap, which exists only on Linux).
type IDMap struct{ ContainerID, HostID, Size int }

// OpFunc is an operation that runs inside a confined helper process: it
// gets the request bytes and returns the reply bytes and, optionally, one
// open file to hand to the server (for example the descriptor fs/open
// opened inside the view). It runs after the view is built and privileges
// are dropped, on the thread that dropped them.
type OpFunc func(req []byte) (reply []byte, file *os.File)

// RegisterOp makes fn runnable by Run under name. Call it from an init
// function: the helper process is this binary re-executed, and finds fn
// only if the registering package is linked in.
func RegisterOp(name string, fn OpFunc) { registerOp(name, fn) }

// Run runs the operation registered as name, with req, confined by p: in
// a helper process whose view is p's, with no network and no privileges.
// ctx bounds it (the helper is killed when ctx ends). An error is a
// failure of the helper itself (-32603 material), never the operation's
// own error, which travels in reply.
func Run(ctx context.Context, p *policy.Plan, name string, req []byte) (reply []byte, file *os.File, err error) {
	return run(ctx, p, name, req)
}

// Command returns how to start path with argv, env and working directory
// dir (host paths) confined by p.
func Command(p *policy.Plan, path string, argv, env []string, dir string) (*Spec, error) {
	return command(p, path, argv, env, dir)
}

// StateDirEnv overrides the directory of the registry of mount points that
// CleanStale reads (tests; several servers of one user share the default,
// which is what makes the clean-up work).
const StateDirEnv = "EXEC_SERVER_SANDBOX_STATE_DIR"

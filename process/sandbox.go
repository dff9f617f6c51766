package process

import (
	"encoding/json"
	"errors"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
	"github.com/execgo/exec-server/sandbox/policy"
)

// A process/start with a sandbox parameter runs its command under the
// policy: the spawner (or the server, with DirectChildren) starts the
// sandbox's init (sandbox.Spec) in new namespaces instead of the command;
// the init builds the view, becomes PID 1 of its PID namespace, runs the
// command and exits with its status. Everything else (output, stdin,
// signals to the group, terminate, containment) is the same as for an
// unsandboxed process: the init stays in the process group it was started
// in, ignores the group's signals and dies of SIGKILL like any member,
// taking the whole namespace with it.

// Seams for this package's tests, which stand in for the policy and
// kernel sides to check the wiring on its own: the plan of a sandbox
// parameter, and how to start a command under it.
var (
	planOf      = planFor
	planCommand = sandbox.Command
)

// planFor parses raw and resolves it into a plan; nil, nil when there is
// no sandbox. It never returns a plan the kernel cannot enforce.
func planFor(raw json.RawMessage) (*policy.Plan, error) {
	pol, err := policy.Parse(raw)
	if err != nil || pol == nil {
		return nil, err // Parse's errors are -32602 as they are
	}
	// Windows' native MXC sandbox does not exist on Linux: the reference's
	// refusal, code and text (windowsMxc is false in the capabilities).
	if pol.WindowsSandboxLevel == "mxc" {
		return nil, protocol.InvalidParams("native MXC is unavailable on this executor").WithKind(protocol.KindSandboxUnavailable)
	}
	// Fail closed: never run with less confinement than asked for.
	if s := sandbox.Probe(); !s.Available {
		return nil, protocol.Internal("sandbox not available: missing %s", s.Missing).WithKind(protocol.KindSandboxUnavailable)
	}
	plan, err := policy.Resolve(pol, policy.ServerEnv())
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			// Validation errors (-32600, -32602) carry no kind, as the
			// reference's; a failure to resolve a valid policy is a
			// preparation failure.
			if pe.Code == protocol.CodeInternal && pe.Kind() == "" {
				return nil, (&protocol.Error{Code: pe.Code, Message: pe.Message}).WithKind(protocol.KindSandboxPreparation)
			}
			return nil, pe
		}
		return nil, protocol.Internal("sandbox: %v", err).WithKind(protocol.KindSandboxPreparation)
	}
	return plan, nil
}

// checkExecutable reports, as an exec would, why path cannot be run. The
// init execs the command inside the view, where a failure is only an exit
// status; checking on the host first keeps the unsandboxed error (the view
// shows host paths, so what is missing here is missing there too).
func checkExecutable(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return syscall.EACCES
	}
	return unix.Access(path, unix.X_OK)
}

// commandError maps a Plan.Command error: a missing kernel feature is
// -32603 naming it (sandboxUnavailable), another set-up failure -32603
// sandboxPreparation; a program or cwd that is missing (or invisible in the
// view) is the spawn error a start without a sandbox gets.
func commandError(err error) error {
	var errno syscall.Errno
	switch {
	case errors.Is(err, sandbox.ErrUnavailable):
		return protocol.Internal("%v", err).WithKind(protocol.KindSandboxUnavailable)
	case errors.As(err, &errno):
		return protocol.SpawnError(err)
	}
	return protocol.Internal("sandbox: %v", err).WithKind(protocol.KindSandboxPreparation)
}

// onceFunc makes f safe to call more than once; it runs the first time
// only (Spec.Release must run exactly once).
func onceFunc(f func()) func() {
	if f == nil {
		return func() {}
	}
	return sync.OnceFunc(f)
}

// idMaps converts the sandbox's ID maps to the syscall package's.
func idMaps(m []sandbox.IDMap) []syscall.SysProcIDMap {
	if len(m) == 0 {
		return nil
	}
	out := make([]syscall.SysProcIDMap, len(m))
	for i, e := range m {
		out[i] = syscall.SysProcIDMap{ContainerID: e.ContainerID, HostID: e.HostID, Size: e.Size}
	}
	return out
}

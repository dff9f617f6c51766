package policy

import "os"

// This file is the contract between what a sandbox allows and how the
// kernel enforces it:
//
//   - policy.go / resolve.go: the wire policy (Parse) and its resolution into
//     a Plan of concrete host paths (Resolve);
//   - package sandbox (sandbox/confine_linux.go and friends): the kernel
//     side, which builds the view a Plan describes in fresh namespaces and
//     runs a command (sandbox.Command) or a registered in-process operation
//     (sandbox.Run) inside it;
//   - denied.go: the sandboxDenied heuristic.
//
// A Plan is plain data: it can be marshalled to JSON and handed to the
// re-executed helper, which trusts it (the server built it).

// Access is what a path of the view allows.
type Access uint8

const (
	// AccessNone: invisible (as a root) or masked (as a mount): an empty,
	// mode-000 file or read-only directory stands in its place.
	AccessNone Access = iota
	// AccessRead: visible, read-only.
	AccessRead
	// AccessWrite: visible, read-write.
	AccessWrite
)

func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	}
	return "none"
}

// Network is the network a sandboxed process may use.
type Network uint8

const (
	// NetworkRestricted: no network at all but AF_UNIX (a network
	// namespace and seccomp).
	NetworkRestricted Network = iota
	// NetworkEnabled: the host's network (seccomp still denies AF_VSOCK
	// and io_uring).
	NetworkEnabled
	// NetworkProxied: a network namespace with only loopback, on which
	// the init opens the managed proxy's listeners and hands them to the
	// server (Plan.Proxy; netns_linux.go). seccomp and Landlock treat it as
	// NetworkEnabled (TCP to the listeners), the namespace cuts the rest.
	NetworkProxied
)

// Mount is one path of the view that differs from its parent's access.
type Mount struct {
	Path   string `json:"path"`   // absolute and lexically clean
	Access Access `json:"access"` // as the most specific entry decided
	// Protected marks a protected subpath of a writable root (.git,
	// .agents, .codex, .aws, a gitdir pointer's target): always AccessRead,
	// kept read-only even when missing.
	Protected bool `json:"protected,omitempty"`
	// Missing: the path did not exist when the plan was resolved. A missing
	// Protected path is masked by an empty read-only directory (its mount
	// point is created on the host for the sandbox's lifetime and removed
	// afterwards); any other missing mount is skipped.
	Missing bool `json:"missing,omitempty"`
	// Dir is true when the path is (or, missing, stands for) a directory;
	// a file deny mask is an empty mode-000 file.
	Dir bool `json:"dir,omitempty"`
}

// Plan is a resolved policy: what the sandbox's view of the filesystem and
// network is, in host paths.
type Plan struct {
	// Root is the access of "/" itself: AccessRead (a read-only view of
	// the whole host: full-disk read), AccessWrite (writable: the
	// filesystem is not restricted, only the network and the process may
	// be) or AccessNone (an empty root in which only Mounts and the
	// platform minimum, /bin /sbin /lib /lib64 /usr /etc, are visible).
	Root Access `json:"root"`
	// Mounts, shallowest first: a deeper mount overrides a shallower one,
	// so applying them in order gives most-specific-wins.
	Mounts []Mount `json:"mounts,omitempty"`
	// Network is what the network allows.
	Network Network `json:"network"`
	// DenyGlobs are the absolute patterns of deny glob entries (path.Match
	// syntax per component, "**" for any number of components). Existing
	// matches are already in Mounts; fs operations also refuse a new path
	// that matches one.
	DenyGlobs []string `json:"denyGlobs,omitempty"`
	// FullRead: every path is readable (restricted with a root read or
	// write entry and no deny entry; unrestricted, disabled, external).
	// Read-type fs operations then run in the server itself.
	FullRead bool `json:"fullRead"`
	// FullWrite: every path is writable (a root write entry and nothing
	// narrower; unrestricted, disabled, external). Mutating fs operations
	// then run in the server itself.
	//
	// Neither flag counts the masks of the server's own secrets
	// (SetServerSecrets), which every plan has: code that runs in the
	// server refuses those files itself (Secret).
	FullWrite bool `json:"fullWrite"`
	// Cwd is the context's cwd (a host path), "" when absent.
	Cwd string `json:"cwd,omitempty"`
	// AllowUnixSockets are the pathname AF_UNIX sockets outside the
	// writable roots that a command may connect to with the network
	// enabled (canonical host paths; the server's AllowUnixSocketsEnv).
	AllowUnixSockets []string `json:"allowUnixSockets,omitempty"`
	// CreationLock is the machine-wide lock file of deny-glob creations
	// (set by the server for its helpers; see sandbox/notify_lock_linux.go).
	CreationLock string `json:"creationLock,omitempty"`
	// PidsMax bounds the processes of a command's sandbox (0: none);
	// PidsCgroup is the cgroup.procs file of its own pids cgroup ("" when
	// the server could make none: a server that is not root then uses
	// RLIMIT_NPROC, counted per user namespace). Set by the server.
	PidsMax    int    `json:"pidsMax,omitempty"`
	PidsCgroup string `json:"pidsCgroup,omitempty"`
	// Proxy, with NetworkProxied, says where the init opens the proxy's
	// listeners and how it hands them over.
	Proxy *ProxyRoute `json:"proxy,omitempty"`
}

// ProxyRoute is how a NetworkProxied sandbox reaches the managed proxy:
// the init listens on 127.0.0.1:HTTPPort (and SOCKSPort when not 0) in
// the command's network namespace and sends those listening sockets over
// the unix socket at Socket (a host path) to the server, which accepts
// the command's connections on them.
type ProxyRoute struct {
	Socket    string `json:"socket"`
	HTTPPort  uint16 `json:"httpPort"`
	SOCKSPort uint16 `json:"socksPort,omitempty"`
	// TransparentPort, when not 0, routes the namespace's raw TCP to
	// 127.0.0.1 and [::1] on this port, whose two listeners follow the
	// others (transparent_linux.go).
	TransparentPort uint16 `json:"transparentPort,omitempty"`
}

// Env is what resolution needs from the server.
type Env struct {
	// TempDir is the server's TMPDIR ("" for none): what the tmpdir
	// special path resolves to when the context has no
	// temporaryDirectories.
	TempDir string
	// Secrets are the server's own secret paths (SetServerSecrets),
	// masked in every plan (secrets.go).
	Secrets []string
}

// ServerEnv is the Env of this process: its TMPDIR and its secrets.
func ServerEnv() Env { return Env{TempDir: os.Getenv("TMPDIR"), Secrets: ServerSecrets()} }

// SandboxTypeLinux is the sandboxType answered when a process/start ran
// under a policy (any policy, as the reference: even disabled).
const SandboxTypeLinux = "linuxSeccomp"

package protocol

import "encoding/json"

// Method names, client to server.
const (
	MethodInitialize        = "initialize"
	MethodInitialized       = "initialized" // notification
	MethodEnvironmentInfo   = "environment/info"
	MethodEnvironmentStatus = "environment/status"

	MethodProcessStart     = "process/start"
	MethodProcessRead      = "process/read"
	MethodProcessWrite     = "process/write"
	MethodProcessSignal    = "process/signal"
	MethodProcessTerminate = "process/terminate"
	// MethodProcessCloseStdin is an extension of this server: it ends a
	// process's input. The reference answers -32601.
	MethodProcessCloseStdin = "process/closeStdin"
	// MethodProcessResize is an extension of this server: it resizes a
	// process's PTY. The reference answers -32601.
	MethodProcessResize = "process/resize"
	// MethodProcessList is an extension of this server: it lists the
	// session's processes. The reference answers -32601.
	MethodProcessList = "process/list"

	MethodFsReadFile        = "fs/readFile"
	MethodFsWriteFile       = "fs/writeFile"
	MethodFsCreateDirectory = "fs/createDirectory"
	MethodFsGetMetadata     = "fs/getMetadata"
	MethodFsCanonicalize    = "fs/canonicalize"
	MethodFsReadDirectory   = "fs/readDirectory"
	MethodFsRemove          = "fs/remove"
	MethodFsCopy            = "fs/copy"
	MethodFsWalk            = "fs/walk"
	MethodFsOpen            = "fs/open"
	MethodFsReadBlock       = "fs/readBlock"
	MethodFsWriteBlock      = "fs/writeBlock"
	MethodFsClose           = "fs/close"

	// MethodFsWatchMissing is the reference's: it reports, once, when a
	// missing path appears (NotifyFsMissingChanged).
	MethodFsWatchMissing = "fs/watchMissing"
	// MethodFsWatch and MethodFsUnwatch are an extension of this server
	// (README "Filesystem watches"): changes under a path arrive as
	// NotifyFsChanged. The reference answers -32601.
	MethodFsWatch   = "fs/watch"
	MethodFsUnwatch = "fs/unwatch"

	// MethodEnvironmentConfigRead is the reference's environmentConfig/read:
	// the executor's CODEX_HOME configuration and skills.
	MethodEnvironmentConfigRead = "environmentConfig/read"

	// MethodHTTPRequest is the reference's http/request: the executor makes
	// an HTTP call for the client; a streamed body follows the result as
	// NotifyHTTPRequestBodyDelta notifications.
	MethodHTTPRequest = "http/request"
)

// Notification names, server to client.
const (
	NotifyProcessOutput = "process/output"
	NotifyProcessExited = "process/exited"
	NotifyProcessClosed = "process/closed"

	// NotifyFsMissingChanged answers MethodFsWatchMissing.
	NotifyFsMissingChanged = "fs/missingChanged"
	// NotifyFsChanged carries the changes of a MethodFsWatch watch.
	NotifyFsChanged = "fs/changed"
	// NotifyHTTPRequestBodyDelta carries a streamed MethodHTTPRequest body.
	NotifyHTTPRequestBodyDelta = "http/request/bodyDelta"
)

// Output stream names.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamPTY    = "pty"
)

// InitializeParams are the params of initialize.
type InitializeParams struct {
	ClientName      string  `json:"clientName"`
	ResumeSessionID *string `json:"resumeSessionId,omitempty"`
}

// InitializeResult is the result of initialize.
type InitializeResult struct {
	SessionID       string          `json:"sessionId"`
	EnvironmentInfo EnvironmentInfo `json:"environmentInfo"`
}

// Shell names the user's default shell.
type Shell struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// EnvironmentInfo describes the machine the server runs on.
type EnvironmentInfo struct {
	Shell                Shell        `json:"shell"`
	ExecutorVersion      string       `json:"executorVersion"`
	ProviderID           string       `json:"providerId,omitempty"`
	Cwd                  string       `json:"cwd"`
	UserHomeDir          string       `json:"userHomeDir"`
	PlatformOS           string       `json:"platformOs"`
	PrependPathDirs      []string     `json:"prependPathDirs"`
	TemporaryDirectories []string     `json:"temporaryDirectories"`
	TempDir              string       `json:"tempDir"`
	Capabilities         Capabilities `json:"capabilities"`
}

// EnvironmentStatus is the result of environment/status.
type EnvironmentStatus struct {
	Status string `json:"status"`
}

// StartParams are the params of process/start.
type StartParams struct {
	ProcessID string            `json:"processId"`
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env"`
	TTY       bool              `json:"tty"`
	PipeStdin bool              `json:"pipeStdin,omitempty"`
	Arg0      *string           `json:"arg0,omitempty"`
	EnvPolicy json.RawMessage   `json:"envPolicy,omitempty"`
	Sandbox   json.RawMessage   `json:"sandbox,omitempty"`
	// Rows and Cols (an extension) set a PTY's initial size; default 24x80.
	Rows *uint16 `json:"rows,omitempty"`
	Cols *uint16 `json:"cols,omitempty"`
	// TimeoutMs (an extension) kills the process's tree once it has run
	// this long; its exit then carries timedOut. 1..MaxTimeoutMs.
	TimeoutMs *uint64 `json:"timeoutMs,omitempty"`
	// EnforceManagedNetwork, ManagedNetwork and NetworkProxy ask for the
	// command's network to go through a managed proxy (the reference's
	// networkProxyLaunch). A start carrying any of them is never run with
	// open network: see process/network.go.
	EnforceManagedNetwork bool            `json:"enforceManagedNetwork,omitempty"`
	ManagedNetwork        json.RawMessage `json:"managedNetwork,omitempty"`
	NetworkProxy          json.RawMessage `json:"networkProxy,omitempty"`
	// ShellSnapshot asks for the login shell's state to be captured once
	// per scope and replayed instead of running the login profile
	// (shellSnapshotV2).
	ShellSnapshot *ShellSnapshotRequest `json:"shellSnapshot,omitempty"`
}

// EnvPolicy is process/start's optional envPolicy: the shell-environment
// policy applied to the server's environment before StartParams.Env.
type EnvPolicy struct {
	Inherit               string            `json:"inherit"` // all | core | none
	IgnoreDefaultExcludes bool              `json:"ignoreDefaultExcludes"`
	Exclude               []string          `json:"exclude"`
	Set                   map[string]string `json:"set"`
	IncludeOnly           []string          `json:"includeOnly"`
}

// ShellSnapshotRequest is process/start's shellSnapshot: the scope that
// owns the cached state (codex: "<threadId>:<environmentId>") and the
// shell that captures and restores it.
type ShellSnapshotRequest struct {
	ScopeID string `json:"scopeId"`
	Shell   Shell  `json:"shell"`
}

// MaxTimeoutMs bounds process/start's timeoutMs (7 days).
const MaxTimeoutMs = 7 * 24 * 3600 * 1000

// MaxGraceMs bounds process/terminate's graceMs (5 minutes).
const MaxGraceMs = 5 * 60 * 1000

// StartResult is the result of process/start.
type StartResult struct {
	ProcessID   string `json:"processId"`
	SandboxType string `json:"sandboxType"`
}

// ReadParams are the params of process/read.
type ReadParams struct {
	ProcessID string  `json:"processId"`
	AfterSeq  *uint64 `json:"afterSeq,omitempty"`
	MaxBytes  *uint64 `json:"maxBytes,omitempty"`
	WaitMs    *uint64 `json:"waitMs,omitempty"`
}

// Chunk is one retained output chunk. Data is base64 on the wire.
type Chunk struct {
	Seq    uint64 `json:"seq"`
	Stream string `json:"stream"`
	Chunk  []byte `json:"chunk"`
}

// ReadResult is the result of process/read.
type ReadResult struct {
	Chunks        []Chunk `json:"chunks"`
	NextSeq       uint64  `json:"nextSeq"`
	Exited        bool    `json:"exited"`
	ExitCode      *int    `json:"exitCode"`
	Closed        bool    `json:"closed"`
	Failure       *string `json:"failure"`
	SandboxDenied bool    `json:"sandboxDenied"`
	// TimedOut (an extension) is present only when the process was killed
	// by its timeoutMs.
	TimedOut bool `json:"timedOut,omitempty"`
}

// WriteParams are the params of process/write. WriteID is required by the
// reference; this server accepts its absence.
type WriteParams struct {
	ProcessID string  `json:"processId"`
	Chunk     Base64  `json:"chunk"`
	WriteID   *string `json:"writeId,omitempty"`
}

// Write statuses.
const (
	WriteAccepted       = "accepted"
	WriteUnknownProcess = "unknownProcess"
	WriteStdinClosed    = "stdinClosed"
	WriteStarting       = "starting"
)

// WriteResult is the result of process/write.
type WriteResult struct {
	Status string `json:"status"`
}

// SignalParams are the params of process/signal.
type SignalParams struct {
	ProcessID string `json:"processId"`
	Signal    string `json:"signal"`
}

// TerminateParams are the params of process/terminate.
type TerminateParams struct {
	ProcessID string `json:"processId"`
	// GraceMs (an extension): SIGTERM to the process group first, and the
	// SIGKILL of the whole tree only after this long if it still runs.
	// 0..MaxGraceMs. Absent: the reference's immediate SIGKILL.
	GraceMs *uint64 `json:"graceMs,omitempty"`
}

// CloseStdinParams are the params of process/closeStdin.
type CloseStdinParams struct {
	ProcessID string `json:"processId"`
}

// ResizeParams are the params of process/resize.
type ResizeParams struct {
	ProcessID string `json:"processId"`
	Rows      uint16 `json:"rows"`
	Cols      uint16 `json:"cols"`
}

// TerminateResult is the result of process/terminate.
type TerminateResult struct {
	Running bool `json:"running"`
}

// OutputNotification is process/output.
type OutputNotification struct {
	ProcessID string `json:"processId"`
	Seq       uint64 `json:"seq"`
	Stream    string `json:"stream"`
	Chunk     []byte `json:"chunk"`
}

// ExitedNotification is process/exited.
type ExitedNotification struct {
	ProcessID     string `json:"processId"`
	Seq           uint64 `json:"seq"`
	ExitCode      int    `json:"exitCode"`
	SandboxDenied *bool  `json:"sandboxDenied,omitempty"`
	TimedOut      bool   `json:"timedOut,omitempty"` // an extension
}

// ClosedNotification is process/closed.
type ClosedNotification struct {
	ProcessID string `json:"processId"`
	Seq       uint64 `json:"seq"`
}

// Process states in process/list.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StateExited   = "exited"
	StateClosed   = "closed"
)

// ProcessInfo is one process in process/list's result.
type ProcessInfo struct {
	ProcessID   string   `json:"processId"`
	Argv        []string `json:"argv"`
	Pid         int      `json:"pid"` // 0 while starting
	TTY         bool     `json:"tty"`
	State       string   `json:"state"`
	StartedAtMs int64    `json:"startedAtMs"` // Unix milliseconds
	ExitedAtMs  *int64   `json:"exitedAtMs,omitempty"`
	ExitCode    *int     `json:"exitCode,omitempty"`
	Sandboxed   bool     `json:"sandboxed,omitempty"`
	TimedOut    bool     `json:"timedOut,omitempty"`
}

// ListResult is the result of process/list (an extension).
type ListResult struct {
	Processes []ProcessInfo `json:"processes"`
}

// Empty is the {} result.
type Empty struct{}

package client

import (
	"context"
	"encoding/json"
	"fmt"
	"path"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/protocol"
)

// SandboxMode is one of the sandbox modes of the codex agent.
type SandboxMode string

const (
	// SandboxReadOnly: the whole filesystem is readable, nothing writable
	// (codex's default mode).
	SandboxReadOnly SandboxMode = "read-only"
	// SandboxWorkspaceWrite: the working directory, the WritableRoots,
	// /tmp and $TMPDIR are writable, except .git, .agents, .codex and .aws
	// under them (codex -s workspace-write).
	SandboxWorkspaceWrite SandboxMode = "workspace-write"
)

// Sandbox asks the server to confine a process (Cmd.Sandbox) or fs calls
// (WithSandbox) with its kernel sandbox. It is sent as the request's
// sandbox member, the same policy object codex sends in that mode, so any
// server that confines codex confines these requests alike. A server that
// cannot enforce it refuses the request (an *Error); it never runs it
// with less confinement.
type Sandbox struct {
	Mode SandboxMode
	// WritableRoots are further absolute server paths writable in
	// SandboxWorkspaceWrite (codex --add-dir); refused with SandboxReadOnly.
	WritableRoots []string
	// Network allows network access; without it only AF_UNIX sockets work.
	Network bool
	// Cwd is the working directory the policy is relative to (its project
	// root); default the Cmd's Cwd, else the server's working directory.
	Cwd string
}

// policyEntry is one file_system entry of a managed policy.
type policyEntry struct {
	Path    policyPath `json:"path"`
	Access  string     `json:"access"`
	Missing string     `json:"missing_path_behavior,omitempty"`
}

type policyPath struct {
	Type  string         `json:"type"`
	Value policySpecPath `json:"value"`
}

type policySpecPath struct {
	Kind    string `json:"kind"`
	Subpath string `json:"subpath,omitempty"`
}

func special(kind, subpath, access, missing string) policyEntry {
	return policyEntry{Path: policyPath{Type: "special", Value: policySpecPath{Kind: kind, Subpath: subpath}}, Access: access, Missing: missing}
}

// policy renders the sandbox member for a request whose working
// directory is cwd (a file: URI). fsCall adds the members codex adds on
// fs calls (policyContext, userHomeDir).
func (s *Sandbox) policy(cwd, home string, fsCall bool) (json.RawMessage, error) {
	if s == nil {
		return nil, nil
	}
	if s.Cwd != "" {
		if !path.IsAbs(s.Cwd) {
			return nil, fmt.Errorf("exec-server client: Sandbox.Cwd %q is not an absolute path", s.Cwd)
		}
		cwd = fileuri.FromPath(s.Cwd)
	}
	entries := []policyEntry{special("root", "", "read", "")}
	switch s.Mode {
	case SandboxReadOnly:
		if len(s.WritableRoots) > 0 {
			return nil, fmt.Errorf("exec-server client: Sandbox: WritableRoots need %s, not %s", SandboxWorkspaceWrite, s.Mode)
		}
	case SandboxWorkspaceWrite:
		entries = append(entries,
			special("project_roots", "", "write", ""),
			special("slash_tmp", "", "write", ""),
			special("tmpdir", "", "write", ""))
		for _, sub := range []string{".git", ".agents", ".codex", ".aws"} {
			entries = append(entries, special("project_roots", sub, "read", "skip"))
		}
	default:
		return nil, fmt.Errorf("exec-server client: Sandbox: unknown Mode %q (want %s or %s)", s.Mode, SandboxReadOnly, SandboxWorkspaceWrite)
	}
	roots := []string{cwd}
	for _, r := range s.WritableRoots {
		if !path.IsAbs(r) {
			return nil, fmt.Errorf("exec-server client: Sandbox: writable root %q is not an absolute path", r)
		}
		roots = append(roots, fileuri.FromPath(r))
	}
	network := "restricted"
	if s.Network {
		network = "enabled"
	}
	type permissions struct {
		Type       string `json:"type"`
		FileSystem struct {
			Type    string        `json:"type"`
			Entries []policyEntry `json:"entries"`
		} `json:"file_system"`
		Network string `json:"network"`
	}
	var perm permissions
	perm.Type, perm.FileSystem.Type, perm.FileSystem.Entries, perm.Network = "managed", "restricted", entries, network
	type policyContext struct {
		Cwd            string   `json:"cwd"`
		WorkspaceRoots []string `json:"workspaceRoots"`
	}
	if fsCall {
		// The member order codex sends on fs calls.
		return json.Marshal(struct {
			Permissions       permissions   `json:"permissions"`
			Cwd               string        `json:"cwd"`
			PolicyContext     policyContext `json:"policyContext"`
			WorkspaceRoots    []string      `json:"workspaceRoots"`
			UserHomeDir       string        `json:"userHomeDir,omitempty"`
			WindowsSandbox    string        `json:"windowsSandboxLevel"`
			UseLegacyLandlock bool          `json:"useLegacyLandlock"`
		}{perm, cwd, policyContext{cwd, roots}, roots, home, "disabled", false})
	}
	return json.Marshal(struct {
		Permissions       permissions `json:"permissions"`
		Cwd               string      `json:"cwd"`
		WorkspaceRoots    []string    `json:"workspaceRoots"`
		WindowsSandbox    string      `json:"windowsSandboxLevel"`
		WindowsProxyMode  string      `json:"windowsSandboxProxySettingsMode"`
		UseLegacyLandlock bool        `json:"useLegacyLandlock"`
	}{perm, cwd, roots, "disabled", "reconcile", false})
}

type sandboxKey struct{}

// WithSandbox returns a context under which this package's fs calls
// (ReadFile, WriteFile, Stat, ReadDir, Walk, Remove, Mkdir, Copy, Rename,
// Canonicalize, Upload, Download and the FS adapter) carry s: the server
// runs each confined, as codex's fs calls in workspace-write. Processes
// take their sandbox from Cmd.Sandbox instead.
func WithSandbox(ctx context.Context, s *Sandbox) context.Context {
	return context.WithValue(ctx, sandboxKey{}, s)
}

// fsSandbox is the sandbox member for an fs call made with ctx, or nil.
func (c *Client) fsSandbox(ctx context.Context) (json.RawMessage, error) {
	s, _ := ctx.Value(sandboxKey{}).(*Sandbox)
	if s == nil {
		return nil, nil
	}
	return s.policy(c.Info().Cwd, c.Info().UserHomeDir, true)
}

// sandboxMethods are the fs methods that take a sandbox member.
var sandboxMethods = map[string]bool{
	protocol.MethodFsReadFile: true, protocol.MethodFsWriteFile: true, protocol.MethodFsCreateDirectory: true,
	protocol.MethodFsGetMetadata: true, protocol.MethodFsCanonicalize: true, protocol.MethodFsReadDirectory: true,
	protocol.MethodFsRemove: true, protocol.MethodFsCopy: true, protocol.MethodFsWalk: true, protocol.MethodFsOpen: true,
}

// sandboxed adds ctx's sandbox (WithSandbox) to the params of an fs call
// that takes one: the params' JSON object with a "sandbox" member added
// (every such params type omits an empty one).
func (c *Client) sandboxed(ctx context.Context, method string, params any) (any, error) {
	if !sandboxMethods[method] {
		return params, nil
	}
	sb, err := c.fsSandbox(ctx)
	if err != nil || sb == nil {
		return params, err
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("exec-server client: %s params are not an object", method)
	}
	out := append(b[:len(b)-1:len(b)-1], []byte(`,"sandbox":`)...)
	if len(b) == 2 {
		out = []byte(`{"sandbox":`)
	}
	out = append(append(out, sb...), '}')
	return json.RawMessage(out), nil
}

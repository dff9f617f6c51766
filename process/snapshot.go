package process

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/execgo/exec-server/protocol"
)

// Shell snapshots (process/start's shellSnapshot, the shellSnapshotV2
// capability). codex runs every command as [shell, "-lc", script], so the
// login profile runs again for each one (nvm, conda, pyenv: often seconds).
// With a snapshot the session captures, once per scope, what the profile
// leaves behind (exported variables, functions, aliases, shell options) by
// running the login shell with a capture script in the command's own cwd,
// environment and sandbox; later commands start the shell without its
// startup files and restore that state first. A capture that fails, times
// out or is too large leaves the command unchanged (retried up to three
// times, a second apart), as the reference does (openai/codex
// codex-rs/exec-server/src/shell_snapshot.rs; texts and limits are its).
//
// The state travels in environment variables of at most 60 KiB each,
// expanded by an eval in the replay script (the reference's replay for sh;
// for bash and zsh it passes an inherited descriptor instead, which the
// sandbox's init and the spawner would have to carry through).

const (
	snapshotMaxEntries  = 16
	snapshotMaxState    = 512 << 10
	snapshotMaxCapture  = 8 * snapshotMaxState
	snapshotChunkBytes  = 60 << 10
	snapshotMaxScope    = 256
	snapshotTimeout     = 10 * time.Second
	snapshotBackoff     = time.Second
	snapshotMaxAttempts = 3
	snapshotStateVar    = "__CODEX_SHELL_SNAPSHOT_STATE_"
	snapshotBegin       = "\x00CODEX_SNAPSHOT_BEGIN\x00"
	snapshotStateMark   = "CODEX_SNAPSHOT_STATE"
)

// snapshotSkipEnv are variables a snapshot never carries: they describe
// the capturing shell, not the profile.
var snapshotSkipEnv = []string{"PWD", "OLDPWD", "SHLVL", "_"}

// The capture scripts print a marker, the exported variables as NAME=VALUE
// records ended by NUL, an empty record, the state marker, then shell code
// that restores functions, aliases and options. What the profile itself
// printed comes before the marker and is ignored.
var snapshotCapture = map[string]string{
	"bash": `printf '\0%s\0' CODEX_SNAPSHOT_BEGIN
for __codex_n in $(compgen -e); do printf '%s=%s\0' "$__codex_n" "${!__codex_n}"; done
printf '\0%s\0' ` + snapshotStateMark + `
declare -f
alias -p
shopt -p
`,
	"zsh": `printf '\0%s\0' CODEX_SNAPSHOT_BEGIN
for __codex_n in ${(k)parameters[(R)*export*]}; do printf '%s=%s\0' "$__codex_n" "${(P)__codex_n}"; done
printf '\0%s\0' ` + snapshotStateMark + `
typeset -f
alias -L
for __codex_o in $(setopt); do printf 'setopt %s\n' "$__codex_o"; done
`,
}

// snapshotReplayHead is what the replay runs before restoring: the flag that
// keeps the shell from reading startup files, and a first line.
var snapshotReplayHead = map[string][2]string{
	"bash": {"-pc", "set +o privileged\n"},
	"zsh":  {"-fc", "setopt RCS\n"},
}

// snapshotNotRestored are state lines that describe the capturing shell
// and cannot (or must not) be set again.
var snapshotNotRestored = []string{
	"shopt -u login_shell", "shopt -s login_shell",
	"setopt interactive", "setopt login", "setopt shinstdin", "setopt monitor", "setopt zle",
	"setopt privileged", "setopt restricted", "setopt singlecommand", "setopt norcs",
}

type shellSnapshot struct {
	env   map[string]string
	state string
}

// snapshotAttempt is one capture: done is closed once snap is set (nil
// when the capture failed).
type snapshotAttempt struct {
	done    chan struct{}
	snap    *shellSnapshot
	retryAt time.Time
}

type snapshotKey struct {
	scope, name, path, cwd string
	envPolicy, sandbox     string
}

type snapshotEntry struct {
	key      snapshotKey
	attempts int
	cur      *snapshotAttempt
}

// snapshots is a session's cache, most recently used last.
type snapshots struct {
	mu      sync.Mutex
	entries []*snapshotEntry
	closed  bool
	capMgr  *Manager // runs the captures; its events go to capSink
	capSink *captureSink
	ids     atomic.Uint64
}

// prepare returns the argv and environment that start sp's command from
// its scope's snapshot, or sp's own when no snapshot applies. Only a bad
// shellSnapshot is an error.
func (s *snapshots) prepare(m *Manager, sp protocol.StartParams, env []string) ([]string, []string, error) {
	req := sp.ShellSnapshot
	if len(req.ScopeID) == 0 || len(req.ScopeID) > snapshotMaxScope {
		return nil, nil, protocol.InvalidParams("shell snapshot scope must be non-empty and at most %d bytes", snapshotMaxScope)
	}
	if len(sp.Argv) < 3 || sp.Argv[0] != req.Shell.Path || sp.Argv[1] != "-lc" {
		return sp.Argv, env, nil
	}
	switch req.Shell.Name {
	case "bash", "zsh":
	case "sh":
		// Accepted, as the reference; this server keeps the login start
		// for sh (no portable way to list exported names).
		return sp.Argv, env, nil
	default:
		return nil, nil, protocol.InvalidParams("shell snapshots are unsupported for shell `%s`", req.Shell.Name)
	}
	key := snapshotKey{scope: req.ScopeID, name: req.Shell.Name, path: req.Shell.Path, cwd: sp.Cwd,
		envPolicy: string(sp.EnvPolicy), sandbox: string(sp.Sandbox)}
	at := s.attempt(m, key, sp)
	if at == nil {
		return sp.Argv, env, nil
	}
	<-at.done
	if at.snap == nil {
		return sp.Argv, env, nil
	}
	return at.snap.replay(req.Shell.Name, sp, env)
}

// attempt returns the capture to wait for: the cached one, a new one for a
// new key, or a retry of a failed one once its backoff is over.
func (s *snapshots) attempt(m *Manager, key snapshotKey, sp protocol.StartParams) *snapshotAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	for i, e := range s.entries {
		if e.key != key {
			continue
		}
		s.entries = append(append(s.entries[:i:i], s.entries[i+1:]...), e)
		select {
		case <-e.cur.done:
			if e.cur.snap == nil && e.attempts < snapshotMaxAttempts && !time.Now().Before(e.cur.retryAt) {
				e.attempts++
				e.cur = s.startCapture(m, key, sp)
			}
		default:
		}
		return e.cur
	}
	e := &snapshotEntry{key: key, attempts: 1, cur: s.startCapture(m, key, sp)}
	s.entries = append(s.entries, e)
	if len(s.entries) > snapshotMaxEntries {
		s.entries = s.entries[1:]
	}
	return e.cur
}

// startCapture runs the capture in the background; the attempt's done
// closes when it ends. Called with s.mu held.
func (s *snapshots) startCapture(m *Manager, key snapshotKey, sp protocol.StartParams) *snapshotAttempt {
	at := &snapshotAttempt{done: make(chan struct{})}
	if s.capMgr == nil {
		s.capSink = &captureSink{waiting: map[string]*captureOut{}}
		s.capMgr = NewManager(m.opts, s.capSink)
	}
	mgr, sink := s.capMgr, s.capSink
	go func() {
		at.snap = capture(mgr, sink, fmt.Sprintf("shell-snapshot-%d", s.ids.Add(1)), key.name, sp)
		if at.snap == nil {
			at.retryAt = time.Now().Add(snapshotBackoff)
		}
		close(at.done)
	}()
	return at
}

func (s *snapshots) close() {
	s.mu.Lock()
	s.closed = true
	mgr := s.capMgr
	s.mu.Unlock()
	if mgr != nil {
		mgr.Close()
	}
}

// capture runs the login shell with the capture script in sp's cwd,
// environment and sandbox, and parses what it printed; nil on any failure.
func capture(mgr *Manager, sink *captureSink, id, name string, sp protocol.StartParams) *shellSnapshot {
	cp := sp
	cp.ProcessID = id
	cp.Argv = slices.Clone(sp.Argv)
	cp.Argv[2] = snapshotCapture[name]
	cp.TTY, cp.PipeStdin, cp.Rows, cp.Cols, cp.TimeoutMs, cp.ShellSnapshot = false, false, nil, nil, nil, nil
	out := sink.expect(id)
	defer sink.forget(id)
	if _, err := mgr.Start(cp); err != nil {
		return nil
	}
	t := time.NewTimer(snapshotTimeout)
	defer t.Stop()
	select {
	case <-out.closed:
	case <-t.C:
		mgr.Terminate(protocol.TerminateParams{ProcessID: id})
		return nil
	}
	if out.overflow {
		return nil
	}
	return parseSnapshot(out.stdout.Bytes())
}

// parseSnapshot reads a capture's output; nil when it is malformed or its
// state is over the limit.
func parseSnapshot(b []byte) *shellSnapshot {
	i := bytes.LastIndex(b, []byte(snapshotBegin))
	if i < 0 {
		return nil
	}
	rest := b[i+len(snapshotBegin):]
	snap := &shellSnapshot{env: map[string]string{}}
	for {
		rec, tail, ok := bytes.Cut(rest, []byte{0})
		if !ok {
			return nil
		}
		rest = tail
		if len(rec) == 0 {
			break
		}
		k, v, ok := strings.Cut(string(rec), "=")
		if !ok || k == "" || slices.Contains(snapshotSkipEnv, k) || strings.HasPrefix(k, snapshotStateVar) {
			continue
		}
		snap.env[k] = v
	}
	mark, state, ok := bytes.Cut(rest, []byte{0})
	if !ok || string(mark) != snapshotStateMark || bytes.IndexByte(state, 0) >= 0 {
		return nil
	}
	var lines []string
	for _, l := range strings.Split(string(state), "\n") {
		if !slices.Contains(snapshotNotRestored, strings.TrimSpace(l)) {
			lines = append(lines, l)
		}
	}
	snap.state = strings.Join(lines, "\n")
	if len(snap.state) > snapshotMaxState {
		return nil
	}
	return snap
}

// replay is sp's argv and env that restore the snapshot before the
// script. The environment: the request's (after its envPolicy), the
// captured variables over it, and the variables the request names itself
// over those (codex's own settings win over the profile's).
func (snap *shellSnapshot) replay(name string, sp protocol.StartParams, env []string) ([]string, []string, error) {
	vars := make(map[string]string, len(env)+len(snap.env))
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	requested := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
		if _, ok := sp.Env[k]; ok {
			requested[k] = v
		}
	}
	for k, v := range snap.env {
		set(k, v)
	}
	for k, v := range requested {
		set(k, v)
	}
	var names, expand []string
	for state := snap.state; state != ""; {
		end := min(len(state), snapshotChunkBytes)
		for end < len(state) && !utf8.RuneStart(state[end]) {
			end--
		}
		n := fmt.Sprintf("%s%d", snapshotStateVar, len(names))
		set(n, state[:end])
		names = append(names, n)
		expand = append(expand, "${"+n+"}")
		state = state[end:]
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	head := snapshotReplayHead[name]
	// One line, so that the script's own line numbers are the reference's
	// (its restore is one line too: the user's first line is line 3).
	restore := "eval \"unset " + strings.Join(names, " ") + ";" + strings.Join(expand, "") + "\""
	if len(names) == 0 {
		restore = "true"
	}
	argv := slices.Clone(sp.Argv)
	argv[1] = head[0]
	argv[2] = head[1] + "if ! " + restore + " >/dev/null; then printf 'failed to restore shell snapshot\\n' >&2; fi\n" + sp.Argv[2]
	return argv, out, nil
}

// captureSink collects the stdout of capture processes.
type captureSink struct {
	mu      sync.Mutex
	waiting map[string]*captureOut
}

type captureOut struct {
	stdout   bytes.Buffer
	overflow bool
	closed   chan struct{}
}

func (c *captureSink) expect(id string) *captureOut {
	out := &captureOut{closed: make(chan struct{})}
	c.mu.Lock()
	c.waiting[id] = out
	c.mu.Unlock()
	return out
}

func (c *captureSink) forget(id string) {
	c.mu.Lock()
	delete(c.waiting, id)
	c.mu.Unlock()
}

// Deliver never blocks: a capture's output is bounded, and past the bound
// it is dropped and the capture fails.
func (c *captureSink) Deliver(ev Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.waiting[ev.ProcessID]
	if out == nil {
		return
	}
	switch ev.Kind {
	case EventOutput:
		if ev.Stream != protocol.StreamStdout {
			return
		}
		if out.stdout.Len()+len(ev.Data) > snapshotMaxCapture {
			out.overflow = true
			return
		}
		out.stdout.Write(ev.Data)
	case EventClosed:
		close(out.closed)
		delete(c.waiting, ev.ProcessID)
	}
}

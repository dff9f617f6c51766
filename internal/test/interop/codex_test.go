package interop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/internal/test/codexref"
)

// TestCodexExec drives a server with the real codex CLI (`codex exec`, the
// reference binary) in its three sandbox modes, with a scripted mock model
// on 127.0.0.1: the model asks for tool calls, codex runs them on the
// exec-server named by CODEX_EXEC_SERVER_URL, and the test reads what came
// back to the model, what landed on disk, and the JSON-RPC traffic (through
// a recording websocket proxy between codex and the server).
//
// Every scenario runs against the reference server (which validates the
// harness) and ours.
func TestCodexExec(t *testing.T) {
	codex := codexref.Bin(t)
	base := scratchBase(t)
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			for _, sc := range codexScenarios {
				t.Run(sc.name, func(t *testing.T) {
					runCodexScenario(t, codex, base, tg, sc)
				})
			}
		})
	}
}

// codexScenario is one `codex exec` run: a mode (extra flags) and a
// script for the mock model, checked afterwards.
type codexScenario struct {
	name  string
	flags []string
	// script returns the mock model's steps for a run in work (the workspace)
	// with a token unique to the run.
	script func(work, token string) [][]map[string]any
	check  func(r *codexRun)
	// serverHome, when set, fills the server's CODEX_HOME before it starts
	// (its config.toml is what environmentConfig/read reports).
	serverHome func(t *testing.T, home string)
	// serverEnv are NAME=VALUE entries added to our server's environment.
	serverEnv []string
	// slashTmp: the run's sandbox writes /tmp (codex's slash_tmp), so both
	// servers make mount points for /tmp/.git, /tmp/.agents, … on the host
	// (see slashTmpMu).
	slashTmp bool
}

// slashTmpMu keeps the two targets' slash_tmp runs apart. The reference
// makes its mount points for missing protected paths on the host and
// removes them when its sandbox exits, without regard for anyone else:
// ours, having found /tmp/.agents there (the reference's) and held it,
// saw it removed before its command's view was built and failed closed
// ("mount /tmp/.agents: protected path missing and its mount point could
// not be made", CI under load). Ours keeps its own mount points (a marker,
// a shared lock; see sandbox/protected_linux.go) and cannot keep the
// reference's: what is under test here is the client on each server, not
// two sandboxes racing on one host.
var slashTmpMu sync.Mutex

// codexRun is what a scenario's check looks at.
type codexRun struct {
	t       *testing.T
	tg      *target
	work    string // the workspace (-C)
	outside string // WORK's parent: a per-run dir, not writable in workspace-write
	token   string
	model   *mockModel
	traffic *rpcLog
	stdout  string // codex's --json events
}

// scratchBase is a directory outside the system temp dir for CODEX_HOMEs
// and workspaces (see codexref).
func scratchBase(t *testing.T) string {
	t.Helper()
	return codexref.Base(t, "exec-server-interop")
}

// mkScratch makes a fresh directory under base, removed when t ends.
var mkScratch = codexref.Dir

func runCodexScenario(t *testing.T, codex, base string, tg *target, sc codexScenario) {
	if sc.slashTmp {
		slashTmpMu.Lock()
		defer slashTmpMu.Unlock()
		if tg.ref {
			defer codexref.HoldSlashTmp(t)()
		}
	}
	for attempt := 1; ; attempt++ {
		r := runCodexOnce(t, codex, base, tg, sc)
		// The reference's bwrap fails now and then when another sandbox on
		// the host (a concurrent test's) makes and removes a mount point
		// such as /tmp/.git between the reference's policy resolution and
		// its bind. That is the reference's race, not what is under test.
		race := r.model.hostRace()
		if race == "" {
			race = r.traffic.hostRace()
		}
		if tg.ref && race != "" && attempt < 3 {
			t.Logf("attempt %d: the reference's sandbox lost a race with another sandbox on the host (%s); running again", attempt, race)
			continue
		}
		sc.check(r)
		return
	}
}

// runCodexOnce runs codex exec once for sc; the server stays up until t
// ends.
func runCodexOnce(t *testing.T, codex, base string, tg *target, sc codexScenario) *codexRun {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := mkScratch(t, base, "codex-"+tg.name+"-")
	work := filepath.Join(root, "outside", "work")
	for _, d := range []string{work, filepath.Join(root, "home"), filepath.Join(root, "server-home")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	token := randomToken(t)

	// The server, each with its own CODEX_HOME outside the temp dir (env(1)
	// sets it: StartServer puts a reference's home under the temp dir, and
	// ours would otherwise read the user's ~/.codex for
	// environmentConfig/read).
	serverHome := filepath.Join(root, "server-home")
	if sc.serverHome != nil {
		sc.serverHome(t, serverHome)
	}
	spec := Spec{Name: tg.name, Bin: "/usr/bin/env", Args: append(append([]string{"CODEX_HOME=" + serverHome}, sc.serverEnv...), tg.bin)}
	if tg.ref {
		spec.Args = []string{"CODEX_HOME=" + serverHome, "RUST_LOG=error", tg.bin, "exec-server"}
	}
	srv, err := StartServer(ctx, spec, WebSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	proxy := startRPCProxy(t, srv.URL)

	model := newMockModel(t, sc.script(work, token)...)
	r := &codexRun{t: t, tg: tg, work: work, outside: filepath.Dir(work), token: token, model: model, traffic: proxy.log}

	cmd := codexref.Exec(ctx, codex, work, model.URL, sc.flags...)
	cmd.Env = append(filteredEnv(), "CODEX_HOME="+filepath.Join(root, "home"), "CODEX_EXEC_SERVER_URL="+proxy.url, "RUST_LOG=warn")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err = cmd.Run()
	r.stdout = stdout.String()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("codex exec %s (%.1f s, err %v)\nstdout:\n%s\nstderr tail:\n%s", strings.Join(sc.flags, " "),
				time.Since(t0).Seconds(), err, codexref.Tail(stdout.String(), 6000), codexref.Tail(stderr.String(), 3000))
			t.Logf("json-rpc traffic:\n%s", codexref.Tail(proxy.log.String(), 12000))
			t.Logf("%s server stderr tail:\n%s", tg.name, srv.Stderr())
		}
	})
	if err != nil {
		t.Fatalf("codex exec: %v", err)
	}
	if len(model.requests()) == 0 {
		t.Fatal("codex never called the mock model")
	}
	return r
}

// filteredEnv is the test's environment without anything that would point
// codex at a real model or another exec-server.
func filteredEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "CODEX_"), strings.HasPrefix(k, "OPENAI_"), k == "RUST_LOG":
			continue
		}
		out = append(out, kv)
	}
	return out
}

func randomToken(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// toolOutput returns the tool output codex sent the model for callID, or
// fails the test.
func (r *codexRun) toolOutput(callID string) string {
	r.t.Helper()
	out, ok := r.model.toolOutput(callID)
	if !ok {
		r.t.Fatalf("codex sent no output for tool call %s to the model (tools offered: %v)", callID, r.model.toolNames())
	}
	return out
}

// rpcLog records the JSON-RPC messages between codex and the server.
type rpcLog struct {
	mu   sync.Mutex
	msgs []rpcMsg
}

type rpcMsg struct {
	toServer bool
	raw      []byte
}

func (l *rpcLog) add(toServer bool, b []byte) {
	l.mu.Lock()
	l.msgs = append(l.msgs, rpcMsg{toServer, bytes.Clone(b)})
	l.mu.Unlock()
}

func (l *rpcLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var sb strings.Builder
	for _, m := range l.msgs {
		dir := "<-"
		if m.toServer {
			dir = "->"
		}
		raw := m.raw
		if len(raw) > 600 {
			raw = append(raw[:600:600], "…"...)
		}
		fmt.Fprintf(&sb, "%s %s\n", dir, raw)
	}
	return sb.String()
}

// notifications returns the params of every notification method the
// server sent.
func (l *rpcLog) notifications(method string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, m := range l.msgs {
		if m.toServer {
			continue
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params map[string]any  `json:"params"`
		}
		if json.Unmarshal(m.raw, &msg) == nil && msg.ID == nil && msg.Method == method {
			out = append(out, msg.Params)
		}
	}
	return out
}

// rpcCall is one request codex sent and the server's answer.
type rpcCall struct {
	params map[string]any
	result map[string]any // nil when it failed or was not answered
	err    *RPCError
}

// calls returns every request codex sent with method, in order, with its
// answer.
func (l *rpcLog) calls(method string) []*rpcCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params map[string]any  `json:"params"`
		Result map[string]any  `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	byID := map[string]*rpcCall{}
	var out []*rpcCall
	for _, m := range l.msgs {
		msg.ID, msg.Method, msg.Params, msg.Result, msg.Error = nil, "", nil, nil, nil
		if json.Unmarshal(m.raw, &msg) != nil || msg.ID == nil {
			continue
		}
		if m.toServer && msg.Method == method {
			c := &rpcCall{params: msg.Params}
			byID[string(msg.ID)] = c
			out = append(out, c)
		} else if c := byID[string(msg.ID)]; !m.toServer && c != nil {
			c.result, c.err = msg.Result, msg.Error
		}
	}
	return out
}

// rpcProxy is a websocket proxy on 127.0.0.1 that forwards every message
// between codex and one server and records it.
type rpcProxy struct {
	url string
	log *rpcLog
}

func startRPCProxy(t *testing.T, upstream string) *rpcProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &rpcProxy{url: "ws://" + ln.Addr().String(), log: &rpcLog{}}
	var wg sync.WaitGroup
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		down, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		down.SetReadLimit(1 << 30)
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		up, _, err := websocket.Dial(ctx, upstream, nil)
		if err != nil {
			down.Close(websocket.StatusInternalError, err.Error())
			return
		}
		up.SetReadLimit(1 << 30)
		wg.Add(1)
		defer wg.Done()
		pump := func(from, to *websocket.Conn, toServer bool) {
			defer cancel()
			for {
				typ, b, err := from.Read(ctx)
				if err != nil {
					var ce websocket.CloseError
					if errors.As(err, &ce) {
						_ = to.Close(ce.Code, ce.Reason)
					}
					return
				}
				p.log.add(toServer, b)
				if err := to.Write(ctx, typ, b); err != nil {
					return
				}
			}
		}
		go pump(up, down, false)
		pump(down, up, true)
		_ = up.CloseNow()
		_ = down.CloseNow()
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
	})
	return p
}

// startOf returns codex's process/start for the command of tool call
// callID.
func (r *codexRun) startOf(callID string) *rpcCall {
	r.t.Helper()
	for _, c := range r.traffic.calls("process/start") {
		if md, _ := c.params["metadata"].(map[string]any); md != nil && md["toolCallId"] == callID {
			return c
		}
	}
	r.t.Fatalf("no process/start for tool call %s", callID)
	return nil
}

// processOf returns the processId codex gave the command of tool call
// callID.
func (r *codexRun) processOf(callID string) string {
	r.t.Helper()
	id, _ := r.startOf(callID).params["processId"].(string)
	return id
}

// exited returns the process/exited params of processID.
func (r *codexRun) exited(processID string) map[string]any {
	r.t.Helper()
	for _, p := range r.traffic.notifications("process/exited") {
		if p["processId"] == processID {
			return p
		}
	}
	r.t.Fatalf("no process/exited for %s", processID)
	return nil
}

// checkSandboxes checks that every process/start (and, with fsToo, every
// mutating fs call) carried a sandbox (want true) or "sandbox": null, and
// that a sandboxed start answered sandboxType "linuxSeccomp".
func (r *codexRun) checkSandboxes(want bool, fsToo bool) {
	r.t.Helper()
	methods := []string{"process/start"}
	if fsToo {
		methods = append(methods, "fs/writeFile", "fs/createDirectory")
	}
	for _, m := range methods {
		for _, c := range r.traffic.calls(m) {
			if got := c.params["sandbox"] != nil; got != want {
				r.t.Fatalf("%s sandbox %v, want a sandbox: %v", m, c.params["sandbox"], want)
			}
			if m == "process/start" && want && c.result != nil && c.result["sandboxType"] != "linuxSeccomp" {
				r.t.Errorf("process/start answered sandboxType %v, want linuxSeccomp", c.result["sandboxType"])
			}
		}
	}
}

// checkWatchMissing checks that codex, seeing fsWatchMissing advertised,
// set its watch on the paths it found missing and that the server took it.
func (r *codexRun) checkWatchMissing() {
	r.t.Helper()
	calls := r.traffic.calls("fs/watchMissing")
	if len(calls) == 0 {
		r.t.Fatal("codex sent no fs/watchMissing")
	}
	for _, c := range calls {
		if c.err != nil || c.result["watching"] != true {
			r.t.Errorf("fs/watchMissing %v answered %v %v, want watching", c.params, c.result, c.err)
		}
	}
}

// commandRan checks that tool call callID's command exited with code and
// that its output reached the model containing want; false when not.
func (r *codexRun) commandRan(callID string, code int, want string) bool {
	r.t.Helper()
	out := r.toolOutput(callID)
	if !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("Process exited with code %d", code)) {
		r.t.Errorf("tool call %s: the model got %q, want exit code %d and %q", callID, out, code, want)
		return false
	}
	return true
}

// sandboxDenied checks what process/exited said for callID's command.
func (r *codexRun) sandboxDenied(callID string, want bool) {
	r.t.Helper()
	if ex := r.exited(r.processOf(callID)); ex["sandboxDenied"] != want {
		r.t.Errorf("tool call %s: process/exited %v, want sandboxDenied: %v", callID, ex, want)
	}
}

// deniedBySandbox checks that callID's command failed with a read-only
// file system, that the model was told so, and that process/exited said
// sandboxDenied: true.
func (r *codexRun) deniedBySandbox(callID string) {
	r.t.Helper()
	if r.commandRan(callID, 1, "Read-only file system") {
		r.sandboxDenied(callID, true)
	}
}

func (r *codexRun) mustNotExist(path string) {
	r.t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		r.t.Errorf("%s: want it absent, got err %v", path, err)
	}
}

// onlyEntries checks that dir comes to hold exactly names. A sandbox
// may keep mount points for missing protected paths (empty directories)
// while a helper of it lives, briefly after the last call (our server keeps
// a helper warm for half a second), so this waits a few seconds for them
// to go: a correctness bound, not a timing.
func (r *codexRun) onlyEntries(dir string, names ...string) {
	r.t.Helper()
	want := strings.Join(names, ",")
	var got, first []string
	t0 := time.Now()
	for deadline := t0.Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			r.t.Fatal(err)
		}
		got = got[:0]
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if first == nil {
			first = append([]string{}, got...)
		}
		if strings.Join(got, ",") == want || time.Now().After(deadline) {
			break
		}
	}
	if strings.Join(got, ",") != want {
		r.t.Errorf("%s holds %v 5 s after the run, want %v", dir, got, names)
	} else if strings.Join(first, ",") != want {
		r.t.Logf("%s held %v when codex exited, %v %.2f s later", dir, first, got, time.Since(t0).Seconds())
	}
}

func (r *codexRun) mustContain(path, want string) {
	r.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != want {
		r.t.Errorf("%s: got %q (err %v), want %q", path, b, err, want)
	}
}

// checkWriteRetry checks apply_patch's way into a missing directory:
// fs/writeFile of dir/name answered -32004, fs/createDirectory of dir
// (recursive) succeeded, and the second fs/writeFile succeeded.
func (r *codexRun) checkWriteRetry(dir, name string) {
	r.t.Helper()
	target := FileURI(filepath.Join(dir, name))
	var writes []*rpcCall
	for _, c := range r.traffic.calls("fs/writeFile") {
		if c.params["path"] == target {
			writes = append(writes, c)
		}
	}
	if len(writes) != 2 || writes[0].err == nil || writes[0].err.Code != -32004 || writes[1].err != nil {
		var got []string
		for _, w := range writes {
			got = append(got, fmt.Sprintf("result %v error %v", w.result, w.err))
		}
		r.t.Errorf("fs/writeFile of %s: want -32004 then success, got %v", target, got)
	}
	mk := r.traffic.calls("fs/createDirectory")
	if len(mk) != 1 || mk[0].params["path"] != FileURI(dir) || mk[0].params["recursive"] != true || mk[0].err != nil {
		r.t.Errorf("fs/createDirectory: want one recursive call on %s that succeeds, got %d calls", FileURI(dir), len(mk))
		for _, c := range mk {
			r.t.Logf("  fs/createDirectory %v: error %v", c.params["path"], c.err)
		}
	}
}

func execCommand(callID, cmd string) []map[string]any {
	return []map[string]any{functionCall(callID, "exec_command", map[string]any{"cmd": cmd, "yield_time_ms": 10000})}
}

// What codex 0.169 (gpt-5.5's tool set) takes from the model, found by
// reading the tools of its first request and by trying:
//   - exec_command: a function_call item, arguments a JSON string
//     {"cmd": "...", "yield_time_ms": N, "tty": bool}; codex runs
//     /bin/bash -lc CMD and answers with a function_call_output whose text
//     holds "Process exited with code N" and "Output:\n...".
//   - apply_patch: a custom_tool_call item (a freeform tool), input the
//     patch text ("*** Begin Patch\n*** Add File: P\n+line\n*** End Patch\n");
//     the answer is a custom_tool_call_output ("Success. Updated the
//     following files:\nA P").
var codexScenarios = []codexScenario{
	{
		// codex's default: every command runs under a read-only policy.
		name: "read-only",
		script: func(work, token string) [][]map[string]any {
			return [][]map[string]any{
				execCommand("call-echo", "echo hello-"+token),
				execCommand("call-touch", "touch ro-"+token),
				// The same under a PTY.
				{functionCall("call-tty", "exec_command", map[string]any{"cmd": "test -t 1 && echo tty-" + token, "tty": true, "yield_time_ms": 10000})},
			}
		},
		check: func(r *codexRun) {
			r.checkSandboxes(true, false)
			r.checkWatchMissing()
			if r.commandRan("call-echo", 0, "hello-"+r.token) {
				r.sandboxDenied("call-echo", false)
			}
			r.deniedBySandbox("call-touch")
			if r.commandRan("call-tty", 0, "tty-"+r.token) {
				r.sandboxDenied("call-tty", false)
				if tty := r.startOf("call-tty").params["tty"]; tty != true {
					r.t.Errorf("exec_command with tty: process/start had tty %v", tty)
				}
			}
			r.mustNotExist(filepath.Join(r.work, "ro-"+r.token))
		},
	},
	{
		name:     "workspace-write",
		flags:    []string{"-s", "workspace-write"},
		slashTmp: true,
		script: func(work, token string) [][]map[string]any {
			return [][]map[string]any{
				execCommand("call-inside", "echo inside-"+token+" > inside.txt && echo wrote"),
				{customToolCall("call-patch", "apply_patch",
					"*** Begin Patch\n*** Add File: sub/dir/new.txt\n+patched-"+token+"\n*** End Patch\n")},
				execCommand("call-outside", "touch ../outside-"+token),
			}
		},
		check: func(r *codexRun) {
			r.checkSandboxes(true, true)
			r.checkWatchMissing()
			if r.commandRan("call-inside", 0, "wrote") {
				r.sandboxDenied("call-inside", false)
			}
			r.mustContain(filepath.Join(r.work, "inside.txt"), "inside-"+r.token+"\n")

			// The new directory: fs/writeFile answers -32004, codex creates
			// the directory and writes again.
			if out := r.toolOutput("call-patch"); !strings.Contains(out, "sub/dir/new.txt") {
				r.t.Errorf("apply_patch: the model got %q, want it to name sub/dir/new.txt", out)
			}
			r.mustContain(filepath.Join(r.work, "sub", "dir", "new.txt"), "patched-"+r.token+"\n")
			r.checkWriteRetry(filepath.Join(r.work, "sub", "dir"), "new.txt")

			r.deniedBySandbox("call-outside")
			r.mustNotExist(filepath.Join(r.outside, "outside-"+r.token))
			// Nothing else appeared: no mount points left for the
			// protected subpaths (.git, .agents, .codex, .aws) that were
			// missing.
			r.onlyEntries(r.work, "inside.txt", "sub")
			r.onlyEntries(r.outside, "work")
		},
	},
	{
		name:  "full-access",
		flags: []string{"--dangerously-bypass-approvals-and-sandbox"},
		script: func(work, token string) [][]map[string]any {
			return [][]map[string]any{
				execCommand("call-full", "echo full-"+token+" && touch ../full-"+token),
			}
		},
		check: func(r *codexRun) {
			r.checkSandboxes(false, true)
			r.checkWatchMissing()
			r.commandRan("call-full", 0, "full-"+r.token)
			// Nothing confines the command: it wrote next to the workspace.
			r.mustContain(filepath.Join(r.outside, "full-"+r.token), "")
		},
	},
}

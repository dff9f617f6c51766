package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/asnobody"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
	"github.com/execgo/exec-server/sandbox/policy"
)

// Sandboxed processes: real commands under real policies, each in its own
// temporary directory. The workspace is base/ws; escapes aim at base/x.

// codexWorkspaceWrite is the sandbox codex sends on every process/start in
// -s workspace-write (internal/test/interop/codex_test.go sees it), with WORK the
// workspace. t.TempDir() lies under /tmp or TMPDIR, both writable in that
// policy, so the test adds one entry making base read-only (more specific
// than slash_tmp and tmpdir, less than the workspace): the sibling an
// escape aims at is then outside every writable root wherever TMPDIR is.
const codexWorkspaceWrite = `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"read"},
   {"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"},
   {"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},
   {"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"},
   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read","missing_path_behavior":"skip"},
   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".agents"}},"access":"read","missing_path_behavior":"skip"},
   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".codex"}},"access":"read","missing_path_behavior":"skip"},
   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".aws"}},"access":"read","missing_path_behavior":"skip"},
   {"path":{"type":"path","path":"BASE"},"access":"read"}]},
  "network":"restricted"},
 "cwd":"WORK","workspaceRoots":["WORK"],"windowsSandboxLevel":"disabled",
 "windowsSandboxProxySettingsMode":"reconcile","useLegacyLandlock":false}`

// codexReadOnly is codex's default (read-only) sandbox.
const codexReadOnly = `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"},
 "cwd":"WORK","workspaceRoots":["WORK"],"windowsSandboxLevel":"disabled",
 "windowsSandboxProxySettingsMode":"reconcile","useLegacyLandlock":false}`

// fillPolicy fills a policy template for workspace ws (base is its parent).
func fillPolicy(tmpl, ws string) json.RawMessage {
	r := strings.NewReplacer("WORK", fileURI(ws), "BASE", fileURI(filepath.Dir(ws)))
	return json.RawMessage(r.Replace(tmpl))
}

// workspace returns a fresh base/ws, created.
func workspace(t *testing.T) string {
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return ws
}

// sandboxParams runs argv in ws under the policy tmpl.
func sandboxParams(t *testing.T, id, tmpl, ws string, argv ...string) protocol.StartParams {
	p := params(t, id, argv...)
	p.Cwd = fileURI(ws)
	p.Sandbox = fillPolicy(tmpl, ws)
	return p
}

// needSandbox skips a test that needs a part of the sandbox that has not
// landed (or a kernel that cannot sandbox), saying which.
func needSandbox(t *testing.T) {
	t.Helper()
	if s := sandbox.Probe(); !s.Available {
		t.Skipf("no sandbox on this kernel or kernel side not built: missing %s", s.Missing)
	}
	if _, err := planOf(json.RawMessage(`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`)); err != nil {
		t.Skipf("policy resolution not usable: %v", err)
	}
}

func startSandboxed(t *testing.T, m *Manager, p protocol.StartParams) {
	t.Helper()
	res, err := m.Start(p)
	if err != nil {
		t.Fatalf("Start(%s %q): %v", p.ProcessID, p.Argv, err)
	}
	if res.ProcessID != p.ProcessID || res.SandboxType != policy.SandboxTypeLinux {
		t.Fatalf("Start result %+v, want sandboxType %s", res, policy.SandboxTypeLinux)
	}
}

// exitedEvent returns the process's exited event.
func exitedEvent(t *testing.T, evs []Event) Event {
	t.Helper()
	for _, ev := range evs {
		if ev.Kind == EventExited {
			return ev
		}
	}
	t.Fatalf("no exited event: %s", describeEvents(evs))
	return Event{}
}

// modes runs f with the session's spawner and with direct children.
func modes(t *testing.T, f func(t *testing.T, opts Options)) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			t.Parallel()
			f(t, Options{DirectChildren: direct})
		})
	}
}

// protectedNames are the protected subpaths codex's workspace-write policy
// names; a missing one is masked while the sandbox lives and must not be
// left on the host (Spec.Release).
var protectedNames = []string{".git", ".agents", ".codex", ".aws"}

// checkNoTraces fails when a protected name is left in ws. A mount point
// whose removal met a lock held for a moment (a child of a parallel test
// between fork and exec shares it) is removed by a retry with back-off:
// wait for that, up to 15 s, before calling it left.
func checkNoTraces(t *testing.T, ws string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, name := range protectedNames {
		for {
			_, err := os.Lstat(filepath.Join(ws, name))
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s left on the host after the sandbox: %v", name, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestSandboxWorkspaceWrite(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	modes(t, func(t *testing.T, opts Options) {
		m, sink := newTestManager(t, opts)
		ws := workspace(t)
		base := filepath.Dir(ws)
		tests := []struct {
			id, script string
			code       int
			out        string // in the output
			denied     bool
		}{
			{"inside", "echo ok > inside && cat inside", 0, "ok\n", false},
			{"tmp", "d=$(mktemp -d /tmp/sbx.XXXXXX) && echo t > $d/f && cat $d/f && rm -r $d", 0, "t\n", false},
			{"sibling", "touch ../x", 1, "Read-only file system", true},
			{"false", "false", 1, "", false},
			{"exit3", "exit 3", 3, "", false},
			{"grep", "echo a | grep b", 1, "", false},
		}
		for _, tt := range tests {
			startSandboxed(t, m, sandboxParams(t, tt.id, codexWorkspaceWrite, ws, "/bin/sh", "-c", tt.script))
		}
		for _, tt := range tests {
			evs := sink.waitClosed(t, tt.id)
			ex := exitedEvent(t, evs)
			if out := output(evs, ""); ex.ExitCode != tt.code || !strings.Contains(out, tt.out) {
				t.Errorf("%s: exit %d output %q, want %d and %q", tt.id, ex.ExitCode, out, tt.code, tt.out)
			}
			res, err := m.Read(context.Background(), protocol.ReadParams{ProcessID: tt.id})
			if err != nil || !res.Exited || res.ExitCode == nil || *res.ExitCode != tt.code {
				t.Fatalf("%s: read %+v %v", tt.id, res, err)
			}
			if ex.SandboxDenied != tt.denied || res.SandboxDenied != tt.denied {
				t.Errorf("%s: sandboxDenied exited=%v read=%v, want %v", tt.id, ex.SandboxDenied, res.SandboxDenied, tt.denied)
			}
		}
		if b, err := os.ReadFile(filepath.Join(ws, "inside")); err != nil || string(b) != "ok\n" {
			t.Errorf("the write inside the workspace did not land: %q %v", b, err)
		}
		if _, err := os.Lstat(filepath.Join(base, "x")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the escape left %s: %v", filepath.Join(base, "x"), err)
		}
		checkNoTraces(t, ws)
	})
}

// gateSink holds the first stderr chunk of one process in Deliver until
// released: that stream's reader stays behind while the rest goes on.
type gateSink struct {
	*recSink
	id      string
	once    sync.Once
	blocked chan struct{}
	release chan struct{}
}

func (s *gateSink) Deliver(ev Event) {
	if ev.ProcessID == s.id && ev.Kind == EventOutput && ev.Stream == protocol.StreamStderr {
		s.once.Do(func() {
			close(s.blocked)
			<-s.release
		})
	}
	s.recSink.Deliver(ev)
}

// TestSandboxDeniedJudgesWholeOutput: sandboxDenied is judged on all of a
// sandboxed command's output, however far behind its reader is when the
// init is reaped. Here the denial is still in the stderr pipe at the reap,
// behind a chunk the client has not taken yet and 32 KiB more.
func TestSandboxDeniedJudgesWholeOutput(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	modes(t, func(t *testing.T, opts Options) {
		sink := &gateSink{recSink: newRecSink(), id: "slow", blocked: make(chan struct{}), release: make(chan struct{})}
		// Small chunks: the reader needs many reads (and deliveries) to
		// reach the denial behind 32 KiB of other output.
		opts.ReadSize = 512
		m := NewManager(opts, sink)
		t.Cleanup(m.Close)
		release := sync.OnceFunc(func() { close(sink.release) })
		t.Cleanup(release)
		ws := workspace(t)
		gate := filepath.Join(ws, "gate")
		if err := syscall.Mkfifo(gate, 0o666); err != nil {
			t.Fatal(err)
		}
		startSandboxed(t, m, sandboxParams(t, "slow", codexWorkspaceWrite, ws, "/bin/sh", "-c", "echo start >&2; read x < gate; printf '%32768s' '' >&2; touch ../x"))
		select {
		case <-sink.blocked:
		case <-time.After(15 * time.Second):
			t.Fatal("no stderr output")
		}
		// Only now does the command write 32 KiB and the denial (to a
		// pipe whose reader is held; both fit in it) and exit.
		f, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("go\n")
		f.Close()
		p := m.get("slow")
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			p.mu.Lock()
			reaped := p.pid < 0
			p.mu.Unlock()
			if reaped {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the init was not reaped")
			}
		}
		// Not a timing assertion: the judgement must come out the same
		// whenever the reader is let go. Holding it a while longer makes
		// a judgement that does not wait for the output (as a fixed
		// drain window did) show.
		time.Sleep(100 * time.Millisecond)
		release()
		evs := sink.waitClosed(t, "slow")
		ex := exitedEvent(t, evs)
		if out := output(evs, ""); ex.ExitCode != 1 || !strings.Contains(out, "Read-only file system") {
			t.Fatalf("exit %d output %q..., want 1 and the denial", ex.ExitCode, out[:min(len(out), 200)])
		}
		res, err := m.Read(context.Background(), protocol.ReadParams{ProcessID: "slow"})
		if err != nil {
			t.Fatal(err)
		}
		if !ex.SandboxDenied || !res.SandboxDenied {
			t.Errorf("sandboxDenied exited=%v read=%v, want true: %s", ex.SandboxDenied, res.SandboxDenied, describeEvents(evs))
		}
	})
}

func TestSandboxReadOnly(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	m, sink := newTestManager(t, Options{})
	ws := workspace(t)
	if err := os.WriteFile(filepath.Join(ws, "f"), []byte("content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startSandboxed(t, m, sandboxParams(t, "cat", codexReadOnly, ws, "cat", "f"))
	startSandboxed(t, m, sandboxParams(t, "write", codexReadOnly, ws, "sh", "-c", "echo x > f"))
	startSandboxed(t, m, sandboxParams(t, "new", codexReadOnly, ws, "touch", "new"))
	evs := sink.waitClosed(t, "cat")
	if got := output(evs, ""); got != "content\n" || exitedEvent(t, evs).ExitCode != 0 {
		t.Errorf("cat: %s", describeEvents(evs))
	}
	for _, id := range []string{"write", "new"} {
		evs := sink.waitClosed(t, id)
		ex := exitedEvent(t, evs)
		if ex.ExitCode == 0 || !strings.Contains(output(evs, ""), "Read-only file system") {
			t.Errorf("%s: %s", id, describeEvents(evs))
		}
		if !ex.SandboxDenied {
			t.Errorf("%s: sandboxDenied false", id)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "f")); string(b) != "content\n" {
		t.Errorf("f changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(ws, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("new file created under a read-only policy: %v", err)
	}
}

// TestSandboxType: any sandbox value, even disabled, answers linuxSeccomp
// (and runs the command); none or null answers none.
func TestSandboxType(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	m, sink := newTestManager(t, Options{})
	ws := workspace(t)
	tests := []struct {
		id, sandbox, want string
	}{
		{"absent", "", "none"},
		{"null", "null", "none"},
		{"disabled", `{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`, policy.SandboxTypeLinux},
		{"external", `{"permissions":{"type":"external","network":"enabled"},"windowsSandboxLevel":"disabled"}`, policy.SandboxTypeLinux},
		{"unrestricted", `{"permissions":{"type":"managed","file_system":{"type":"unrestricted"},"network":"restricted"},"windowsSandboxLevel":"disabled"}`, policy.SandboxTypeLinux},
		{"read-only", policyString(codexReadOnly, ws), policy.SandboxTypeLinux},
	}
	for _, tt := range tests {
		p := params(t, tt.id, "sh", "-c", "echo ran")
		p.Cwd = fileURI(ws)
		if tt.sandbox != "" {
			p.Sandbox = json.RawMessage(tt.sandbox)
		}
		res, err := m.Start(p)
		if err != nil {
			t.Fatalf("%s: %v", tt.id, err)
		}
		if res.SandboxType != tt.want {
			t.Errorf("%s: sandboxType %q, want %q", tt.id, res.SandboxType, tt.want)
		}
	}
	for _, tt := range tests {
		evs := sink.waitClosed(t, tt.id)
		ex := exitedEvent(t, evs)
		if output(evs, "") != "ran\n" || ex.ExitCode != 0 || ex.SandboxDenied {
			t.Errorf("%s: %s denied=%v", tt.id, describeEvents(evs), ex.SandboxDenied)
		}
	}
}

func policyString(tmpl, ws string) string { return string(fillPolicy(tmpl, ws)) }

// TestSandboxEnv: the command sees exactly the requested environment, none
// of the init's.
func TestSandboxEnv(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	envBin, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env program")
	}
	m, sink := newTestManager(t, Options{})
	ws := workspace(t)
	tests := []struct {
		id   string
		env  map[string]string
		want string
	}{
		{"empty", map[string]string{}, ""},
		{"exact", map[string]string{"B": "x y", "A": "1", "EMPTY": ""}, "A=1\nB=x y\nEMPTY=\n"},
	}
	for _, tt := range tests {
		p := sandboxParams(t, tt.id, codexWorkspaceWrite, ws, envBin)
		p.Env = tt.env
		startSandboxed(t, m, p)
	}
	for _, tt := range tests {
		if got := output(sink.waitClosed(t, tt.id), ""); got != tt.want {
			t.Errorf("%s: env %q, want %q", tt.id, got, tt.want)
		}
	}
}

// TestSandboxPTY: terminal, size, resize and stdin through the PTY.
func TestSandboxPTY(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	modes(t, func(t *testing.T, opts Options) {
		m, sink := newTestManager(t, opts)
		ws := workspace(t)
		p := sandboxParams(t, "pty", codexWorkspaceWrite, ws, "sh", "-c", `tty; stty size; echo ready; read line; stty size; echo "got $line"`)
		p.TTY = true
		rows, cols := uint16(30), uint16(100)
		p.Rows, p.Cols = &rows, &cols
		startSandboxed(t, m, p)
		sink.waitOutput(t, "pty", "ready")
		if err := m.Resize(protocol.ResizeParams{ProcessID: "pty", Rows: 40, Cols: 120}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Write(protocol.WriteParams{ProcessID: "pty", Chunk: []byte("hello\n"), WriteID: str("1")}); err != nil {
			t.Fatal(err)
		}
		evs := sink.waitClosed(t, "pty")
		out := output(evs, protocol.StreamPTY)
		for _, want := range []string{"/dev/pts/", "30 100\r\n", "40 120\r\n", "got hello\r\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("pty output %q lacks %q", out, want)
			}
		}
		if ex := exitedEvent(t, evs); ex.ExitCode != 0 || ex.SandboxDenied {
			t.Errorf("exit %d denied %v", ex.ExitCode, ex.SandboxDenied)
		}

		// A denial seen through the terminal.
		p = sandboxParams(t, "pty-denied", codexWorkspaceWrite, ws, "touch", "../x")
		p.TTY = true
		startSandboxed(t, m, p)
		evs = sink.waitClosed(t, "pty-denied")
		if ex := exitedEvent(t, evs); ex.ExitCode != 1 || !ex.SandboxDenied || !strings.Contains(output(evs, ""), "Read-only file system") {
			t.Errorf("pty touch ../x: %s denied %v", describeEvents(evs), ex.SandboxDenied)
		}
		if _, err := os.Lstat(filepath.Join(filepath.Dir(ws), "x")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the escape left a file: %v", err)
		}
	})
}

// TestUnsandboxedNeverDenied: without a sandbox, sandboxDenied is false
// whatever the output and status.
func TestUnsandboxedNeverDenied(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	for _, tty := range []bool{false, true} {
		id := "u-" + strconv.FormatBool(tty)
		p := params(t, id, "sh", "-c", "echo 'touch: cannot touch x: Read-only file system' >&2; echo Operation not permitted; exit 1")
		p.TTY = tty
		mustStart(t, m, p)
		evs := sink.waitClosed(t, id)
		res, err := m.Read(context.Background(), protocol.ReadParams{ProcessID: id})
		if err != nil {
			t.Fatal(err)
		}
		if ex := exitedEvent(t, evs); ex.ExitCode != 1 || ex.SandboxDenied || res.SandboxDenied {
			t.Errorf("%s: exit %d denied exited=%v read=%v", id, ex.ExitCode, ex.SandboxDenied, res.SandboxDenied)
		}
	}
}

// TestSandboxStdin: a stdin pipe, process/write and its end.
func TestSandboxStdin(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	m, sink := newTestManager(t, Options{})
	ws := workspace(t)
	p := sandboxParams(t, "cat", codexWorkspaceWrite, ws, "cat")
	p.PipeStdin = true
	startSandboxed(t, m, p)
	for i, chunk := range []string{"one\n", "two\n"} {
		res, err := m.Write(protocol.WriteParams{ProcessID: "cat", Chunk: []byte(chunk), WriteID: str(strconv.Itoa(i))})
		if err != nil || res.Status != protocol.WriteAccepted {
			t.Fatalf("write: %+v %v", res, err)
		}
	}
	sink.waitOutput(t, "cat", "one\ntwo\n")
	if err := m.CloseStdin("cat"); err != nil {
		t.Fatal(err)
	}
	evs := sink.waitClosed(t, "cat")
	if got := output(evs, protocol.StreamStdout); got != "one\ntwo\n" || exitedEvent(t, evs).ExitCode != 0 {
		t.Errorf("cat: %s", describeEvents(evs))
	}
}

// TestSandboxSignal: signals to the group reach the command (the init
// ignores them), and the init exits with the command's status.
func TestSandboxSignal(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	m, sink := newTestManager(t, Options{})
	ws := workspace(t)
	for _, tty := range []bool{false, true} {
		// A bare sleep dies of SIGINT: 130.
		id := "sleep-" + strconv.FormatBool(tty)
		p := sandboxParams(t, id, codexWorkspaceWrite, ws, "sleep", "30")
		p.TTY = tty
		startSandboxed(t, m, p)
		// A shell that traps it.
		tid := "trap-" + strconv.FormatBool(tty)
		p = sandboxParams(t, tid, codexWorkspaceWrite, ws, "sh", "-c", `trap 'echo got INT; exit 5' INT; echo ready; while :; do sleep 0.02; done`)
		p.TTY = tty
		startSandboxed(t, m, p)
		sink.waitOutput(t, tid, "ready")
		// sleep has had time to exec too only if it is running: wait
		// until the init has a child.
		waitCommand(t, m, id)
		for _, pid := range []string{id, tid} {
			if err := m.Signal(protocol.SignalParams{ProcessID: pid, Signal: "interrupt"}); err != nil {
				t.Fatal(err)
			}
		}
		if evs := sink.waitClosed(t, id); exitedEvent(t, evs).ExitCode != 130 {
			t.Errorf("%s: %s, want exit 130", id, describeEvents(evs))
		}
		evs := sink.waitClosed(t, tid)
		if !strings.Contains(output(evs, ""), "got INT") || exitedEvent(t, evs).ExitCode != 5 {
			t.Errorf("%s: %s", tid, describeEvents(evs))
		}
	}
}

// waitCommand waits until the sandbox's init of process id has a child
// (the command), so that a signal finds it.
func waitCommand(t *testing.T, m *Manager, id string) {
	t.Helper()
	proc := m.get(id)
	proc.mu.Lock()
	init := proc.pid
	proc.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for len(hostChildren(init)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the init %d of %s has no child", init, id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hostChildren lists pid's children, as the host sees them.
func hostChildren(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

var tokenSeq atomic.Int64

// sleepToken returns a sleep duration no other process uses, to find the
// sleep on the host by its command line (pids inside the sandbox are its
// PID namespace's).
func sleepToken() string {
	return fmt.Sprintf("%d.%09d", 3000+tokenSeq.Add(1), time.Now().Nanosecond())
}

// hostPids returns the pids of the live processes whose command line has
// arg.
func hostPids(arg string) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pid, _ := strconv.Atoi(filepath.Base(d))
				if alive(pid) {
					out = append(out, pid)
				}
				break
			}
		}
	}
	return out
}

// waitHostPids waits until n processes have arg on their command line.
func waitHostPids(t *testing.T, arg string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := hostPids(arg)
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes with %q, want %d", len(pids), arg, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSandboxTerminate: process/terminate kills the init and with it the
// whole sandbox, a descendant that left the group (setsid) included.
func TestSandboxTerminate(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	modes(t, func(t *testing.T, opts Options) {
		m, sink := newTestManager(t, opts)
		ws := workspace(t)
		for _, tty := range []bool{false, true} {
			id := "t-" + strconv.FormatBool(tty)
			tok := sleepToken()
			// A background sleep in the group, a setsid one whose
			// parent has exited, and a foreground wait.
			script := fmt.Sprintf(`sleep %s & setsid sh -c 'sleep %s' & echo ready; wait`, tok, tok)
			p := sandboxParams(t, id, codexWorkspaceWrite, ws, "sh", "-c", script)
			p.TTY = tty
			startSandboxed(t, m, p)
			sink.waitOutput(t, id, "ready")
			pids := waitHostPids(t, tok, 2)
			t.Cleanup(func() {
				for _, pid := range pids {
					_ = killPid(pid)
				}
			})
			if res := m.Terminate(protocol.TerminateParams{ProcessID: id}); !res.Running {
				t.Errorf("%s: terminate of a running process: running false", id)
			}
			evs := sink.waitClosed(t, id)
			if ex := exitedEvent(t, evs); ex.ExitCode != 137 || ex.SandboxDenied {
				t.Errorf("%s: exit %d denied %v, want 137 false", id, ex.ExitCode, ex.SandboxDenied)
			}
			waitDead(t, pids...)
		}
		checkNoTraces(t, ws)
	})
}

// TestSandboxCloseKillsEverything: the session's end leaves nothing of a
// sandbox behind, a setsid daemon included.
func TestSandboxCloseKillsEverything(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	modes(t, func(t *testing.T, opts Options) {
		sink := newRecSink()
		m := NewManager(opts, sink)
		ws := workspace(t)
		tok := sleepToken()
		startSandboxed(t, m, sandboxParams(t, "d", codexWorkspaceWrite, ws, "sh", "-c",
			fmt.Sprintf(`setsid sh -c 'sleep %s' </dev/null >/dev/null 2>&1 & sleep %s & echo ready; wait`, tok, tok)))
		sink.waitOutput(t, "d", "ready")
		pids := waitHostPids(t, tok, 2)
		t.Cleanup(func() {
			for _, pid := range pids {
				_ = killPid(pid)
			}
		})
		done := make(chan struct{})
		go func() { m.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return within 10s")
		}
		waitDead(t, pids...)
		checkNoTraces(t, ws)
	})
}

// TestSandboxStartErrors: policy errors as Parse returns them, the
// unsandboxed errors for a bad cwd or program, and no trace left by a
// failed start.
func TestSandboxStartErrors(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{})
	ws := workspace(t)
	p := params(t, "e", "true")
	p.Sandbox = json.RawMessage(`{}`)
	_, err := m.Start(p)
	wantErr(t, err, protocol.CodeInvalidParams, "missing field `permissions`")
	p.Sandbox = json.RawMessage(`{"permissions":{"type":"read-only"},"windowsSandboxLevel":"disabled"}`)
	_, err = m.Start(p)
	wantErr(t, err, protocol.CodeInvalidParams, "unknown variant `read-only`")

	needSandbox(t)
	noexec := filepath.Join(ws, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, cwd string
		argv      []string
		msg       string
		kind      protocol.Kind
	}{
		{"missing cwd", filepath.Join(ws, "nope"), []string{"true"}, "No such file or directory (os error 2)", protocol.KindSpawnNotFound},
		{"missing program", ws, []string{"/nonexistent/prog"}, "No such file or directory (os error 2)", protocol.KindSpawnNotFound},
		{"not executable", ws, []string{noexec}, "Permission denied (os error 13)", protocol.KindSpawnPermissionDenied},
		{"directory", ws, []string{"/"}, "Permission denied (os error 13)", protocol.KindSpawnPermissionDenied},
	}
	for _, tt := range tests {
		p := sandboxParams(t, "e", codexWorkspaceWrite, ws, tt.argv...)
		p.Cwd = fileURI(tt.cwd)
		_, err := m.Start(p)
		if err == nil {
			t.Fatalf("%s: started", tt.name)
		}
		wantErr(t, err, protocol.CodeInternal, tt.msg)
		if got := protocol.KindOf(err); got != tt.kind {
			t.Errorf("%s: data.kind %q, want %q", tt.name, got, tt.kind)
		}
	}
	checkNoTraces(t, ws)
	// None of the failures consumed the id.
	startSandboxed(t, m, sandboxParams(t, "e", codexWorkspaceWrite, ws, "true"))
}

// TestSandboxFailClosed: when the kernel lacks a feature the sandbox needs,
// a sandboxed start fails with -32603 naming it and nothing runs. Not
// parallel: it sets the kernel side's simulation hook in the environment.
func TestSandboxFailClosed(t *testing.T) {
	if s := sandbox.Probe(); !s.Available {
		t.Skipf("no sandbox to simulate a missing feature of: missing %s", s.Missing)
	}
	m, sink := newTestManager(t, Options{})
	ws := workspace(t)
	for _, missing := range []struct{ feature, named string }{
		{"landlock", "landlock"},
		{"seccomp", "seccomp"},
		{"mountns", "mount namespaces"},
		{"userns", "user namespaces"},
	} {
		if missing.feature == "userns" && os.Getuid() == 0 {
			continue // root needs no user namespace: the sandbox works without
		}
		t.Setenv(sandbox.SimulateEnv, missing.feature)
		for _, tmpl := range []string{codexWorkspaceWrite, codexReadOnly, `{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`} {
			for _, tty := range []bool{false, true} {
				p := params(t, "f", "touch", filepath.Join(ws, "ran"))
				p.Sandbox, p.TTY = fillPolicy(tmpl, ws), tty
				_, err := m.Start(p)
				wantErr(t, err, protocol.CodeInternal, "sandbox not available")
				if got := protocol.KindOf(err); got != protocol.KindSandboxUnavailable {
					t.Errorf("data.kind %q, want sandboxUnavailable", got)
				}
				if !strings.Contains(strings.ToLower(err.Error()), missing.named) {
					t.Errorf("the error does not name %s: %v", missing.named, err)
				}
			}
		}
	}
	if len(sink.of("f")) != 0 {
		t.Error("a refused start emitted events")
	}
	if _, err := os.Lstat(filepath.Join(ws, "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran unconfined: %v", err)
	}
	// Without a sandbox the same start runs.
	mustStart(t, m, params(t, "f", "true"))
}

// TestSandboxNonRoot re-runs the sandbox tests as an unprivileged user
// (nobody): a server that is not root sandboxes in an unprivileged user
// namespace. It skips, with the reason, when the kernel forbids that.
func TestSandboxNonRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	needSandbox(t)
	asnobody.Run(t, "", "^TestSandbox(WorkspaceWrite|ReadOnly|Type|Env|PTY|Stdin|Signal|Terminate|CloseKillsEverything|StartErrors|FailClosed|ExitedNotHeldByOutsideWriter)$", nil, "sandbox not available", "no sandbox")
}

// killPid is a test's last resort for a process it failed to kill.
func killPid(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// TestSandboxWiring checks the process side alone, with stand-ins for the
// policy and kernel sides: the Spec is started instead of the command, in
// the namespaces and with the ID maps it asks for, through the spawner and
// directly; the result says linuxSeccomp; Release runs exactly once, after
// the reap or after a failed start; a terminate kills the namespace's
// init. Not parallel: it swaps the package's seams.
func TestSandboxWiring(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the stand-in starts namespaces without a user namespace: needs root")
	}
	var releases atomic.Int32
	var lastCommand atomic.Pointer[[]string]
	oldPlan, oldCommand := planOf, planCommand
	t.Cleanup(func() { planOf, planCommand = oldPlan, oldCommand })
	planOf = func(raw json.RawMessage) (*policy.Plan, error) {
		pol, err := policy.Parse(raw)
		if err != nil || pol == nil {
			return nil, err
		}
		return &policy.Plan{}, nil
	}
	planCommand = func(_ *policy.Plan, path string, argv, env []string, dir string) (*sandbox.Spec, error) {
		cmd := append([]string{path, dir}, argv...)
		lastCommand.Store(&cmd)
		// The init stand-in: a shell, PID 1 of a new PID namespace in a
		// user namespace whose root is host uid 65534, that says so.
		return &sandbox.Spec{
			Path:        "/bin/sh",
			Argv:        []string{"sh", "-c", `echo "pid=$$ uid=$(cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //')"; echo ready; eval "$SCRIPT"`},
			Env:         append([]string{"PATH=/usr/bin:/bin"}, env...),
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
			UidMappings: []sandbox.IDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
			GidMappings: []sandbox.IDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
			Release:     func() { releases.Add(1) },
		}, nil
	}
	disabled := json.RawMessage(`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`)
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			releases.Store(0)
			m, sink := newTestManager(t, Options{DirectChildren: direct})
			ws := workspace(t)
			p := params(t, "w", "true", "arg")
			p.Cwd = fileURI(ws)
			p.Sandbox = disabled
			p.Env = map[string]string{"SCRIPT": "exit 7"}
			startSandboxed(t, m, p)
			evs := sink.waitClosed(t, "w")
			if out := output(evs, ""); !strings.Contains(out, "pid=1 uid=0 65534 1\n") || exitedEvent(t, evs).ExitCode != 7 {
				t.Errorf("stand-in init: %s", describeEvents(evs))
			}
			truePath, _ := exec.LookPath("true")
			if got, want := *lastCommand.Load(), []string{truePath, ws, "true", "arg"}; strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("Command got %q, want %q", got, want)
			}
			if n := releases.Load(); n != 1 {
				t.Errorf("Release ran %d times after the reap, want 1", n)
			}

			// A failed start releases too.
			p.ProcessID = "missing-cwd"
			p.Cwd = fileURI(filepath.Join(ws, "nope"))
			_, err := m.Start(p)
			wantErr(t, err, protocol.CodeInternal, "No such file or directory (os error 2)")
			if n := releases.Load(); n != 2 {
				t.Errorf("Release ran %d times in all after a failed start, want 2", n)
			}

			// Terminate kills PID 1 of the namespace, so everything in it
			// dies, a setsid grandchild included.
			tok := sleepToken()
			p.ProcessID, p.Cwd, p.TTY = "t", fileURI(ws), true
			p.Env = map[string]string{"SCRIPT": fmt.Sprintf(`setsid sleep %s & sleep %s`, tok, tok)}
			startSandboxed(t, m, p)
			sink.waitOutput(t, "t", "ready")
			pids := waitHostPids(t, tok, 2)
			t.Cleanup(func() {
				for _, pid := range pids {
					_ = killPid(pid)
				}
			})
			if res := m.Terminate(protocol.TerminateParams{ProcessID: "t"}); !res.Running {
				t.Error("terminate: running false")
			}
			if code := exitCode(t, sink.waitClosed(t, "t")); code != 137 {
				t.Errorf("exit %d, want 137", code)
			}
			waitDead(t, pids...)
			if n := releases.Load(); n != 3 {
				t.Errorf("Release ran %d times in all, want 3", n)
			}
		})
	}
}

// BenchmarkStartTrue: /bin/true from start to closed, without a sandbox
// and under codex's workspace-write policy, through the spawner.
func BenchmarkStartTrue(b *testing.B) {
	for _, sandboxed := range []bool{false, true} {
		b.Run(fmt.Sprintf("sandbox=%v", sandboxed), func(b *testing.B) {
			ws := filepath.Join(b.TempDir(), "ws")
			if err := os.Mkdir(ws, 0o755); err != nil {
				b.Fatal(err)
			}
			var p protocol.StartParams
			p.Argv, p.Cwd = []string{"/bin/true"}, fileURI(ws)
			if sandboxed {
				p.Sandbox = fillPolicy(codexWorkspaceWrite, ws)
				if _, err := planOf(p.Sandbox); err != nil {
					b.Skipf("no sandbox: %v", err)
				}
			}
			closed := make(chan struct{}, 1)
			m := NewManager(Options{Retention: time.Millisecond}, SinkFunc(func(ev Event) {
				if ev.Kind == EventClosed {
					closed <- struct{}{}
				}
			}))
			defer m.Close()
			b.ResetTimer()
			for i := range b.N {
				p.ProcessID = strconv.Itoa(i)
				if _, err := m.Start(p); err != nil {
					b.Fatal(err)
				}
				<-closed
			}
		})
	}
}

// TestSandboxExitedNotHeldByOutsideWriter: a sandbox's init is PID 1 of
// its own PID namespace, so every process of the sandbox dies with it, but
// a descriptor of its stdout can live outside it (passed to a daemon over
// a unix socket, or reopened through /proc by a process of the host, as
// here). exited must not wait for that holder: it comes once the readers
// have read what the sandbox wrote; what the holder writes later is late
// output, and closed follows when it lets go. A grandchild that keeps
// stdout open inside the sandbox dies with the init.
func TestSandboxExitedNotHeldByOutsideWriter(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	modes(t, func(t *testing.T, opts Options) {
		m, sink := newTestManager(t, opts)
		ws := workspace(t)

		// A grandchild keeps stdout open after the main process exits.
		tok := sleepToken()
		startSandboxed(t, m, sandboxParams(t, "grandchild", codexWorkspaceWrite, ws,
			"/bin/sh", "-c", "sleep "+tok+" & echo ready"))
		evs := sink.waitClosed(t, "grandchild")
		if got := output(evs, ""); got != "ready\n" || exitCode(t, evs) != 0 {
			t.Fatalf("grandchild: output %q exit %d", got, exitCode(t, evs))
		}

		// A process of the host holds the command's stdout.
		tok = sleepToken()
		startSandboxed(t, m, sandboxParams(t, "held", codexWorkspaceWrite, ws,
			"/bin/sh", "-c", "echo ready; exec sleep "+tok))
		sink.waitOutput(t, "held", "ready\n")
		pid := waitHostPids(t, tok, 1)[0]
		w, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", pid), os.O_WRONLY, 0)
		if errors.Is(err, os.ErrPermission) {
			killPid(pid)
			t.Skipf("cannot reopen the sandboxed command's stdout from the host: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.WriteString("from outside\n"); err != nil {
			t.Fatal(err)
		}
		sink.waitOutput(t, "held", "from outside\n")
		if err := killPid(pid); err != nil {
			t.Fatal(err)
		}
		// The old reaper waited for every reader's EOF: never, here.
		sink.waitFor(t, "held", "exited", func(evs []Event) bool {
			for _, ev := range evs {
				if ev.Kind == EventExited {
					return true
				}
			}
			return false
		})
		if _, err := w.WriteString("late\n"); err != nil {
			t.Fatal(err)
		}
		w.Close()
		evs = sink.waitClosed(t, "held")
		if got, want := output(evs, ""), "ready\nfrom outside\nlate\n"; got != want {
			t.Fatalf("held: output %q, want %q", got, want)
		}
		if ev := exitedEvent(t, evs); ev.ExitCode != 128+int(syscall.SIGKILL) {
			t.Fatalf("held: exit code %d, want %d", ev.ExitCode, 128+int(syscall.SIGKILL))
		}

		// Output written just before the end, while a process of the
		// host holds stdout: every byte comes before exited. The stdout
		// reader is held (hooks.beforeRead) after "ready\n" until the
		// reaper has looked at the streams with the sandbox gone (or
		// exited came without a look): the whole burst is then still in
		// the pipe, or in hand, and only the reaper's wait for the
		// readers (awaitSandboxOutput) keeps exited behind it. 60000
		// bytes fit in a pipe's default 64 KiB, so the writer does not
		// wait for the held reader.
		const burst = 60000
		var looked atomic.Bool // the reaper found the readers not done
		m.hooks.drainLook = func(p *Proc, drained bool) {
			if p.id == "burst" && !drained {
				looked.Store(true)
			}
		}
		var reads atomic.Int32
		m.hooks.beforeRead = func(p *Proc, stream string) {
			if p.id != "burst" || stream != protocol.StreamStdout || reads.Add(1) != 2 {
				return
			}
			for deadline := time.Now().Add(60 * time.Second); !looked.Load(); time.Sleep(time.Millisecond) {
				p.mu.Lock()
				exited := p.exited
				p.mu.Unlock()
				if exited {
					return
				}
				if time.Now().After(deadline) {
					t.Error("burst: the reaper never looked at the held reader")
					return
				}
			}
		}
		tok = sleepToken()
		startSandboxed(t, m, sandboxParams(t, "burst", codexWorkspaceWrite, ws,
			"/bin/sh", "-c", "echo ready; sleep "+tok+"; head -c "+strconv.Itoa(burst)+" /dev/zero | tr '\\0' a; exit 3"))
		sink.waitOutput(t, "burst", "ready\n")
		pid = waitHostPids(t, tok, 1)[0]
		w2, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", pid), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w2.Close()
		if err := killPid(pid); err != nil { // the sleep: the shell writes, then exits
			t.Fatal(err)
		}
		evs = sink.waitFor(t, "burst", "exited", func(evs []Event) bool {
			for _, ev := range evs {
				if ev.Kind == EventExited {
					return true
				}
			}
			return false
		})
		var before strings.Builder
		for _, ev := range evs {
			if ev.Kind == EventExited {
				if ev.ExitCode != 3 {
					t.Fatalf("burst: exit code %d, want 3", ev.ExitCode)
				}
				break
			}
			if ev.Kind == EventOutput && ev.Stream == protocol.StreamStdout { // stderr has "Killed"
				before.Write(ev.Data)
			}
		}
		if got, want := before.String(), "ready\n"+strings.Repeat("a", burst); got != want {
			t.Fatalf("burst: %d bytes before exited, want %d", len(got), len(want))
		}
		w2.Close()
		sink.waitClosed(t, "burst")
	})
}

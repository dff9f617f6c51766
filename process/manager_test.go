package process

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/protocol"
)

func TestPipesOutputAndExit(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	mustStart(t, m, params(t, "p1", "sh", "-c", "echo out; echo err >&2; exit 3"))
	evs := sink.waitClosed(t, "p1")
	if got := output(evs, protocol.StreamStdout); got != "out\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := output(evs, protocol.StreamStderr); got != "err\n" {
		t.Errorf("stderr = %q", got)
	}
	if code := exitCode(t, evs); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	for _, ev := range evs {
		if ev.ProcessID != "p1" {
			t.Errorf("event for %q", ev.ProcessID)
		}
		if ev.Kind == EventOutput && ev.Stream != protocol.StreamStdout && ev.Stream != protocol.StreamStderr {
			t.Errorf("stream %q", ev.Stream)
		}
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		script string
		code   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"exit 255", 255},
		{"kill -KILL $$", 137},
		{"kill -TERM $$", 143},
		{"kill -SEGV $$", 139},
	}
	m, sink := newTestManager(t, Options{})
	for i, tt := range tests {
		mustStart(t, m, params(t, strconv.Itoa(i), "sh", "-c", tt.script))
	}
	for i, tt := range tests {
		evs := sink.waitClosed(t, strconv.Itoa(i))
		if code := exitCode(t, evs); code != tt.code {
			t.Errorf("%s: exit code %d, want %d", tt.script, code, tt.code)
		}
	}
}

func TestClosedWaitsForBackgroundChild(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	// The background child waits on a FIFO the test opens once it has
	// seen exited: the order is then decided by the test, not by how
	// fast a loaded machine runs a sleep.
	fifo := func(name string) (path string, release func()) {
		path = filepath.Join(t.TempDir(), name)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		return path, func() {
			// Blocks until the child opens its end; the child reads a
			// line and goes on.
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("go\n")
			f.Close()
		}
	}
	hasKind := func(kind EventKind) func([]Event) bool {
		return func(evs []Event) bool {
			return slices.ContainsFunc(evs, func(ev Event) bool { return ev.Kind == kind })
		}
	}

	// sh exits at once; the background child keeps stdout open, so its
	// output comes after exited and closed only after it ends.
	gate, release := fifo("bg")
	p := params(t, "bg", "sh", "-c", `(read x < "$GATE"; echo late) & echo hi`)
	p.Env["GATE"] = gate
	mustStart(t, m, p)
	sink.waitFor(t, "bg", "exited", hasKind(EventExited))
	release()
	evs := sink.waitClosed(t, "bg")
	var exitedAt, lateAt int
	for i, ev := range evs {
		if ev.Kind == EventExited {
			exitedAt = i
		}
		if ev.Kind == EventOutput && strings.Contains(string(ev.Data), "late") {
			lateAt = i
		}
	}
	if lateAt == 0 || lateAt < exitedAt {
		t.Errorf("late output not after exited: %s", describeEvents(evs))
	}
	if code := exitCode(t, evs); code != 0 {
		t.Errorf("exit code %d", code)
	}

	// The brief's form: nothing printed by the background child, which
	// still holds stdout: closed waits for it.
	gate, release = fifo("bg2")
	p = params(t, "bg2", "sh", "-c", `(read x < "$GATE") & echo hi`)
	p.Env["GATE"] = gate
	mustStart(t, m, p)
	evs = sink.waitFor(t, "bg2", "exited", hasKind(EventExited))
	if hasKind(EventClosed)(evs) {
		t.Fatalf("closed while the background child holds stdout: %s", describeEvents(evs))
	}
	released := time.Now()
	release()
	sink.waitClosed(t, "bg2")
	if at := sink.deliveredAt(t, "bg2", EventClosed); at.Before(released) {
		t.Errorf("closed delivered before the background child was let go: %s", describeEvents(sink.of("bg2")))
	}
}

func TestPTY(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	tests := []struct {
		id, script string
		want       *regexp.Regexp
	}{
		{"crlf", `printf 'a\nb\n'`, regexp.MustCompile(`^a\r\nb\r\n$`)},
		{"tty", "tty", regexp.MustCompile(`^/dev/pts/[0-9]+\r\n$`)},
		{"size", "stty size", regexp.MustCompile(`^24 80\r\n$`)},
		{"stderr merged", "echo err >&2", regexp.MustCompile(`^err\r\n$`)},
		{"session leader", `[ "$(cut -d' ' -f6 /proc/$$/stat)" = $$ ] && echo 1`, regexp.MustCompile(`^1\r\n$`)},
	}
	for _, tt := range tests {
		p := params(t, tt.id, "sh", "-c", tt.script)
		p.TTY = true
		mustStart(t, m, p)
	}
	for _, tt := range tests {
		evs := sink.waitClosed(t, tt.id)
		for _, ev := range evs {
			if ev.Kind == EventOutput && ev.Stream != protocol.StreamPTY {
				t.Errorf("%s: stream %q, want pty", tt.id, ev.Stream)
			}
		}
		if got := output(evs, ""); !tt.want.MatchString(got) {
			t.Errorf("%s: output %q, want %v", tt.id, got, tt.want)
		}
	}
}

func TestPipesHaveNoTTY(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	// stdin is /dev/null, the child is a session leader without a
	// controlling terminal.
	mustStart(t, m, params(t, "p", "sh", "-c", `readlink /proc/self/fd/0; tty; [ "$(cut -d' ' -f6 /proc/$$/stat)" = $$ ] && echo 1`))
	evs := sink.waitClosed(t, "p")
	if got := output(evs, protocol.StreamStdout); got != "/dev/null\nnot a tty\n1\n" {
		t.Errorf("stdout = %q", got)
	}
}

func TestArg0(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	p := params(t, "a", "sh", "-c", "echo $0")
	p.Arg0 = str("myname")
	mustStart(t, m, p)
	if got := output(sink.waitClosed(t, "a"), ""); got != "myname\n" {
		t.Errorf("$0 = %q, want myname", got)
	}
}

func TestExactEnv(t *testing.T) {
	t.Parallel()
	envBin, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env program")
	}
	tests := []struct {
		id   string
		env  map[string]string
		want string
	}{
		{"empty", map[string]string{}, ""},
		{"nil", nil, ""},
		{"exact", map[string]string{"B": "x y", "A": "1", "CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE": "1", "EMPTY": ""}, "A=1\nB=x y\nEMPTY=\n"},
	}
	m, sink := newTestManager(t, Options{})
	for _, tt := range tests {
		p := params(t, tt.id, envBin)
		p.Env = tt.env
		mustStart(t, m, p)
	}
	for _, tt := range tests {
		if got := output(sink.waitClosed(t, tt.id), ""); got != tt.want {
			t.Errorf("%s: child env %q, want %q", tt.id, got, tt.want)
		}
	}
	// A shell adds only its own few variables.
	p := params(t, "sh", "sh", "-c", "env")
	p.Env = map[string]string{}
	mustStart(t, m, p)
	for _, line := range strings.Split(strings.TrimSpace(output(sink.waitClosed(t, "sh"), "")), "\n") {
		name, _, _ := strings.Cut(line, "=")
		switch name {
		case "PWD", "SHLVL", "_", "OLDPWD", "":
		default:
			t.Errorf("child shell sees %q with env {}", line)
		}
	}
}

func TestProgramLookup(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	bin := t.TempDir()
	script := filepath.Join(bin, "mytool")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho mytool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The child env's PATH wins.
	p := params(t, "path-wins", "echo", "x")
	p.Env = map[string]string{"PATH": "/nonexistent"}
	_, err := m.Start(p)
	wantErr(t, err, protocol.CodeInternal, "No such file or directory (os error 2)")

	p = params(t, "own-path", "mytool")
	p.Env = map[string]string{"PATH": "/nonexistent:" + bin}
	mustStart(t, m, p)
	if got := output(sink.waitClosed(t, "own-path"), ""); got != "mytool ran\n" {
		t.Errorf("mytool via the child PATH: %q", got)
	}

	// No PATH in the child env: the server's PATH finds echo.
	p = params(t, "server-path", "echo", "hi")
	p.Env = map[string]string{}
	mustStart(t, m, p)
	if got := output(sink.waitClosed(t, "server-path"), ""); got != "hi\n" {
		t.Errorf("echo via the server PATH: %q", got)
	}

	// A bare name found but not executable.
	p = params(t, "noexec", "noexec")
	p.Env = map[string]string{"PATH": bin}
	_, err = m.Start(p)
	wantErr(t, err, protocol.CodeInternal, "Permission denied (os error 13)")

	// A relative name with a slash is resolved against the child's cwd.
	p = params(t, "relative", "./mytool")
	p.Cwd = fileURI(bin)
	mustStart(t, m, p)
	if got := output(sink.waitClosed(t, "relative"), ""); got != "mytool ran\n" {
		t.Errorf("./mytool in its cwd: %q", got)
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*protocol.StartParams)
		code int
		msg  string
		kind protocol.Kind // 0.171's data.kind; "" for validation errors
	}{
		{"empty argv", func(p *protocol.StartParams) { p.Argv = nil }, protocol.CodeInvalidParams, "argv must not be empty", ""},
		{"missing cwd", func(p *protocol.StartParams) { p.Cwd = fileURI(filepath.Join(dir, "missing")) },
			protocol.CodeInternal, "No such file or directory (os error 2)", protocol.KindSpawnNotFound},
		{"cwd is a file", func(p *protocol.StartParams) { p.Cwd = fileURI(file) }, protocol.CodeInternal, "Not a directory (os error 20)", protocol.KindSpawnFailed},
		{"program missing", func(p *protocol.StartParams) { p.Argv = []string{filepath.Join(dir, "nope")} },
			protocol.CodeInternal, "No such file or directory (os error 2)", protocol.KindSpawnNotFound},
		{"bare program missing", func(p *protocol.StartParams) { p.Argv = []string{"no-such-program-xyz"} },
			protocol.CodeInternal, "No such file or directory (os error 2)", protocol.KindSpawnNotFound},
		{"empty program", func(p *protocol.StartParams) { p.Argv = []string{"", "x"} }, protocol.CodeInternal, "missing program for pipe spawn", ""},
		{"empty program, pty", func(p *protocol.StartParams) { p.Argv = []string{""}; p.TTY = true }, protocol.CodeInternal, "missing program for PTY spawn", ""},
		{"not executable", func(p *protocol.StartParams) { p.Argv = []string{file} }, protocol.CodeInternal, "Permission denied (os error 13)", protocol.KindSpawnPermissionDenied},
		{"program is a directory", func(p *protocol.StartParams) { p.Argv = []string{dir} }, protocol.CodeInternal, "(os error 13)", protocol.KindSpawnPermissionDenied},
		{"relative cwd", func(p *protocol.StartParams) { p.Cwd = "relative/dir" }, protocol.CodeInvalidParams, "invalid URI: relative URL without a base", ""},
		{"native cwd", func(p *protocol.StartParams) { p.Cwd = dir }, protocol.CodeInvalidParams, "invalid URI", ""},
		{"http cwd", func(p *protocol.StartParams) { p.Cwd = "http://example.com/" }, protocol.CodeInvalidParams, "unsupported path URI scheme `http`", ""},
		{"foreign host", func(p *protocol.StartParams) { p.Cwd = "file://server/share" }, protocol.CodeInvalidRequest, "is invalid on 'linux'", ""},
	}
	m, sink := newTestManager(t, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := params(t, "same-id", "true")
			tt.edit(&p)
			_, err := m.Start(p)
			wantErr(t, err, tt.code, tt.msg)
			if got := protocol.KindOf(err); got != tt.kind {
				t.Errorf("data.kind %q, want %q", got, tt.kind)
			}
			if m.Live() != 0 {
				t.Errorf("Live() = %d after a failed start", m.Live())
			}
			if _, err := m.Read(context.Background(), protocol.ReadParams{ProcessID: "same-id"}); err == nil {
				t.Error("a failed start left a readable process")
			}
		})
	}
	// A failed start does not consume the id.
	mustStart(t, m, params(t, "same-id", "true"))
	sink.waitClosed(t, "same-id")
}

func TestDuplicateID(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	mustStart(t, m, params(t, "p", "sleep", "0.2"))
	_, err := m.Start(params(t, "p", "true"))
	wantErr(t, err, protocol.CodeInvalidRequest, "process p already exists")
	sink.waitClosed(t, "p")
	// Retained after exit: still taken.
	_, err = m.Start(params(t, "p", "true"))
	wantErr(t, err, protocol.CodeInvalidRequest, "process p already exists")
	// The empty id is an id like any other.
	mustStart(t, m, params(t, "", "true"))
	_, err = m.Start(params(t, "", "true"))
	wantErr(t, err, protocol.CodeInvalidRequest, "process  already exists")
}

func TestRead(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	// Paced by stdin, not by sleeps: each piece is written only after the
	// previous one has arrived as its own chunk, so the chunking does not
	// depend on the machine's load.
	p := params(t, "r", "sh", "-c", "printf aaaa; read x; printf bb; read x; printf cccccc; read x; printf d; exit 7")
	p.PipeStdin = true
	mustStart(t, m, p)
	for i, upTo := range []string{"aaaa", "aaaabb", "aaaabbcccccc"} {
		sink.waitOutput(t, "r", upTo)
		if _, err := m.Write(protocol.WriteParams{ProcessID: "r", Chunk: []byte("\n"), WriteID: str(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	evs := sink.waitClosed(t, "r")
	var chunks []Event
	for _, ev := range evs {
		if ev.Kind == EventOutput {
			chunks = append(chunks, ev)
		}
	}
	if len(chunks) < 3 {
		t.Fatalf("want at least 3 output chunks: %s", describeEvents(evs))
	}
	last := evs[len(evs)-1].Seq // the closed event
	ctx := context.Background()
	read := func(after, maxBytes *uint64) *protocol.ReadResult {
		t.Helper()
		res, err := m.Read(ctx, protocol.ReadParams{ProcessID: "r", AfterSeq: after, MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Exited || !res.Closed || res.ExitCode == nil || *res.ExitCode != 7 || res.Failure != nil || res.SandboxDenied {
			t.Fatalf("state %+v", res)
		}
		return res
	}
	same := func(got []protocol.Chunk, want []Event) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i].Seq != want[i].Seq || got[i].Stream != want[i].Stream || string(got[i].Chunk) != string(want[i].Data) {
				return false
			}
		}
		return true
	}
	c0, c1 := chunks[0], chunks[1]
	tests := []struct {
		name     string
		after    *uint64
		maxBytes *uint64
		want     []Event
		nextSeq  uint64
	}{
		{"everything", nil, nil, chunks, last + 1},
		{"after 0", u64(0), nil, chunks, last + 1},
		{"after the first", u64(c0.Seq), nil, chunks[1:], last + 1},
		{"after the last chunk", u64(chunks[len(chunks)-1].Seq), nil, nil, last + 1},
		{"after everything", u64(last + 10), nil, nil, last + 1},
		{"maxBytes 0: one whole chunk", nil, u64(0), chunks[:1], c0.Seq + 1},
		{"maxBytes 1: one whole chunk", nil, u64(1), chunks[:1], c0.Seq + 1},
		{"budget reached exactly", nil, u64(uint64(len(c0.Data))), chunks[:1], c0.Seq + 1},
		{"next chunk would exceed", nil, u64(uint64(len(c0.Data) + len(c1.Data) - 1)), chunks[:1], c0.Seq + 1},
		{"two chunks", nil, u64(uint64(len(c0.Data) + len(c1.Data))), chunks[:2], c1.Seq + 1},
		{"large budget", nil, u64(1 << 40), chunks, chunks[len(chunks)-1].Seq + 1},
		{"budget, nothing left", u64(last), u64(100), nil, last + 1},
		{"budget after the first", u64(c0.Seq), u64(0), chunks[1:2], c1.Seq + 1},
	}
	for _, tt := range tests {
		res := read(tt.after, tt.maxBytes)
		if !same(res.Chunks, tt.want) {
			t.Errorf("%s: chunks %v, want %s", tt.name, res.Chunks, describeEvents(tt.want))
		}
		if res.NextSeq != tt.nextSeq {
			t.Errorf("%s: nextSeq %d, want %d", tt.name, res.NextSeq, tt.nextSeq)
		}
		if res.Chunks == nil {
			t.Errorf("%s: chunks is nil (must encode as [])", tt.name)
		}
	}
	_, err := m.Read(ctx, protocol.ReadParams{ProcessID: "nope"})
	wantErr(t, err, protocol.CodeInvalidRequest, "unknown process id nope")
}

func TestReadWhileRunning(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	mustStart(t, m, params(t, "r", "sh", "-c", "echo hi; exec sleep 30"))
	sink.waitOutput(t, "r", "hi")
	res, err := m.Read(context.Background(), protocol.ReadParams{ProcessID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Exited || res.Closed || res.ExitCode != nil || len(res.Chunks) != 1 || res.NextSeq != 2 {
		t.Errorf("running process: %+v", res)
	}
}

func TestReadWait(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	ctx := context.Background()
	wait := u64(10000)

	t.Run("wakes on output", func(t *testing.T) {
		mustStart(t, m, params(t, "out", "sh", "-c", "sleep 0.2; echo hi; exec sleep 30"))
		start := time.Now()
		res, err := m.Read(ctx, protocol.ReadParams{ProcessID: "out", WaitMs: wait})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Chunks) != 1 || string(res.Chunks[0].Chunk) != "hi\n" || res.Exited {
			t.Errorf("result %+v", res)
		}
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("returned after %v, not on output", d)
		}
		// Waiting after what was read waits for more.
		res, err = m.Read(ctx, protocol.ReadParams{ProcessID: "out", AfterSeq: u64(1), WaitMs: u64(100)})
		if err != nil || len(res.Chunks) != 0 || res.Exited || res.NextSeq != 2 {
			t.Errorf("nothing new: %+v %v", res, err)
		}
	})
	t.Run("wakes on exit", func(t *testing.T) {
		mustStart(t, m, params(t, "exit", "sleep", "0.2"))
		start := time.Now()
		res, err := m.Read(ctx, protocol.ReadParams{ProcessID: "exit", WaitMs: wait})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Exited || res.ExitCode == nil || *res.ExitCode != 0 || len(res.Chunks) != 0 {
			t.Errorf("result %+v", res)
		}
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("returned after %v, not on exit", d)
		}
		// After the exit event, a wait returns once closed.
		sink.waitClosed(t, "exit")
		res, err = m.Read(ctx, protocol.ReadParams{ProcessID: "exit", AfterSeq: u64(res.NextSeq), WaitMs: wait})
		if err != nil || !res.Closed {
			t.Errorf("after close: %+v %v", res, err)
		}
	})
	t.Run("times out", func(t *testing.T) {
		mustStart(t, m, params(t, "quiet", "sleep", "30"))
		start := time.Now()
		res, err := m.Read(ctx, protocol.ReadParams{ProcessID: "quiet", WaitMs: u64(150)})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Errorf("returned after %v, before waitMs", d)
		}
		if len(res.Chunks) != 0 || res.Exited || res.Closed || res.NextSeq != 1 {
			t.Errorf("result %+v", res)
		}
	})
	t.Run("context cancel", func(t *testing.T) {
		mustStart(t, m, params(t, "cancel", "sleep", "30"))
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, err := m.Read(cctx, protocol.ReadParams{ProcessID: "cancel", WaitMs: u64(60000)})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("returned after %v", d)
		}
	})
}

func TestRetainedWindow(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	// 3 MiB of output in many chunks.
	mustStart(t, m, params(t, "big", "head", "-c", strconv.Itoa(3<<20), "/dev/zero"))
	evs := sink.waitClosed(t, "big")
	var pushed []Event
	total := 0
	for _, ev := range evs {
		if ev.Kind == EventOutput {
			pushed = append(pushed, ev)
			total += len(ev.Data)
		}
	}
	if total != 3<<20 {
		t.Fatalf("pushed %d bytes, want %d", total, 3<<20)
	}
	res, err := m.Read(context.Background(), protocol.ReadParams{ProcessID: "big", AfterSeq: u64(0)})
	if err != nil {
		t.Fatal(err)
	}
	retained := 0
	for _, c := range res.Chunks {
		retained += len(c.Chunk)
	}
	if retained > 1<<20 || retained == 0 {
		t.Fatalf("retained %d bytes, want (0, 1 MiB]", retained)
	}
	// The retained chunks are the newest pushed chunks, whole and
	// contiguous.
	tail := pushed[len(pushed)-len(res.Chunks):]
	for i, c := range res.Chunks {
		if c.Seq != tail[i].Seq || len(c.Chunk) != len(tail[i].Data) {
			t.Fatalf("retained chunk %d is seq %d (%d bytes), pushed tail has seq %d (%d bytes)",
				i, c.Seq, len(c.Chunk), tail[i].Seq, len(tail[i].Data))
		}
	}
	// Only as much was evicted as needed.
	if older := pushed[len(pushed)-len(res.Chunks)-1]; retained+len(older.Data) <= 1<<20 {
		t.Errorf("seq %d (%d bytes) was evicted though %d bytes fit", older.Seq, len(older.Data), retained)
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	write := func(id, data string, writeID *string) (*protocol.WriteResult, error) {
		return m.Write(protocol.WriteParams{ProcessID: id, Chunk: []byte(data), WriteID: writeID})
	}
	accepted := func(res *protocol.WriteResult, err error) {
		t.Helper()
		if err != nil || res.Status != protocol.WriteAccepted {
			t.Fatalf("write: %+v %v", res, err)
		}
	}

	t.Run("pipe stdin", func(t *testing.T) {
		p := params(t, "cat", "cat")
		p.PipeStdin = true
		mustStart(t, m, p)
		accepted(write("cat", "hello\n", str("w1")))
		accepted(write("cat", "", str("w2"))) // an empty chunk is accepted
		sink.waitOutput(t, "cat", "hello\n")
		m.Terminate(protocol.TerminateParams{ProcessID: "cat"})
		sink.waitClosed(t, "cat")
	})
	t.Run("pty", func(t *testing.T) {
		p := params(t, "ptyw", "sh", "-c", "read x; echo got:$x")
		p.TTY = true
		mustStart(t, m, p)
		accepted(write("ptyw", "hello\n", str("w1")))
		if got := output(sink.waitClosed(t, "ptyw"), ""); !strings.Contains(got, "got:hello\r\n") {
			t.Errorf("pty output %q", got)
		}
	})
	t.Run("writeId dedup", func(t *testing.T) {
		p := params(t, "head", "head", "-c", "3")
		p.PipeStdin = true
		mustStart(t, m, p)
		accepted(write("head", "a", str("w1")))
		accepted(write("head", "a", str("w1"))) // a retry: not written again
		accepted(write("head", "b", str("w2")))
		accepted(write("head", "c", nil)) // writeId is optional here
		if got := output(sink.waitClosed(t, "head"), ""); got != "abc" {
			t.Errorf("head read %q, want abc", got)
		}
		// After exit: a retried id is still accepted, so is an empty
		// chunk (as on the reference); a new write fails.
		accepted(write("head", "a", str("w1")))
		accepted(write("head", "", str("w8")))
		_, err := write("head", "z", str("w9"))
		wantErr(t, err, protocol.CodeInternal, "failed to write to process stdin")
	})
	t.Run("statuses", func(t *testing.T) {
		mustStart(t, m, params(t, "nostdin", "sleep", "30"))
		res, err := write("nostdin", "x", str("w1"))
		if err != nil || res.Status != protocol.WriteStdinClosed {
			t.Errorf("no pipeStdin: %+v %v", res, err)
		}
		res, err = write("unknown", "x", str("w1"))
		if err != nil || res.Status != protocol.WriteUnknownProcess {
			t.Errorf("unknown: %+v %v", res, err)
		}
		p := params(t, "emptyid", "cat")
		p.PipeStdin = true
		mustStart(t, m, p)
		_, err = write("emptyid", "x", str(""))
		wantErr(t, err, protocol.CodeInvalidParams, "writeId must not be empty")
	})
	t.Run("exited", func(t *testing.T) {
		p := params(t, "gone", "true")
		p.PipeStdin = true
		mustStart(t, m, p)
		sink.waitClosed(t, "gone")
		_, err := write("gone", "x", str("w1"))
		wantErr(t, err, protocol.CodeInternal, "failed to write to process stdin")
	})
}

func TestWriteQueueLimit(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{StdinBuffered: 4096})
	p := params(t, "stuck", "sleep", "30") // never reads its stdin
	p.PipeStdin = true
	mustStart(t, m, p)
	chunk := make([]byte, 1000)
	for i := range 1000 {
		_, err := m.Write(protocol.WriteParams{ProcessID: "stuck", Chunk: chunk, WriteID: str(strconv.Itoa(i))})
		if err != nil {
			// Refused for the queue, not for a broken pipe. (How much
			// goes through first depends on how fast the writer
			// goroutine drains into the 64 KiB pipe.)
			wantErr(t, err, protocol.CodeInternal, "failed to write to process stdin: ")
			wantErr(t, err, protocol.CodeInternal, "(limit 4096)")
			return
		}
	}
	t.Fatal("1 MB queued for a process that never reads, with a 4 KiB limit")
}

func TestSignal(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	for _, tty := range []bool{false, true} {
		id := "sig-" + strconv.FormatBool(tty)
		p := params(t, id, "sh", "-c", `trap 'echo got INT; exit 5' INT; echo ready; while :; do sleep 0.02; done`)
		p.TTY = tty
		mustStart(t, m, p)
		sink.waitOutput(t, id, "ready")
		if err := m.Signal(protocol.SignalParams{ProcessID: id, Signal: "interrupt"}); err != nil {
			t.Fatal(err)
		}
		evs := sink.waitClosed(t, id)
		if !strings.Contains(output(evs, ""), "got INT") || exitCode(t, evs) != 5 {
			t.Errorf("tty=%v: %s", tty, describeEvents(evs))
		}
		// Exited: no error.
		if err := m.Signal(protocol.SignalParams{ProcessID: id, Signal: "interrupt"}); err != nil {
			t.Errorf("signal to an exited process: %v", err)
		}
	}
	err := m.Signal(protocol.SignalParams{ProcessID: "x", Signal: "bogus"})
	wantErr(t, err, protocol.CodeInvalidParams, "unknown variant `bogus`")
	if err := m.Signal(protocol.SignalParams{ProcessID: "unknown", Signal: "interrupt"}); err != nil {
		t.Errorf("signal to an unknown process: %v", err)
	}
}

// startPid starts a shell script whose first output line is a pid (of a
// background child) and returns that pid.
func startPid(t *testing.T, m *Manager, sink *recSink, id, script string) int {
	t.Helper()
	mustStart(t, m, params(t, id, "sh", "-c", script))
	evs := sink.waitFor(t, id, "pid line", func(evs []Event) bool { return strings.Contains(output(evs, ""), "\n") })
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(output(evs, ""), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatalf("background child %d not running", pid)
	}
	return pid
}

func TestTerminate(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	child := startPid(t, m, sink, "t", "sleep 30 & echo $!; wait")
	if res := m.Terminate(protocol.TerminateParams{ProcessID: "t"}); !res.Running {
		t.Error("terminate of a running process: running false")
	}
	evs := sink.waitClosed(t, "t")
	if code := exitCode(t, evs); code != 137 {
		t.Errorf("exit code %d, want 137", code)
	}
	waitDead(t, child) // the whole group died
	if res := m.Terminate(protocol.TerminateParams{ProcessID: "t"}); res.Running {
		t.Error("terminate of an exited process: running true")
	}
	if res := m.Terminate(protocol.TerminateParams{ProcessID: "unknown"}); res.Running {
		t.Error("terminate of an unknown process: running true")
	}

	// PTY processes too.
	p := params(t, "tp", "sleep", "30")
	p.TTY = true
	mustStart(t, m, p)
	if res := m.Terminate(protocol.TerminateParams{ProcessID: "tp"}); !res.Running {
		t.Error("terminate pty: running false")
	}
	if code := exitCode(t, sink.waitClosed(t, "tp")); code != 137 {
		t.Errorf("pty exit code %d, want 137", code)
	}
}

// TestCloseKillsEverything is not parallel: it counts goroutines.
func TestCloseKillsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	sink := newRecSink()
	m := NewManager(Options{}, sink)
	var pids []int
	// A running leader with a background child.
	pids = append(pids, startPid(t, m, sink, "running", "sleep 30 & echo $!; wait"))
	// A leader that exited, leaving its background child holding stdout.
	pids = append(pids, startPid(t, m, sink, "orphan", "sleep 30 & echo $!"))
	sink.waitFor(t, "orphan", "exited", func(evs []Event) bool {
		return len(evs) > 0 && evs[len(evs)-1].Kind == EventExited
	})
	// A PTY and a process with a stdin pipe.
	p := params(t, "pty", "sleep", "30")
	p.TTY = true
	mustStart(t, m, p)
	p = params(t, "stdin", "cat")
	p.PipeStdin = true
	mustStart(t, m, p)
	if _, err := m.Write(protocol.WriteParams{ProcessID: "stdin", Chunk: []byte("x"), WriteID: str("1")}); err != nil {
		t.Fatal(err)
	}
	// A closed process whose background child no longer holds its
	// streams. The reference kills that child at session end too; we do
	// not, as the group id may have been reused by then (see Proc.kill).
	detached := startPid(t, m, sink, "done", "sleep 30 >/dev/null 2>&1 & echo $!")
	t.Cleanup(func() { _ = syscall.Kill(detached, syscall.SIGKILL) })
	sink.waitClosed(t, "done")
	// A descendant that left the process group (setsid) and holds stdout:
	// it is out of reach of a group kill, but Close must still return.
	// The pid is printed after setsid, so the escape has happened.
	escaped := startPid(t, m, sink, "escaped", `setsid sh -c 'echo $$; exec sleep 30' &`)
	t.Cleanup(func() { _ = syscall.Kill(escaped, syscall.SIGKILL) })

	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s")
	}
	waitDead(t, pids...)
	for _, id := range []string{"running", "orphan", "pty", "stdin", "escaped"} {
		evs := sink.of(id)
		if len(evs) == 0 || evs[len(evs)-1].Kind != EventClosed {
			t.Errorf("%s: no closed event after Close: %s", id, describeEvents(evs))
		}
	}
	if _, err := m.Start(params(t, "late", "true")); err == nil {
		t.Error("Start after Close succeeded")
	}
	if m.Live() != 0 {
		t.Errorf("Live() = %d after Close", m.Live())
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{Retention: 100 * time.Millisecond})
	mustStart(t, m, params(t, "r", "echo", "hi"))
	sink.waitClosed(t, "r")
	// Readable right after close...
	if res, err := m.Read(context.Background(), protocol.ReadParams{ProcessID: "r"}); err != nil || !res.Closed {
		t.Fatalf("read after close: %+v %v", res, err)
	}
	// ... and freed after the retention period.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := m.Read(context.Background(), protocol.ReadParams{ProcessID: "r"})
		if err != nil {
			wantErr(t, err, protocol.CodeInvalidRequest, "unknown process id r")
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("process still readable 5s after close with a 100ms retention")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The id can be used again.
	mustStart(t, m, params(t, "r", "true"))
	sink.waitFor(t, "r", "second closed", func(evs []Event) bool {
		n := 0
		for _, ev := range evs {
			if ev.Kind == EventClosed {
				n++
			}
		}
		return n == 2
	})
}

func TestMaxProcesses(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{MaxProcesses: 2})
	mustStart(t, m, params(t, "a", "sleep", "30"))
	mustStart(t, m, params(t, "b", "sleep", "30"))
	if m.Live() != 2 {
		t.Errorf("Live() = %d, want 2", m.Live())
	}
	_, err := m.Start(params(t, "c", "true"))
	wantErr(t, err, protocol.CodeInvalidRequest, "too many processes")
	// Closed but retained processes do not count.
	m.Terminate(protocol.TerminateParams{ProcessID: "a"})
	sink.waitClosed(t, "a")
	if m.Live() != 1 {
		t.Errorf("Live() = %d, want 1", m.Live())
	}
	mustStart(t, m, params(t, "c", "true"))
	if _, err := m.Read(context.Background(), protocol.ReadParams{ProcessID: "a"}); err != nil {
		t.Errorf("the closed process is no longer retained: %v", err)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestNoFDLeak is not parallel: it counts the test process's descriptors.
func TestNoFDLeak(t *testing.T) {
	sink := newRecSink()
	m := NewManager(Options{Retention: time.Millisecond}, sink)
	before := openFDs(t)
	missing := fileURI(filepath.Join(t.TempDir(), "missing"))
	for i := range 20 {
		for _, tty := range []bool{false, true} {
			// Failed spawns (missing cwd) ...
			p := params(t, "bad", "true")
			p.Cwd, p.TTY, p.PipeStdin = missing, tty, true
			if _, err := m.Start(p); err == nil {
				t.Fatal("start with a missing cwd succeeded")
			}
			// ... and finished processes of every kind.
			id := strconv.Itoa(i) + strconv.FormatBool(tty)
			p = params(t, id, "sh", "-c", "echo x")
			p.TTY, p.PipeStdin = tty, true
			mustStart(t, m, p)
			sink.waitClosed(t, id)
		}
	}
	m.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := openFDs(t)
		if after <= before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d descriptors open after 80 starts, %d before", after, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	// Racing starts of one id: exactly one wins.
	var wg sync.WaitGroup
	var won atomic.Int32
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.Start(params(t, "dup", "sleep", "30")); err == nil {
				won.Add(1)
			} else {
				var pe *protocol.Error
				if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidRequest {
					t.Errorf("losing start: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d starts of one id succeeded", won.Load())
	}
	// Every method at once on live processes (run with -race).
	for i := range 5 {
		// Ignored signals stay ignored across exec: cat outlives them.
		p := params(t, "c"+strconv.Itoa(i), "sh", "-c", `trap "" USR1; echo ready; exec cat`)
		p.PipeStdin, p.TTY = true, i%2 == 0
		mustStart(t, m, p)
		sink.waitOutput(t, p.ProcessID, "ready")
	}
	ctx := context.Background()
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				id := "c" + strconv.Itoa((g+j)%5)
				_, _ = m.Write(protocol.WriteParams{ProcessID: id, Chunk: []byte("x\n"), WriteID: str(strconv.Itoa(g*1000 + j))})
				_, _ = m.Read(ctx, protocol.ReadParams{ProcessID: id, MaxBytes: u64(10)})
				_ = m.Signal(protocol.SignalParams{ProcessID: id, Signal: "user1"})
				_ = m.Live()
			}
		}()
	}
	wg.Wait()
	for i := range 5 {
		id := "c" + strconv.Itoa(i)
		if res := m.Terminate(protocol.TerminateParams{ProcessID: id}); !res.Running {
			t.Errorf("%s died before terminate: %s", id, describeEvents(sink.of(id)))
		}
		sink.waitClosed(t, id)
	}
}

func TestCloseStdin(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	for _, tty := range []bool{false, true} {
		id := "cat-" + strconv.FormatBool(tty)
		p := params(t, id, "cat")
		p.PipeStdin, p.TTY = true, tty
		mustStart(t, m, p)
		if _, err := m.Write(protocol.WriteParams{ProcessID: id, Chunk: []byte("abc\n"), WriteID: str("1")}); err != nil {
			t.Fatal(err)
		}
		if err := m.CloseStdin(id); err != nil {
			t.Fatal(err)
		}
		evs := sink.waitClosed(t, id) // cat sees end of input and exits
		if code := exitCode(t, evs); code != 0 {
			t.Errorf("tty=%v: exit %d: %s", tty, code, describeEvents(evs))
		}
		if out := output(evs, ""); !strings.Contains(out, "abc") {
			t.Errorf("tty=%v: output %q", tty, out)
		}
	}
	// A pipe's input stays closed: later writes fail.
	p := params(t, "sleeper", "sleep", "30")
	p.PipeStdin = true
	mustStart(t, m, p)
	if err := m.CloseStdin("sleeper"); err != nil {
		t.Fatal(err)
	}
	_, err := m.Write(protocol.WriteParams{ProcessID: "sleeper", Chunk: []byte("x"), WriteID: str("1")})
	wantErr(t, err, protocol.CodeInternal, "failed to write to process stdin")
	// No writable stdin: nothing to close, no error. Unknown: an error.
	mustStart(t, m, params(t, "nostdin", "sleep", "30"))
	if err := m.CloseStdin("nostdin"); err != nil {
		t.Errorf("CloseStdin without stdin: %v", err)
	}
	wantErr(t, m.CloseStdin("unknown"), protocol.CodeInvalidRequest, "unknown process id unknown")
}

// A terminal child that closes its descriptors some time before it exits
// must not be hung up (SIGHUP, exit 129) by the server closing the PTY
// master early: its own exit status is reported.
func TestPTYChildClosingDescriptorsKeepsItsStatus(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	p := params(t, "closer", "sh", "-c", "echo bye; exec 0<&- 1>&- 2>&-; sleep 0.2; exit 3")
	p.TTY = true
	mustStart(t, m, p)
	evs := sink.waitClosed(t, "closer")
	if code := exitCode(t, evs); code != 3 {
		t.Errorf("exit %d, want 3: %s", code, describeEvents(evs))
	}
	if out := output(evs, ""); !strings.Contains(out, "bye") {
		t.Errorf("output %q", out)
	}
}

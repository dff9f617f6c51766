package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/protocol"
)

var shEnv = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}

// readAll reads stdout and stderr concurrently, as a caller must.
func readAll(t *testing.T, p *client.Process) (stdout, stderr []byte, outErr, errErr error) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		stderr, errErr = io.ReadAll(p.Stderr())
	}()
	stdout, outErr = io.ReadAll(p.Stdout())
	wg.Wait()
	return
}

func TestRunOutputAndExitCode(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		cases := []struct {
			script, stdout, stderr string
			code                   int
		}{
			{"echo hi; echo err >&2", "hi\n", "err\n", 0},
			{"printf abc; exit 7", "abc", "", 7},
			{"kill -TERM $$", "", "", 143},
			{"true", "", "", 0},
		}
		for _, tc := range cases {
			p, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", tc.script}, Env: shEnv})
			if err != nil {
				t.Fatalf("Start %q: %v", tc.script, err)
			}
			out, errOut, e1, e2 := readAll(t, p)
			if e1 != nil || e2 != nil {
				t.Fatalf("%q: read errors %v, %v", tc.script, e1, e2)
			}
			code, err := p.Wait(ctx)
			if err != nil {
				t.Fatalf("%q: Wait: %v", tc.script, err)
			}
			if string(out) != tc.stdout || string(errOut) != tc.stderr || code != tc.code {
				t.Errorf("%q: got stdout %q stderr %q code %d, want %q %q %d", tc.script, out, errOut, code, tc.stdout, tc.stderr, tc.code)
			}
			if p.SandboxDenied() {
				t.Errorf("%q: SandboxDenied true without a sandbox", tc.script)
			}
		}
		// A complete, in-order event stream needs no process/read at all.
		// The reference's pushes are not always in seq order (seen: stderr
		// seq 2 before stdout seq 1, closed before exited), and the client
		// rightly reads to fill the gap, so only ours is held to zero.
		if n := client.ReadRequests(c); n != 0 && s.name != "reference" {
			t.Errorf("%d process/read requests for complete pushed streams, want 0", n)
		}
	})
}

func TestStartErrorsCarryWireCode(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		dir := t.TempDir()
		cases := []struct {
			cmd  client.Cmd
			code int
		}{
			{client.Cmd{Argv: []string{"true"}, Cwd: dir + "/missing"}, protocol.CodeInternal},
			{client.Cmd{Argv: []string{dir + "/no-such-program"}, Cwd: dir}, protocol.CodeInternal},
		}
		for _, tc := range cases {
			_, err := c.Start(ctx, tc.cmd)
			var e *client.Error
			if !errors.As(err, &e) || e.Code != tc.code {
				t.Errorf("Start %v: error %v, want a *client.Error with code %d", tc.cmd.Argv, err, tc.code)
			}
		}
		// The same id twice is refused by the server.
		if _, err := c.Start(ctx, client.Cmd{Argv: []string{"true"}, ProcessID: "dup"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Start(ctx, client.Cmd{Argv: []string{"true"}, ProcessID: "dup"}); err == nil {
			t.Errorf("second Start with the same ProcessID succeeded")
		}
	})
}

func TestLargeOutputInOrder(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		const lines = 150000 // ~1 MB
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"seq", "1", strconv.Itoa(lines)}, Env: shEnv})
		if err != nil {
			t.Fatal(err)
		}
		out, _, err1, err2 := readAll(t, p)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		checkSeq(t, out, 1, lines)
		if code, err := p.Wait(ctx); code != 0 || err != nil {
			t.Fatalf("Wait = %d, %v", code, err)
		}
	})
}

// checkSeq checks that out is exactly the lines from..to of seq(1).
func checkSeq(t *testing.T, out []byte, from, to int) {
	t.Helper()
	var want bytes.Buffer
	for i := from; i <= to; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if !bytes.Equal(out, want.Bytes()) {
		got := strings.Split(string(out), "\n")
		t.Fatalf("output is %d bytes (%d lines), want %d bytes; first lines %q, last %q", len(out), len(got), want.Len(), got[:min(3, len(got))], got[max(0, len(got)-3):])
	}
}

// A reader that stops reading makes the client stop taking pushes; once it
// reads again, the client recovers exactly what it dropped with process/read.
func TestSlowReaderRecoversWithoutLoss(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		// 3 bursts of ~200 KB, each released by one line on stdin, so the
		// server never holds more than its retained window unread.
		script := `for b in 1 2 3; do read x; seq $(( (b-1)*30000+1 )) $(( b*30000 )); done`
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"bash", "-c", script}, Env: shEnv, StdinPipe: true, BufferSize: 16 << 10})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for b := 1; b <= 3; b++ {
			if err := p.Write(ctx, []byte("go\n")); err != nil {
				t.Fatal(err)
			}
			// Do not read until the whole burst was produced: wait for the
			// burst's last line to be retained by the server by giving it
			// time, then read exactly the burst.
			time.Sleep(200 * time.Millisecond)
			want := len(seqText((b-1)*30000+1, b*30000))
			buf := make([]byte, want)
			if _, err := io.ReadFull(p.Stdout(), buf); err != nil {
				t.Fatalf("burst %d: %v after %d bytes", b, err, out.Len())
			}
			out.Write(buf)
		}
		rest, err := io.ReadAll(p.Stdout())
		if err != nil {
			t.Fatal(err)
		}
		out.Write(rest)
		checkSeq(t, out.Bytes(), 1, 90000)
		if code, err := p.Wait(ctx); code != 0 || err != nil {
			t.Fatalf("Wait = %d, %v", code, err)
		}
		if client.ReadRequests(c) == 0 {
			t.Errorf("no process/read: the 16 KiB buffer should have forced recovery")
		}
	})
}

func seqText(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// When more than the server's retained window is produced while nobody
// reads, the reader ends with ErrOutputLost, and what it delivered is in
// order without duplicates.
func TestOutputLostIsReported(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		// 1.7 MB: more than the server retains (1 MiB) plus the client's
		// 16 KiB buffer.
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"seq", "1", "250000"}, Env: shEnv, BufferSize: 16 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if code, err := p.Wait(ctx); code != 0 || err != nil {
			t.Fatalf("Wait = %d, %v", code, err)
		}
		out, err := io.ReadAll(p.Stdout())
		if !errors.Is(err, client.ErrOutputLost) {
			t.Fatalf("reading 1.7 MB that were never read while produced: err %v, want ErrOutputLost", err)
		}
		// Chunks are lost whole, so what arrived is a prefix of the output
		// followed by a suffix of it: in order, nothing duplicated.
		full := seqText(1, 250000)
		i := 0
		for i < len(out) && out[i] == full[i] {
			i++
		}
		if len(out) >= len(full) || !strings.HasSuffix(full, string(out[i:])) {
			t.Fatalf("delivered %d of %d bytes: not a prefix (%d bytes) plus a suffix of the output", len(out), len(full), i)
		}
		if !strings.HasSuffix(string(out), "\n250000\n") {
			t.Errorf("the newest output (retained by the server) is missing")
		}
	})
}

func TestStdinAndTTY(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		// Pipe stdin: head exits after 6 bytes, so this works without a
		// way to close stdin.
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"head", "-c", "6"}, Env: shEnv, StdinPipe: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(p.Stdin(), "hello\nignored"); err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(p.Stdout())
		if string(out) != "hello\n" {
			t.Errorf("head -c 6 printed %q", out)
		}
		// Without Stdin, writes fail locally.
		q, err := c.Start(ctx, client.Cmd{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Write(ctx, []byte("x")); !errors.Is(err, client.ErrStdinClosed) {
			t.Errorf("write to a process without Stdin: %v, want ErrStdinClosed", err)
		}
		// TTY: one stream, a terminal, writable.
		tp, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", `test -t 0 && echo tty; read l; echo "got $l"`}, Env: shEnv, TTY: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := tp.Write(ctx, []byte("abc\n")); err != nil {
			t.Fatal(err)
		}
		out, err = io.ReadAll(tp.Output())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "tty\r\n") || !strings.Contains(string(out), "got abc\r\n") {
			t.Errorf("tty output %q", out)
		}
		if code, _ := tp.Wait(ctx); code != 0 {
			t.Errorf("tty exit %d", code)
		}
	})
}

func TestSignalAndTerminate(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", `trap 'echo got; exit 3' INT; echo ready; while :; do sleep 0.05; done`}, Env: shEnv})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(p.Stdout(), buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("read %q, %v", buf, err)
		}
		if err := p.Signal(ctx, client.Interrupt); err != nil {
			t.Fatal(err)
		}
		if code, err := p.Wait(ctx); code != 3 || err != nil {
			t.Errorf("after interrupt: Wait = %d, %v; want 3", code, err)
		}
		q, err := c.Start(ctx, client.Cmd{Argv: []string{"sleep", "100"}, Env: shEnv})
		if err != nil {
			t.Fatal(err)
		}
		if running, err := q.Terminate(ctx); !running || err != nil {
			t.Errorf("Terminate = %v, %v", running, err)
		}
		if code, err := q.Wait(ctx); code != 137 || err != nil {
			t.Errorf("after terminate: Wait = %d, %v; want 137", code, err)
		}
	})
}

func TestManyConcurrentProcesses(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d; exit %d", i, i%5)}, Env: shEnv})
				if err != nil {
					errs <- err
					return
				}
				out, _ := io.ReadAll(p.Stdout())
				code, err := p.Wait(ctx)
				if err != nil || code != i%5 || string(out) != fmt.Sprintf("%d\n", i) {
					errs <- fmt.Errorf("process %d: out %q code %d err %v", i, out, code, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestSignalNames(t *testing.T) {
	bin, err := ours()
	if err != nil {
		t.Skip(err)
	}
	s := server{name: "ours", bin: bin, env: func(testing.TB) []string { return nil }}
	c := s.stdio(t, client.Options{})
	ctx := testCtx(t)
	for _, tc := range []struct {
		sig  client.Signal
		code int
	}{{client.Terminate, 143}, {client.Hangup, 129}, {client.Kill, 137}, {client.User1, 138}} {
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", "echo ready; exec sleep 30"}, Env: shEnv})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		io.ReadFull(p.Stdout(), buf)
		if err := p.Signal(ctx, tc.sig); err != nil {
			t.Fatalf("Signal(%s): %v", tc.sig, err)
		}
		if code, err := p.Wait(ctx); code != tc.code || err != nil {
			t.Errorf("after %s: Wait = %d, %v; want %d", tc.sig, code, err, tc.code)
		}
	}
}

// CloseStdin ends a pipe's input on this project's server (an extension);
// elsewhere it says it is unsupported.
func TestCloseStdin(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"cat"}, Env: shEnv, StdinPipe: true})
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640 KB: several writes
		if err := p.Write(ctx, data); err != nil {
			t.Fatal(err)
		}
		err = p.CloseStdin(ctx)
		if s.name == "reference" {
			if !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("CloseStdin on the reference: %v, want ErrUnsupported", err)
			}
			p.Terminate(ctx)
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(p.Stdout())
		if err != nil || !bytes.Equal(out, data) {
			t.Errorf("cat returned %d bytes (%v), want the %d written", len(out), err, len(data))
		}
		if err := p.Write(ctx, []byte("late")); !errors.Is(err, client.ErrStdinClosed) {
			t.Errorf("write after CloseStdin: %v, want ErrStdinClosed", err)
		}
		if code, err := p.Wait(ctx); code != 0 || err != nil {
			t.Errorf("Wait = %d, %v", code, err)
		}
	})
}

// A reader that never reads does not make the client's memory grow with
// the output: 32 MiB produced, about BufferSize held.
func TestUnreadOutputIsBounded(t *testing.T) {
	bin, err := ours()
	if err != nil {
		t.Skip(err)
	}
	s := server{name: "ours", bin: bin, env: func(testing.TB) []string { return nil }}
	c := s.stdio(t, client.Options{})
	ctx := testCtx(t)
	p, err := c.Start(ctx, client.Cmd{Argv: []string{"head", "-c", "33554432", "/dev/zero"}, BufferSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(ctx); code != 0 || err != nil {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > 8<<20 {
		t.Errorf("heap holds %d MiB after 32 MiB of unread output with a 1 MiB buffer", ms.HeapAlloc>>20)
	}
	n, err := io.Copy(io.Discard, p.Stdout())
	if !errors.Is(err, client.ErrOutputLost) || n < 1<<20 || n >= 32<<20 {
		t.Errorf("read %d bytes, %v; want about 2 MiB (buffer + retained window) and ErrOutputLost", n, err)
	}
	runtime.KeepAlive(p)
}

// Cmd.Stdin is a reader, as with os/exec: it is copied to the process, and
// its end closes the process's stdin (so cat exits); nil is no input at all.
// The reference cannot close a pipe's stdin, so only head's bounded read
// runs there.
func TestCmdStdinReader(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		big := strings.Repeat("0123456789abcdef", 40<<10) // 640 KiB: several process/writes
		cases := []struct {
			name  string
			argv  []string
			stdin io.Reader
			want  string
			ours  bool // needs process/closeStdin
		}{
			{"head", []string{"head", "-c", "6"}, strings.NewReader("hello\nignored"), "hello\n", false},
			{"cat to EOF", []string{"cat"}, strings.NewReader(big), big, true},
			{"nil stdin", []string{"cat"}, nil, "", false},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if tc.ours && s.name != "ours" {
					t.Skip("the reference cannot close a pipe's stdin")
				}
				var out bytes.Buffer
				p, err := c.Start(ctx, client.Cmd{Argv: tc.argv, Env: shEnv, Stdin: tc.stdin, Stdout: &out})
				if err != nil {
					t.Fatal(err)
				}
				code, err := p.Wait(ctx)
				if err != nil || code != 0 {
					t.Fatalf("Wait: %d, %v", code, err)
				}
				if out.String() != tc.want {
					t.Errorf("output %d bytes %.40q, want %d bytes %.40q", out.Len(), out.String(), len(tc.want), tc.want)
				}
			})
		}
		if _, err := c.Start(ctx, client.Cmd{Argv: []string{"true"}, Stdin: strings.NewReader(""), StdinPipe: true}); err == nil {
			t.Error("Start with both Stdin and StdinPipe: no error")
		}
	})
}

// Cmd.Sandbox and WithSandbox confine a process and fs calls on our server:
// read-only refuses a write (exit non-zero, SandboxDenied), workspace-write
// allows it in the working directory and not beside it.
func TestSandboxConfines(t *testing.T) {
	bin, err := ours()
	if err != nil {
		t.Skip(err)
	}
	s := server{name: "ours", bin: bin, env: func(testing.TB) []string { return os.Environ() }}
	ctx := testCtx(t)
	c := s.stdio(t, client.Options{})
	if !c.Info().Capabilities["linuxSandbox"] {
		t.Skip("the server has no kernel sandbox here")
	}
	// Not under /tmp, which workspace-write leaves writable: a directory
	// of the test's own beside the package.
	base, err := os.MkdirTemp(".", ".sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if base, err = filepath.Abs(base); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(base, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(mode client.SandboxMode, script string) (*client.Process, int) {
		t.Helper()
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"/bin/sh", "-c", script}, Cwd: work, InheritEnv: "core", Sandbox: &client.Sandbox{Mode: mode}})
		if err != nil {
			t.Fatal(err)
		}
		code, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p, code
	}
	p, code := run(client.SandboxReadOnly, "touch inside")
	if code == 0 || !p.SandboxDenied() || p.SandboxType() == "none" {
		t.Errorf("read-only touch: exit %d, denied %v, type %q; want a denied failure", code, p.SandboxDenied(), p.SandboxType())
	}
	if _, code := run(client.SandboxWorkspaceWrite, "touch inside"); code != 0 {
		t.Errorf("workspace-write touch in the workspace: exit %d", code)
	}
	if _, code := run(client.SandboxWorkspaceWrite, "touch ../beside"); code == 0 {
		t.Errorf("workspace-write touch beside the workspace: exit 0")
	}
	if _, err := os.Stat(filepath.Join(base, "beside")); err == nil {
		t.Errorf("the sandboxed command wrote beside the workspace")
	}
	sctx := client.WithSandbox(ctx, &client.Sandbox{Mode: client.SandboxWorkspaceWrite, Cwd: work})
	if err := c.WriteFile(sctx, filepath.Join(work, "f"), []byte("x")); err != nil {
		t.Errorf("sandboxed WriteFile in the workspace: %v", err)
	}
	if err := c.WriteFile(sctx, filepath.Join(base, "g"), []byte("x")); err == nil {
		t.Errorf("sandboxed WriteFile beside the workspace succeeded")
	}
}

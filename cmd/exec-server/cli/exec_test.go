package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/cmd/exec-server/cli"
)

// mainOut runs one subcommand in-process and returns its exit code,
// stdout and stderr.
func mainOut(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := cli.Main(ctx, args[0], args[1:], strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// Environment defaults are never printed by -h: EXEC_SERVER_TOKEN is a
// secret, and a session id resumes a session.
func TestHelpHidesSecrets(t *testing.T) {
	t.Setenv("EXEC_SERVER_TOKEN", "s3cret-token-value")
	t.Setenv("EXEC_SERVER_SESSION", "s3cret-session-id")
	t.Setenv("EXEC_SERVER_URL", "ws://127.0.0.1:1")
	for _, sub := range []string{"exec", "ls", "cat", "cp", "ps"} {
		for _, h := range []string{"-h", "--help"} {
			code, out, errOut := mainOut(t, "", sub, h)
			if code != 0 {
				t.Errorf("%s %s: exit %d", sub, h, code)
			}
			// Asked-for help goes to stdout (exit 0), as git's and kubectl's.
			if !strings.Contains(out, "--token TOKEN") || errOut != "" {
				t.Errorf("%s %s printed no usage on stdout: %q (stderr %q)", sub, h, out, errOut)
			}
			if strings.Contains(out+errOut, "s3cret") {
				t.Errorf("%s %s printed a secret:\n%s", sub, h, errOut)
			}
		}
	}
}

// The spellings docker, kubectl and the earlier CLI use all reach the
// remote command the same way.
func TestExecFlagSpellings(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	envFile := filepath.Join(dir, "env")
	if err := os.WriteFile(envFile, []byte("# comment\nA=from-file\nB=file-b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LOCAL_ONLY", "local-value")
	show := []string{"sh", "-c", `echo "A=$A B=$B L=$LOCAL_ONLY pwd=$(pwd)"`}
	u := serverURL
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"short", append([]string{"--url", u, "-e", "A=1", "-w", dir, "--"}, show...), "A=1 B= L= pwd=" + dir},
		{"long", append([]string{"--url", u, "--env", "A=1", "--workdir", dir}, show...), "A=1 B= L= pwd=" + dir},
		{"long with =", append([]string{"--url=" + u, "--env=A=1", "--workdir=" + dir}, show...), "A=1 B= L= pwd=" + dir},
		{"attached short value", append([]string{"--url", u, "-eA=1", "-w" + dir}, show...), "A=1 B= L= pwd=" + dir},
		{"old spellings", append([]string{"-url", u, "-e", "A=1", "-cwd", dir, "--"}, show...), "A=1 B= L= pwd=" + dir},
		{"--cwd", append([]string{"--url", u, "--cwd", dir}, show...), "A= B= L= pwd=" + dir},
		{"env file, -e wins", append([]string{"--url", u, "--env-file", envFile, "-e", "B=flag", "-w", dir}, show...), "A=from-file B=flag L= pwd=" + dir},
		{"bare -e takes the local value", append([]string{"--url", u, "-e", "LOCAL_ONLY", "-e", "UNSET_HERE", "-w", dir}, show...), "A= B= L=local-value pwd=" + dir},
		{"flags end at the command", []string{"--url", u, "-w", dir, "printf", "%s|", "-e", "--url", "-w"}, "-e|--url|-w|"},
		{"-- ends flags", []string{"--url", u, "--", "printf", "%s|", "--", "-t"}, "--|-t|"},
		{"-it as one word", []string{"--url", u, "-it", "--detach-keys", "", "sh", "-c", "test -t 0 && echo tty"}, "tty"},
	}
	if _, ok := os.LookupEnv("A"); ok {
		t.Skip("A is set in this environment")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// --env-inherit none would drop PATH; the default inherits
			// the server's environment, where A and B are unset.
			code, out, errOut := mainOut(t, "", append([]string{"exec"}, tc.args...)...)
			if code != 0 || strings.TrimSpace(strings.ReplaceAll(out, "\r", "")) != tc.want {
				t.Errorf("exit %d, stdout %q (stderr %q); want %q", code, out, errOut, tc.want)
			}
		})
	}
}

func TestLsCombinedFlags(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	os.WriteFile(dir+"/.hidden", []byte("x"), 0o644)
	os.WriteFile(dir+"/shown", []byte("xy"), 0o644)
	for _, args := range [][]string{{"-la"}, {"-l", "-a"}, {"--long", "--all"}, {"-al"}} {
		code, out, errOut := mainOut(t, "", append(append([]string{"ls", "--url", serverURL}, args...), ":"+dir)...)
		// ls -l is the server's ls -l: mode, owner, size 2, name.
		if code != 0 || !strings.Contains(out, ".hidden") || !regexp.MustCompile(`(?m)^-rw-r--r-- .* 2 .* shown$`).MatchString(out) {
			t.Errorf("ls %v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
}

// Failed starts name what is at fault, with the shells' exit codes.
func TestExecStartErrors(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("not a program\n"), 0o644)
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing workdir", []string{"--cwd", dir + "/nonexistent", "pwd"}, 127, "--workdir " + dir + "/nonexistent: no such directory on the server"},
		{"workdir is a file", []string{"-w", file, "pwd"}, 127, "--workdir " + file + ": not a directory"},
		{"missing program", []string{"no-such-program-xyz"}, 127, "no-such-program-xyz: command not found on the server"},
		{"missing path", []string{dir + "/missing/prog"}, 127, dir + "/missing/prog: no such file on the server"},
		{"relative path to workdir", []string{"-w", dir, "./nope"}, 127, "./nope: no such file on the server"},
		{"directory", []string{dir}, 126, dir + ": is a directory"},
		{"not executable", []string{file}, 126, file + ": cannot be executed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := mainOut(t, "", append([]string{"exec", "--url", serverURL}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, tc.code, tc.want)
			}
		})
	}
}

// lineWaiter collects a stream and waits for a string in it.
type lineWaiter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lineWaiter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *lineWaiter) wait(t *testing.T, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(w.String(), want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%q never appeared in %q", want, w.String())
}

// Ctrl-\ (SIGQUIT) reaches the remote process and does not dump this
// program's goroutines. Run as a separate process: the signal goes to it.
func TestExecForwardsSIGQUIT(t *testing.T) {
	needServer(t)
	cmd := exec.Command(bin, "exec", "--url", serverURL, "--", "sh", "-c",
		`trap 'echo got-quit; exit 7' QUIT; echo ready; while :; do sleep 0.05; done`)
	var stdout, stderr lineWaiter
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	stdout.wait(t, "ready", 15*time.Second)
	if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if code != 7 || !strings.Contains(stdout.String(), "got-quit") {
		t.Errorf("exit %d (%v), stdout %q; want 7 and got-quit", code, err, stdout.String())
	}
	if strings.Contains(stderr.String(), "goroutine") {
		t.Errorf("SIGQUIT dumped stacks:\n%s", stderr.String())
	}
}

// startServerAt starts a server on addr ("127.0.0.1:0" for any port) and
// returns its URL and process.
func startServerAt(t *testing.T, addr string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(bin, "--listen", "ws://"+addr)
	cmd.Dir = t.TempDir()
	dieWithTest(cmd)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("server printed no URL: %v", err)
	}
	return strings.TrimSpace(line), cmd
}

// When the server goes away exec says it is reconnecting; when the
// server that answers no longer knows the session, exec stops at once
// with a message saying so (not after --reconnect-timeout); when nothing
// answers, it gives up after --reconnect-timeout.
func TestExecSessionLost(t *testing.T) {
	needServer(t)
	cases := []struct {
		name    string
		restart bool
		timeout string
		want    string
	}{
		{"server restarted", true, "5m", "session lost: the server no longer knows this session"},
		{"server gone", false, "2s", "connection lost"},
		// Without --reconnect-timeout, 5 s of refused connections end
		// exec (before: the whole 60 s window).
		{"server gone, default window", false, "", "refused connections for 5s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, srv := startServerAt(t, "127.0.0.1:0")
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			var stdout, stderr lineWaiter
			done := make(chan int, 1)
			go func() {
				args := []string{"--url", url, "--", "sh", "-c", "echo ready; sleep 60"}
				if tc.timeout != "" {
					args = append([]string{"--reconnect-timeout", tc.timeout}, args...)
				}
				done <- cli.Main(ctx, "exec", args, strings.NewReader(""), &stdout, &stderr)
			}()
			stdout.wait(t, "ready", 15*time.Second)
			srv.Process.Kill()
			srv.Wait()
			stderr.wait(t, "; reconnecting…", 30*time.Second)
			if tc.restart {
				// The same address, a new server: it has never heard
				// of the session.
				startServerAt(t, strings.TrimPrefix(url, "ws://"))
			}
			select {
			case code := <-done:
				if code != 255 || !strings.Contains(stderr.String(), tc.want) {
					t.Errorf("exit %d, stderr %q; want 255 and %q", code, stderr.String(), tc.want)
				}
			case <-ctx.Done():
				t.Fatalf("exec did not stop; stderr %q", stderr.String())
			}
		})
	}
}

// A reconnect that succeeds is announced too, and the output goes on.
func TestExecReconnectNotice(t *testing.T) {
	needServer(t)
	// A proxy between exec and the server, whose connections the test
	// cuts: the server keeps the session, the client resumes it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	target := strings.TrimPrefix(serverURL, "ws://")
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr lineWaiter
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, "exec", []string{"--url", "ws://" + ln.Addr().String(), "--", "sh", "-c", "echo one; read x < /dev/null; sleep 1; echo two"}, strings.NewReader(""), &stdout, &stderr)
	}()
	stdout.wait(t, "one", 15*time.Second)
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(stdout.String(), "two") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("exec did not end")
	}
	for _, want := range []string{"; reconnecting…", "reconnected"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q lacks %q", stderr.String(), want)
		}
	}
}

// A signal before the command started (here: a server that accepts the
// connection and never answers) ends exec at once, as 128+N, without a
// stack dump; nothing is left running remotely since nothing started.
func TestExecSignalBeforeStart(t *testing.T) {
	needServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			accepted <- struct{}{}
		}
	}()
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGQUIT, 131}, {syscall.SIGTERM, 143}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin, "exec", "--url", "ws://"+ln.Addr().String(), "--connect-timeout", "1m", "--", "true")
			var stderr lineWaiter
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			// exec handles its signals from before it dials.
			select {
			case <-accepted:
			case <-time.After(30 * time.Second):
				t.Fatal("exec never connected")
			}
			cmd.Process.Signal(tc.sig)
			cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(stderr.String(), "before the command started") || strings.Contains(stderr.String(), "goroutine") {
				t.Errorf("exit %d, stderr %q; want %d and one line", code, stderr.String(), tc.code)
			}
		})
	}
}

// SIGTERM and SIGHUP are forwarded and end exec (143, 129) even when the
// remote output stays open (a background job that ignores them); before,
// exec kept waiting.
func TestExecStopSignalsEndClient(t *testing.T) {
	needServer(t)
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGTERM, 143}, {syscall.SIGHUP, 129}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin, "exec", "--url", serverURL, "--", "sh", "-c", "trap '' TERM HUP; sleep 300 & echo ready")
			var stdout, stderr lineWaiter
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			stdout.wait(t, "ready", 15*time.Second)
			cmd.Process.Signal(tc.sig)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("exec did not end after %v; stderr %q", tc.sig, stderr.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, stderr.String())
			}
		})
	}
}

// exec --sandbox: read-only refuses a write and says the sandbox denied
// it; workspace-write allows it in the working directory; --writable adds
// a directory; flag misuse is a usage error.
// outsideWritableRoots makes a temporary directory for a sandbox test that
// no workspace-write policy leaves writable (its writable roots are the
// working directory, /tmp and the server's TMPDIR, the test's): the test's
// "outside" target must stay outside wherever the checkout is (a checkout
// under /tmp is writable). It tries the user's cache directory, /var/tmp
// and the package directory, in that order.
func outsideWritableRoots(t *testing.T) string {
	t.Helper()
	var roots []string
	for _, r := range []string{"/tmp", os.Getenv("TMPDIR")} {
		if r == "" {
			continue
		}
		if abs, err := filepath.EvalSymlinks(r); err == nil {
			r = abs
		}
		roots = append(roots, r)
	}
	under := func(dir string) bool {
		for _, r := range roots {
			if rel, err := filepath.Rel(r, dir); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return true
			}
		}
		return false
	}
	var candidates []string
	if cache, err := os.UserCacheDir(); err == nil {
		candidates = append(candidates, cache)
	}
	candidates = append(candidates, "/var/tmp", ".")
	for _, c := range candidates {
		c, err := filepath.Abs(c)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(c); err != nil || under(real) {
			continue
		}
		base, err := os.MkdirTemp(c, ".exec-server-sandbox-test-")
		if err != nil {
			continue
		}
		t.Cleanup(func() { os.RemoveAll(base) })
		return base
	}
	t.Skipf("no directory outside /tmp and TMPDIR to aim at among %q", candidates)
	return ""
}

func TestExecSandbox(t *testing.T) {
	needServer(t)
	base := outsideWritableRoots(t)
	work, extra := filepath.Join(base, "work"), filepath.Join(base, "extra")
	os.Mkdir(work, 0o755)
	os.Mkdir(extra, 0o755)
	code, _, errOut := mainOut(t, "", "exec", "--url", serverURL, "-w", work, "--sandbox", "read-only", "--", "touch", "x")
	if strings.Contains(errOut, "sandbox") && strings.Contains(errOut, "not available") || strings.Contains(errOut, "needs") {
		t.Skipf("no kernel sandbox here: %s", errOut)
	}
	if code == 0 || !strings.Contains(errOut, "the sandbox (read-only) denied") {
		t.Errorf("read-only: exit %d, stderr %q; want a failure and the denial named", code, errOut)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--sandbox", "workspace-write", "--", "touch", "x"}, 0},
		{[]string{"--sandbox", "workspace-write", "--", "touch", extra + "/y"}, 1},
		{[]string{"--sandbox", "workspace-write", "--writable", extra, "--", "touch", extra + "/y"}, 0},
		{[]string{"--sandbox", "bogus", "--", "true"}, 2},
		{[]string{"--writable", extra, "--", "true"}, 2},
		{[]string{"--sandbox", "read-only", "--writable", extra, "--", "true"}, 2},
	} {
		code, _, errOut := mainOut(t, "", append([]string{"exec", "--url", serverURL, "-w", work}, tc.args...)...)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d; stderr %q", tc.args, code, tc.code, errOut)
		}
	}
}

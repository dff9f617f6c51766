package client_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/internal/test/testbin"
)

// A server under test: this project's binary (built once per test run
// by internal/test/testbin) and, when EXEC_SERVER_REFERENCE names it, the
// reference binary.
type server struct {
	name string
	bin  string
	args []string // before the --listen flag
	env  func(t testing.TB) []string
}

// ours returns this project's server, built once per test run by
// internal/test/testbin, or reports why it cannot be built.
func ours() (string, error) { return testbin.ExecServer() }

// servers lists the servers a test runs against; it skips the test when
// there is none.
func servers(t *testing.T) []server { return benchServers(t) }

func benchServers(t testing.TB) []server {
	t.Helper()
	var list []server
	if bin, err := ours(); err == nil {
		list = append(list, server{name: "ours", bin: bin, env: func(testing.TB) []string { return os.Environ() }})
	} else {
		t.Logf("our server is not available: %v", err)
	}
	if ref := os.Getenv("EXEC_SERVER_REFERENCE"); ref != "" {
		list = append(list, server{name: "reference", bin: ref, args: []string{"exec-server"}, env: func(t testing.TB) []string {
			return append(os.Environ(), "CODEX_HOME="+t.TempDir())
		}})
	}
	if len(list) == 0 {
		t.Skip("no server to test against: our server does not build yet and EXEC_SERVER_REFERENCE is not set")
	}
	return list
}

// each runs f once per available server as a subtest.
func each(t *testing.T, f func(t *testing.T, s server)) {
	for _, s := range servers(t) {
		t.Run(s.name, func(t *testing.T) { f(t, s) })
	}
}

func (s server) command(t testing.TB, listen string, extra ...string) *exec.Cmd {
	args := append(append(append([]string{}, s.args...), "--listen", listen), extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Env = s.env(t)
	dieWithTest(cmd)
	cmd.Dir = t.TempDir()
	return cmd
}

// stdio connects to a fresh server over stdio.
func (s server) stdio(t testing.TB, opts client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.DialStdio(ctx, s.command(t, "stdio"), opts)
	if err != nil {
		t.Fatalf("DialStdio %s: %v", s.name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// listen starts a websocket server and returns its URL; it is stopped at
// the end of the test.
func (s server) listen(t testing.TB, extra ...string) string {
	t.Helper()
	return startListening(t, s.command(t, "ws://127.0.0.1:0", extra...))
}

// startListening starts a websocket server command and returns the URL it
// prints; the server is stopped at the end of the test.
func startListening(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%s printed no URL: %v", cmd.Path, err)
	}
	url := strings.TrimSpace(line)
	if !strings.HasPrefix(url, "ws://") {
		t.Fatalf("%s printed %q, want a ws:// URL", cmd.Path, url)
	}
	return url
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}

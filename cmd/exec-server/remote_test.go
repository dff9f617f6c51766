package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/relay"
)

func TestRemoteFlags(t *testing.T) {
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--remote", "http://127.0.0.1:1"}, 2, "requires --environment-id"},
		{[]string{"--environment-id", "E"}, 2, "requires --remote"},
		{[]string{"--remote", "http://127.0.0.1:1", "--environment-id", "E", "--listen", "ws://127.0.0.1:0"}, 2, "conflicts with --listen"},
		// No CODEX_API_KEY: nothing to authenticate with.
		{[]string{"--remote", "http://127.0.0.1:1", "--environment-id", "E"}, 1, "CODEX_API_KEY"},
	}
	t.Setenv("CODEX_API_KEY", "")
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, strings.NewReader(""), &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
	// A key, but a non-loopback http registry: refused before any request.
	t.Setenv("CODEX_API_KEY", "k")
	var errb bytes.Buffer
	if code := run([]string{"--remote", "http://registry.example.com", "--environment-id", "E"}, strings.NewReader(""), &bytes.Buffer{}, &errb); code != 1 || !strings.Contains(errb.String(), "https") {
		t.Errorf("http registry: exit %d, %q", code, errb.String())
	}
}

// The built binary in remote mode: it registers with an in-process relay,
// serves a DialRemote client through it, and stops on SIGTERM.
func TestRemoteBinary(t *testing.T) {
	rs, err := relay.New(relay.Options{ExecutorTokens: relay.NewTokens("exec-k"), HarnessTokens: relay.NewTokens("harness-k")})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rs)
	defer hs.Close()
	defer rs.Close()
	cmd := serverCommand("--remote", hs.URL+"/", "--environment-id", "bin-env", "--name", "n1")
	cmd.Dir = t.TempDir()
	cmd.Env = append(cmd.Environ(), "CODEX_API_KEY=exec-k")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("exec-server stderr:\n%s", stderr.String())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cl *client.Client
	for {
		// 409 environment_offline until the executor holds its socket.
		if cl, err = client.DialRemote(ctx, hs.URL, "bin-env", "harness-k", client.Options{}); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, code, err := cl.Output(ctx, client.Cmd{Argv: []string{"/bin/echo", "through the relay"}})
	cl.Close()
	if err != nil || code != 0 || string(out) != "through the relay\n" {
		t.Fatalf("Output: %q %d %v", out, code, err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/internal/test/codexref"
	"github.com/execgo/exec-server/remote/relay"
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
	t.Setenv("CODEX_HOME", t.TempDir()) // no auth.json to fall back on
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

// exec-server forward: each relay stream is bridged to a new websocket to
// a local exec-server (here the binary in --listen ws:// mode, or the
// reference's with EXEC_SERVER_REFERENCE), through an in-process relay.
func TestForwardBinary(t *testing.T) {
	rs, err := relay.New(relay.Options{ExecutorTokens: relay.NewTokens("exec-k"), HarnessTokens: relay.NewTokens("harness-k")})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rs)
	defer hs.Close()
	defer rs.Close()
	ours := startWS(t).url
	dests := map[string]string{"ours": ours}
	ref := os.Getenv("EXEC_SERVER_REFERENCE")
	if ref != "" {
		home := codexref.Scratch(t, "exec-server-remote-auth", "fwd-")
		rc := exec.Command(ref, "exec-server", "--listen", "ws://127.0.0.1:0")
		rc.Dir = home
		rc.Env = append(rc.Environ(), "CODEX_HOME="+home)
		out, err := rc.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rc.Process.Kill(); rc.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		dests["reference"] = strings.TrimSpace(line)
	}
	type leg struct{ who, dest, forwarder string }
	var legs []leg
	for who, dest := range dests {
		legs = append(legs, leg{"our forward to " + who, dest, ""})
	}
	if ref != "" {
		// The reference's forward with ours behind it: same relay wire.
		legs = append(legs, leg{"reference forward to ours", ours, ref})
	}
	for i, l := range legs {
		who, env := l.who, fmt.Sprintf("fwd-%d", i)
		args := []string{"forward", "--remote", hs.URL, "--environment-id", env, "--connect", l.dest}
		cmd := serverCommand(args...)
		if l.forwarder != "" {
			cmd = exec.Command(l.forwarder, append([]string{"exec-server"}, args...)...)
			cmd.Env = append(cmd.Environ(), "CODEX_HOME="+codexref.Scratch(t, "exec-server-remote-auth", "fwd-"))
		}
		cmd.Dir = t.TempDir()
		cmd.Env = append(cmd.Environ(), "CODEX_API_KEY=exec-k")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var cl *client.Client
		for {
			if cl, err = client.DialRemote(ctx, hs.URL, env, "harness-k", client.Options{}); err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			cancel()
			cmd.Process.Kill()
			t.Fatalf("%s: %v\nforward stderr:\n%s", who, err, stderr.String())
		}
		// A request over the relay's 60 KiB record (a 100 KiB argument;
		// one argument may not pass 128 KiB) and 3 MiB of output back.
		arg := strings.Repeat("y", 100<<10)
		big := strings.Repeat("x", 3<<20)
		out, code, err := cl.Output(ctx, client.Cmd{Argv: []string{"/bin/sh", "-c", "printf %s \"$1\" | wc -c; head -c 3145728 /dev/zero | tr '\\0' x", "sh", arg}})
		if want := "102400\n" + big; err != nil || code != 0 || string(out) != want {
			t.Errorf("%s: Output: %d bytes (want %d), exit %d, %v\nforward stderr:\n%s", who, len(out), len(want), code, err, stderr.String())
		}
		cl.Close()
		cancel()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: exit after SIGTERM: %v", who, err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("%s: no exit after SIGTERM", who)
		}
	}
}

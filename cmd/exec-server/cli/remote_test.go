package cli_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgo/exec-server/cmd/exec-server/cli"
	"github.com/execgo/exec-server/remote/relay"
)

const (
	remoteExecToken    = "executor-key"
	remoteHarnessToken = "harness-key"
)

// startRemote starts an in-process exec-relay and this project's
// exec-server binary registered with it (`--remote`), and returns the
// registry URL and environment id once the executor is attached.
func startRemote(t *testing.T) (base, env string) {
	t.Helper()
	needServer(t)
	var attached atomic.Int32
	rs, err := relay.New(relay.Options{
		ExecutorTokens: relay.NewTokens(remoteExecToken),
		HarnessTokens:  relay.NewTokens(remoteHarnessToken),
		OnEvent: func(ev relay.Event) {
			if ev.Kind == "attach" && ev.Role == "environment" {
				attached.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rs)
	t.Cleanup(func() {
		rs.Close()
		hs.Close()
	})
	env = "cli-env"
	cmd := exec.Command(bin, "--remote", hs.URL, "--environment-id", env)
	cmd.Env = append(os.Environ(), "CODEX_API_KEY="+remoteExecToken)
	cmd.Dir = t.TempDir()
	var logs bytes.Buffer
	cmd.Stderr = &logs
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for attached.Load() == 0 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("executor did not attach; its log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return hs.URL, env
}

// allBytes is every byte value, n bytes, with no line structure.
func allBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + i>>8)
	}
	return b
}

// exec and cp through exec-relay to the exec-server binary in remote mode;
// the token comes from --token or the variable codex's harness reads.
func TestRemoteExecAndCopy(t *testing.T) {
	base, env := startRemote(t)
	t.Setenv("EXEC_SERVER_URL", "")
	t.Setenv("EXEC_SERVER_TOKEN", "")
	t.Setenv("CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN", "")
	t.Setenv("CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID", "")
	dir := t.TempDir()
	data := allBytes(1<<20 + 7)
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--remote", base, "--environment-id", env, "--token", remoteHarnessToken}

	t.Run("exec stdout", func(t *testing.T) {
		code, out, errOut := mainOut(t, "", append(append([]string{"exec"}, conn...), "--", "/bin/cat", src)...)
		if code != 0 || out != string(data) {
			t.Fatalf("exit %d, %d bytes (want %d)\n%s", code, len(out), len(data), errOut)
		}
	})
	t.Run("exec stdin and exit code", func(t *testing.T) {
		in := string(allBytes(200_001))
		code, out, errOut := mainOut(t, in, append(append([]string{"exec", "-i"}, conn...), "--", "/bin/sh", "-c", "cat; exit 7")...)
		if code != 7 || out != in {
			t.Fatalf("exit %d, %d bytes (want 7, %d)\n%s", code, len(out), len(in), errOut)
		}
	})
	t.Run("cp up and down", func(t *testing.T) {
		up, back := filepath.Join(dir, "up"), filepath.Join(dir, "back")
		if code, _, errOut := mainOut(t, "", append(append([]string{"cp"}, conn...), src, ":"+up)...); code != 0 {
			t.Fatalf("cp up: exit %d\n%s", code, errOut)
		}
		if code, _, errOut := mainOut(t, "", append(append([]string{"cp"}, conn...), ":"+up, back)...); code != 0 {
			t.Fatalf("cp down: exit %d\n%s", code, errOut)
		}
		for _, f := range []string{up, back} {
			if got, err := os.ReadFile(f); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: %v, %d bytes (want %d)", f, err, len(got), len(data))
			}
		}
	})
	t.Run("token and environment from codex's variables", func(t *testing.T) {
		t.Setenv("CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN", remoteHarnessToken)
		t.Setenv("CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID", env)
		// EXEC_SERVER_TOKEN is a websocket credential: remote mode
		// must not send it to the registry in place of the right one.
		t.Setenv("EXEC_SERVER_TOKEN", "wrong")
		code, out, errOut := mainOut(t, "", "cat", "--remote", base, src)
		if code != 0 || out != string(data) {
			t.Fatalf("exit %d, %d bytes\n%s", code, len(out), errOut)
		}
	})
}

func TestRemoteErrors(t *testing.T) {
	t.Setenv("EXEC_SERVER_URL", "")
	t.Setenv("EXEC_SERVER_TOKEN", "")
	t.Setenv("CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN", "")
	t.Setenv("CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID", "")
	usage := []struct {
		args []string
		want string
	}{
		{[]string{"ls", "--remote", "http://127.0.0.1:1", "--token", "k", "/"}, "requires --environment-id"},
		{[]string{"ls", "--remote", "http://127.0.0.1:1", "--environment-id", "E", "/"}, "needs a registry token"},
		{[]string{"ls", "--remote", "http://127.0.0.1:1", "--environment-id", "E", "--token", "k", "--url", "ws://127.0.0.1:1", "/"}, "conflicts with --url"},
		{[]string{"ls", "--remote", "ws://127.0.0.1:1", "--environment-id", "E", "--token", "k", "/"}, "want http://"},
	}
	for _, u := range usage {
		code, _, errOut := mainOut(t, "", u.args...)
		if code != 2 || !strings.Contains(errOut, u.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", u.args, code, errOut, u.want)
		}
	}

	// -h names the variable, never its value.
	t.Setenv("CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN", "s3cret-remote-token")
	var stdout bytes.Buffer
	if code := cli.Main(context.Background(), "exec", []string{"-h"}, strings.NewReader(""), &stdout, &bytes.Buffer{}); code != 0 {
		t.Fatalf("exec -h: exit %d", code)
	}
	if h := stdout.String(); strings.Contains(h, "s3cret") || !strings.Contains(h, "--remote") || !strings.Contains(h, "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN") {
		t.Errorf("exec -h:\n%s", h)
	}

	// A token the registry refuses: one line, the remote exit code.
	base, env := startRemote(t)
	code, _, errOut := mainOut(t, "", "ls", "--remote", base, "--environment-id", env, "--token", "not-the-key", "--connect-timeout", "5s", "/")
	if code != 255 || strings.Count(errOut, "\n") != 1 || strings.Contains(errOut, "not-the-key") {
		t.Errorf("wrong token: exit %d, %q", code, errOut)
	}
}

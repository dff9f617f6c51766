package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
)

// dialWith connects with token, without reconnecting.
func dialWith(t *testing.T, url, token string) (*client.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return client.Dial(ctx, url, client.Options{Token: token, ReconnectTimeout: -1})
}

// SIGHUP reads the token files again: a rotated token is accepted at once,
// the old one refused, and a session opened before goes on (its process
// keeps running and answering); a bad new file (empty) keeps the old
// tokens and logs why. Two --ws-token-file are accepted at once.
func TestSIGHUPRotatesTokens(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "alpha"), filepath.Join(dir, "beta")
	os.WriteFile(a, []byte("token-one\n"), 0o600)
	os.WriteFile(b, []byte("token-b\n"), 0o600)
	s := startLogged(t, "--ws-auth", "capability-token", "--ws-token-file", a, "--ws-token-file", b)
	old, err := dialWith(t, s.url, "token-one")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if c, err := dialWith(t, s.url, "token-b"); err != nil {
		t.Fatalf("the second token file's token: %v", err)
	} else {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := old.Start(ctx, client.Cmd{Argv: []string{"cat"}, StdinPipe: true, InheritEnv: "core"})
	if err != nil {
		t.Fatal(err)
	}
	waitLog := func(re string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !regexp.MustCompile(re).MatchString(s.logs()) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line matching %s:\n%s", re, s.logs())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// The audit line names the caller by its token file.
	waitLog(`level=INFO msg=audit who=token:alpha method=process/start process=\S+ argv=\[cat\] .*code=0`)

	os.WriteFile(a, []byte("token-two\n"), 0o600)
	s.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(`reload: authentication files read again`)
	if _, err := dialWith(t, s.url, "token-one"); err == nil {
		t.Error("the old token is still accepted after the reload")
	}
	if c, err := dialWith(t, s.url, "token-two"); err != nil {
		t.Errorf("the new token: %v", err)
	} else {
		c.Close()
	}
	// The session opened with the old token goes on.
	if err := p.Write(ctx, []byte("still here\n")); err != nil {
		t.Errorf("write to the old session's process: %v", err)
	}

	os.WriteFile(a, nil, 0o600)
	s.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(`reload: keeping the previous authentication.*must not be empty`)
	if c, err := dialWith(t, s.url, "token-two"); err != nil {
		t.Errorf("after a bad reload, the previous token: %v", err)
	} else {
		c.Close()
	}
	p.CloseStdin(ctx)
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		t.Errorf("the old session's process: %d, %v", code, err)
	}
	var out bytes.Buffer
	out.ReadFrom(p.Stdout())
	if !strings.Contains(out.String(), "still here") {
		t.Errorf("output %q", out.String())
	}
}

// loggedServer is a websocket server whose stderr the test reads while it
// runs.
type loggedServer struct {
	cmd *exec.Cmd
	url string
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *loggedServer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *loggedServer) logs() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func startLogged(t *testing.T, args ...string) *loggedServer {
	t.Helper()
	l := &loggedServer{cmd: serverCommand(append([]string{"--listen", "ws://127.0.0.1:0"}, args...)...)}
	l.cmd.Dir = t.TempDir()
	l.cmd.Stderr = l
	out, err := l.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.cmd.Process.Kill(); l.cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL: %v\n%s", err, l.logs())
	}
	l.url = strings.TrimSpace(line)
	return l
}

// token mint makes a token the server accepts, and its subject is the
// identity a JWT caller is known by.
func TestTokenMint(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte(strings.Repeat("k", 40)+"\n"), 0o600)
	mint := serverCommand("token", "mint", "--secret-file", secret, "--sub", "ci-bot", "--ttl", "5m", "--aud", "exec")
	var stdout, stderr bytes.Buffer
	mint.Stdout, mint.Stderr = &stdout, &stderr
	if err := mint.Run(); err != nil {
		t.Fatalf("mint: %v %s", err, stderr.String())
	}
	s := startLogged(t, "--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", secret, "--ws-audience", "exec")
	c, err := dialWith(t, s.url, strings.TrimSpace(stdout.String()))
	if err != nil {
		t.Fatalf("the minted token was refused: %v", err)
	}
	// An fs mutation is audited with the JWT's subject, the path and the
	// outcome.
	f := filepath.Join(dir, "written")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.WriteFile(ctx, f, []byte("x"))
	c.Remove(ctx, filepath.Join(dir, "missing"))
	c.Close()
	for _, re := range []string{`msg=audit who=jwt:ci-bot method=fs/writeFile path=` + regexp.QuoteMeta(f) + ` code=0`,
		`msg=audit who=jwt:ci-bot method=fs/remove path=\S+missing code=-32004 err=`} {
		deadline := time.Now().Add(20 * time.Second)
		for !regexp.MustCompile(re).MatchString(s.logs()) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line matching %s:\n%s", re, s.logs())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, args := range [][]string{{"token", "mint", "--sub", "x"}, {"token", "mint", "--secret-file", secret}, {"token"}} {
		cmd := serverCommand(args...)
		if err := cmd.Run(); cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit 2", args, err)
		}
	}
}

// Package codexref is the test setup shared by the tests that run the
// reference codex binary (codex exec-server, codex exec): finding the
// binary, and scratch directories outside the temp dir for its CODEX_HOME
// and workspaces. The reference refuses to set up its sandbox helper when
// CODEX_HOME is under the temp dir, and workspace-write makes /tmp
// writable, so a workspace under /tmp could not show a refused write.
package codexref

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Bin is the reference binary (EXEC_SERVER_REFERENCE); t is skipped
// without it.
func Bin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("EXEC_SERVER_REFERENCE")
	if bin == "" {
		t.Skip("EXEC_SERVER_REFERENCE is not set: the reference codex binary is needed; " +
			"run with EXEC_SERVER_REFERENCE=$(bash scripts/reference.sh)")
	}
	return bin
}

// Base is the directory name under the user cache dir, made if missing
// and removed when t ends if empty then (another run may still use it).
// t is skipped when there is no such directory outside the temp dir.
func Base(t testing.TB, name string) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no user cache dir for a scratch dir outside the temp dir: %v", err)
	}
	dir := filepath.Join(cache, name)
	for _, tmp := range []string{os.TempDir(), "/tmp"} {
		if rel, err := filepath.Rel(tmp, dir); err == nil && !strings.HasPrefix(rel, "..") {
			t.Skipf("the user cache dir %s is under the temp dir %s; the reference needs a scratch dir outside it", dir, tmp)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	return dir
}

// Dir makes a fresh directory under base (os.MkdirTemp's pattern),
// removed with its contents when t ends.
func Dir(t testing.TB, base, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp(base, pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Scratch is Dir under Base(t, name).
func Scratch(t testing.TB, name, pattern string) string {
	t.Helper()
	return Dir(t, Base(t, name), pattern)
}

// Exec is `codex exec` in work (-C and the directory) on the model gpt-5.5
// of a mock Responses API at modelURL, with flags added, running the
// scripted tool calls. It prints --json events; cancelling ctx kills codex
// and everything it started. The caller sets Env, Stdout and Stderr.
func Exec(ctx context.Context, bin, work, modelURL string, flags ...string) *exec.Cmd {
	args := []string{"exec", "--skip-git-repo-check", "--ephemeral", "--json", "-C", work, "-m", "gpt-5.5",
		"-c", "model_provider=mock",
		// No plugin sync: it would reach for github.com.
		"-c", "features.plugins=false",
		"-c", fmt.Sprintf(`model_providers.mock={name="mock",base_url=%q,wire_api="responses",request_max_retries=0,stream_max_retries=0}`, modelURL),
	}
	args = append(args, flags...)
	args = append(args, "run the scripted tool calls")
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Tail is the last n bytes of s, marked when cut, for logging codex's
// output.
func Tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

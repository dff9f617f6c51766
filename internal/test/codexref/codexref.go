// Package codexref is the test setup shared by the tests that run the
// reference codex binary (codex exec-server, codex exec): finding the
// binary, and scratch directories outside the temp dir for its CODEX_HOME
// and workspaces. The reference refuses to set up its sandbox helper when
// CODEX_HOME is under the temp dir, and workspace-write makes /tmp
// writable, so a workspace under /tmp could not show a refused write.
package codexref

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

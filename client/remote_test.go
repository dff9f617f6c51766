package client_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/remote/harness"
	"github.com/execgo/exec-server/remote/relay"
)

func startRelay(t *testing.T, onEvent func(relay.Event)) string {
	t.Helper()
	srv, err := relay.New(relay.Options{InsecureNoAuth: true, OnEvent: onEvent})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv) // 127.0.0.1
	t.Cleanup(func() { hs.Close(); srv.Close() })
	return hs.URL
}

func TestDialRemoteOffline(t *testing.T) {
	base := startRelay(t, nil)
	_, err := client.DialRemote(context.Background(), base, "nobody-here", "t", client.Options{})
	var re *harness.RegistryError
	if !errors.As(err, &re) || !re.Retryable() || harness.IsAuth(err) {
		t.Fatalf("err = %v", err)
	}
}

// startReferenceExecutor runs codex 0.169's executor (`codex exec-server
// --remote`) against a relay.Server with opts and returns the relay's
// base URL once the executor's socket is attached.
func startReferenceExecutor(t *testing.T, env string, faults relay.Faults) string {
	t.Helper()
	bin := os.Getenv("EXEC_SERVER_REFERENCE")
	if bin == "" {
		t.Skip("EXEC_SERVER_REFERENCE is not set; run with EXEC_SERVER_REFERENCE=$(bash scripts/reference.sh)")
	}
	attached := make(chan struct{}, 1)
	opts := relay.Options{InsecureNoAuth: true}
	opts.OnEvent = func(e relay.Event) {
		if e.Kind == "attach" && e.Role == "environment" {
			select {
			case attached <- struct{}{}:
			default:
			}
		}
	}
	srv, err := relay.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.ForTest().SetFaults(faults)
	hs := httptest.NewServer(srv) // 127.0.0.1
	t.Cleanup(func() { hs.Close(); srv.Close() })
	// CODEX_HOME outside the temp dir, as the reference wants.
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skip(err)
	}
	scratch := filepath.Join(cache, "exec-server-remote-test")
	os.MkdirAll(scratch, 0o755)
	home, err := os.MkdirTemp(scratch, "ref-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home); os.Remove(scratch) })
	cmd := exec.Command(bin, "exec-server", "--remote", hs.URL, "--environment-id", env)
	cmd.Env = append(os.Environ(), "CODEX_HOME="+home, "CODEX_API_KEY=x", "RUST_LOG=warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	select {
	case <-attached:
	case <-time.After(30 * time.Second):
		t.Fatal("the reference executor did not attach")
	}
	return hs.URL
}

// session runs a command with 150 KB of output and a file round trip of
// size bytes, checking every byte.
func session(t *testing.T, c *client.Client, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	work := t.TempDir()
	out, code, err := c.Output(ctx, client.Cmd{
		Argv: []string{"sh", "-c", "echo hello-remote; head -c 150000 /dev/zero | tr '\\0' x"},
		Cwd:  work,
		Env:  map[string]string{"PATH": "/usr/bin:/bin"},
	})
	if err != nil || code != 0 {
		t.Fatalf("Output: code %d, %v", code, err)
	}
	if want := "hello-remote\n" + strings.Repeat("x", 150000); string(out) != want {
		t.Fatalf("stdout of %d bytes", len(out))
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7 >> 3)
	}
	path := filepath.Join(work, "f")
	if err := c.WriteFile(ctx, path, data); err != nil {
		t.Fatal(err)
	}
	back, err := c.ReadFile(ctx, path)
	if err != nil || !bytes.Equal(back, data) {
		t.Fatalf("ReadFile: %d bytes, %v", len(back), err)
	}
}

// TestDialRemoteReference drives codex 0.169's executor through
// exec-relay's server with the SDK.
func TestDialRemoteReference(t *testing.T) {
	base := startReferenceExecutor(t, "env-sdk", relay.Faults{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.DialRemote(ctx, base, "env-sdk", "harness-token", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	session(t, c, 300000)
}

// TestDialRemoteReferenceFaults is the same through a relay that
// duplicates and reorders data frames (within the 64-record, 1 MiB window)
// both ways: the reference executor's receiver and ours must each deliver
// every message once, in order.
func TestDialRemoteReferenceFaults(t *testing.T) {
	base := startReferenceExecutor(t, "env-faults", relay.Faults{
		Seed: 7, Duplicate: 0.2, Reorder: 0.2, ReorderDepth: 16,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.DialRemote(ctx, base, "env-faults", "harness-token", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	session(t, c, 2<<20)
}

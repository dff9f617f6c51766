package client_test

import (
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
	"github.com/execgo/exec-server/relay"
	"github.com/execgo/exec-server/remote/harness"
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

// TestDialRemoteReference drives codex 0.169's executor (`codex exec-server
// --remote`) through exec-relay's server with the SDK: a command with
// output both ways, a file written and read back.
func TestDialRemoteReference(t *testing.T) {
	bin := os.Getenv("EXEC_SERVER_REFERENCE")
	if bin == "" {
		t.Skip("EXEC_SERVER_REFERENCE is not set; run with EXEC_SERVER_REFERENCE=$(bash scripts/reference.sh)")
	}
	attached := make(chan struct{}, 1)
	base := startRelay(t, func(e relay.Event) {
		if e.Kind == "attach" && e.Role == "environment" {
			select {
			case attached <- struct{}{}:
			default:
			}
		}
	})
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
	cmd := exec.Command(bin, "exec-server", "--remote", base, "--environment-id", "env-sdk")
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

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.DialRemote(ctx, base, "env-sdk", "harness-token", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
	data := []byte(strings.Repeat("0123456789", 30000))
	path := filepath.Join(work, "f")
	if err := c.WriteFile(ctx, path, data); err != nil {
		t.Fatal(err)
	}
	back, err := c.ReadFile(ctx, path)
	if err != nil || string(back) != string(data) {
		t.Fatalf("ReadFile: %d bytes, %v", len(back), err)
	}
}

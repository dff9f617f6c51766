package server

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/execgo/exec-server/internal/peerproc"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A request whose peer is a descendant of the server in its own mount
// namespace (as a sandbox with the host network) is refused with 403 and a
// warn line; the same request from outside is served; AllowSandboxPeers
// turns the check off. The real sandbox is in
// internal/test/hostile/sandbox_server_test.go.
func TestSandboxPeerRefused(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare")
	}
	// As process/start counts a sandbox with the host's network.
	defer peerproc.Sandboxes.Begin()()
	for _, allow := range []bool{false, true} {
		var logs syncBuffer
		srv := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), AllowSandboxPeers: allow})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); srv.Serve(ctx, l) }()
		get := func(boxed bool) string {
			args := []string{curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://" + l.Addr().String() + "/readyz"}
			if boxed {
				flags := "-m"
				if os.Getuid() != 0 {
					flags = "-Urm"
				}
				args = append([]string{unshare, flags, "--"}, args...)
			}
			out, err := exec.Command(args[0], args[1:]...).Output()
			if err != nil && boxed {
				t.Skipf("unshare: %v", err)
			}
			return strings.TrimSpace(string(out))
		}
		if code := get(false); code != "200" {
			t.Errorf("allow=%v: outside: %s, want 200", allow, code)
		}
		want := "403"
		if allow {
			want = "200"
		}
		if code := get(true); code != want {
			t.Errorf("allow=%v: from a process in its own mount namespace: %s, want %s", allow, code, want)
		}
		if logged := strings.Contains(logs.String(), "request from inside a sandbox of this server refused"); logged == allow {
			t.Errorf("allow=%v: refusal logged=%v:\n%s", allow, logged, logs.String())
		}
		cancel()
		<-done
	}
}

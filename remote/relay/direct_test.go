package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/internal/test/codexref"
	"github.com/execgo/exec-server/internal/test/syncbuf"
	"github.com/execgo/exec-server/internal/test/testbin"
)

// TestDirectTransport: exec-relay serves codex's direct transport. An
// executor (this project's binary, and the reference's when
// EXEC_SERVER_REFERENCE is set) registers with SigV4 at direct/register,
// dials the relay's direct socket, and a harness with a harness token gets
// a plain JSON-RPC session to it at /direct/harness/{env}: twice in a row
// (the executor dials a new socket after each), a file read and written
// through it. A wrong AWS secret is refused at registration (the
// executor exits) and a wrong harness token at /direct/harness.
func TestDirectTransport(t *testing.T) {
	ours, err := testbin.ExecServer()
	if err != nil {
		t.Fatal(err)
	}
	type runner struct {
		name string
		args func(base, env string) []string
		bin  string
	}
	runners := []runner{{"ours", func(base, env string) []string {
		return []string{"--remote", base, "--environment-id", env, "--remote-transport", "direct", "--aws-sigv4", "--aws-region", "eu-central-1"}
	}, ours}}
	if os.Getenv("EXEC_SERVER_REFERENCE") != "" {
		ref := codexref.Bin(t)
		runners = append(runners, runner{"reference", func(base, env string) []string {
			return []string{"exec-server", "--remote", base, "--environment-id", env, "--remote-transport", "direct", "--aws-sigv4", "--aws-region", "eu-central-1"}
		}, ref})
	}
	var attached atomic.Int32
	rs, err := New(Options{
		ExecutorTokens: NewTokens("e-tok"),
		HarnessTokens:  NewTokens("h-tok"),
		DirectKeys: func(id string) (string, bool) {
			return "direct-secret", id == "AKIDRELAY"
		},
		OnEvent: func(ev Event) {
			if ev.Kind == "attach" && ev.Role == roleDirect {
				attached.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rs)
	t.Cleanup(func() { rs.Close(); hs.Close() })
	wsBase := "ws" + strings.TrimPrefix(hs.URL, "http")

	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) {
			work := codexref.Scratch(t, "exec-server-relay", "direct-")
			start := func(env, secret string) (*exec.Cmd, *syncbuf.Buffer, chan error) {
				cmd := exec.Command(r.bin, r.args(hs.URL, env)...)
				cmd.Dir = work
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work, "CODEX_HOME=" + work, "NO_PROXY=127.0.0.1",
					"AWS_EC2_METADATA_DISABLED=true", "AWS_ACCESS_KEY_ID=AKIDRELAY", "AWS_SECRET_ACCESS_KEY=" + secret,
					"AWS_CONFIG_FILE=" + filepath.Join(work, "none"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(work, "none")}
				errb := &syncbuf.Buffer{}
				cmd.Stderr = errb
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				return cmd, errb, done
			}

			// A wrong secret: refused at direct/register, the executor exits.
			_, errb, done := start("env-bad-"+r.name, "not-the-secret")
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("executor with a wrong AWS secret exited 0; stderr %s", errb.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("executor with a wrong AWS secret still running; stderr %s", errb.String())
			}

			env := "env-" + r.name
			before := attached.Load()
			cmd, errb, done := start(env, "direct-secret")
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-done
				if t.Failed() {
					t.Logf("executor stderr:\n%s", errb.String())
				}
			})
			deadline := time.Now().Add(60 * time.Second)
			for attached.Load() == before {
				if time.Now().After(deadline) {
					t.Fatalf("executor did not attach; stderr %s", errb.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if errb.String() != "" && strings.Contains(errb.String(), "direct-secret") {
				t.Errorf("the AWS secret is in the executor's log")
			}

			// A wrong harness token.
			resp, err := http.Get(hs.URL + "/direct/harness/" + env)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("harness without a token: HTTP %d, want 401", resp.StatusCode)
			}

			file := filepath.Join(work, "f.txt")
			for i, text := range []string{"first session", "second session"} {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				c, err := client.Dial(ctx, wsBase+"/direct/harness/"+env, client.Options{Token: "h-tok", ReconnectTimeout: -1})
				if err != nil {
					cancel()
					t.Fatalf("session %d: %v", i, err)
				}
				if err := c.WriteFile(ctx, file, []byte(text)); err != nil {
					t.Errorf("session %d: write: %v", i, err)
				}
				got, err := c.ReadFile(ctx, file)
				if err != nil || string(got) != text {
					t.Errorf("session %d: read %q, %v", i, got, err)
				}
				c.Close()
				cancel()
			}
		})
	}
}

func TestLoadDirectKeys(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keys")
	os.WriteFile(p, []byte("# executors\nAKID1 s1\n\nAKID2 s2\n"), 0o600)
	keys, err := LoadDirectKeys(p)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := keys("AKID2"); !ok || s != "s2" {
		t.Errorf("AKID2: %q %v", s, ok)
	}
	if _, ok := keys("AKID3"); ok {
		t.Error("unknown key found")
	}
	os.Chmod(p, 0o640)
	if _, err := LoadDirectKeys(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("group-readable file: %v", err)
	}
	os.WriteFile(p, []byte("AKID1\n"), 0o600)
	if _, err := LoadDirectKeys(p); err == nil {
		t.Error("a line without a secret was accepted")
	}
}

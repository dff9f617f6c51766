package hostile

// Issue #17 items 1 and 3: a sandbox cannot drive its own server, and the
// server never serves (nor keeps in its environment block) its own
// secrets.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// dialToken is dial with a bearer token ("" for none).
func dialToken(ctx context.Context, t *testing.T, url, token string) *client {
	t.Helper()
	var opts *websocket.DialOptions
	if token != "" {
		opts = &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}}
	}
	c, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	cl := newClient(c)
	go cl.readLoop()
	t.Cleanup(func() { cl.close() })
	return cl
}

// A sandboxed command with the network enabled and codex's full-disk read
// tries to drive the server that runs it through the exec-server client:
// with no authentication, with the capability token in hand, and with the
// server's token file. It must neither read the token file nor run
// anything: the token file is masked in the view, and the server refuses
// websocket and /metrics requests from inside its sandboxes (403).
func TestSandboxCannotDriveItsServer(t *testing.T) {
	for _, m := range sbxModes {
		for _, auth := range []string{"none", "capability-token", "signed-bearer-token"} {
			t.Run(m.name+"/"+auth, func(t *testing.T) {
				enterMode(t, m)
				fx := newFixture(t, m)
				keys := filepath.Join(fx.P, "keys")
				tokenFile := filepath.Join(keys, "token")
				if err := os.Mkdir(keys, 0o700); err != nil {
					t.Fatal(err)
				}
				// token is the file's content (a capability token, or the
				// JWT secret), bearer what a client presents.
				token := "tok-0123456789abcdef0123456789abcdef"
				if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				fx.own(t)
				var env []string
				bearer := ""
				switch auth {
				case "capability-token":
					env = []string{"EXEC_SERVER_WS_AUTH=" + auth, "EXEC_SERVER_WS_TOKEN_FILE=" + tokenFile}
					bearer = token
				case "signed-bearer-token":
					env = []string{"EXEC_SERVER_WS_AUTH=" + auth, "EXEC_SERVER_WS_SHARED_SECRET_FILE=" + tokenFile}
					bearer = signHS256(token, time.Now().Add(time.Hour))
				}
				s := startSandboxServer(t, m, env...)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				cl := dialToken(ctx, t, s.url, bearer)
				cl.handshake(ctx, t)
				c := &sbxClient{client: cl, fx: fx, srv: s}
				sbx := procContext(fx.WORK, workspaceWriteEntries())
				sbx["permissions"].(map[string]any)["network"] = "enabled"

				pwned := fx.o("pwned")
				attempts := map[string]string{
					"no token":    "",
					"token":       "--token " + bearer,
					"token file":  "--token-file " + tokenFile,
					"environment": "", // EXEC_SERVER_TOKEN below
				}
				for name, flags := range attempts {
					envPrefix := ""
					if name == "environment" {
						envPrefix = "EXEC_SERVER_TOKEN=" + bearer + " "
					}
					script := fmt.Sprintf(`cat %s; echo "read=$?"; %s%s exec --url %s %s -- sh -c 'echo pwned > %s'; echo "exec=$?"`,
						tokenFile, envPrefix, sbxServer, s.url, flags, pwned)
					r := c.run([]string{"sh", "-c", script}, sbx)
					if r.StartErr != nil || r.TimedOut {
						t.Fatalf("%s: %v", name, r)
					}
					// With no authentication the file is not the server's:
					// only the connection must be refused.
					if auth != "none" && strings.Contains(r.Output, token) {
						t.Errorf("HOLE (%s): the sandbox read the server's token file: %v", name, r)
					}
					if exists(pwned) {
						t.Fatalf("HOLE (%s): a sandboxed command drove its own server: %s exists; %v", name, pwned, r)
					}
					if !strings.Contains(r.Output, "exec=") || strings.Contains(r.Output, "exec=0") {
						t.Errorf("%s: the client did not fail: %v", name, r)
					}
					t.Logf("%s: %s", name, strings.ReplaceAll(strings.TrimSpace(r.Output), "\n", " | "))
				}
				// /metrics and /readyz too, when curl is there.
				for _, path := range []string{"/metrics", "/readyz"} {
					script := fmt.Sprintf(`command -v curl >/dev/null || { echo skip; exit 0; }; curl -s -o /dev/null -w 'code=%%{http_code}' -H 'Authorization: Bearer %s' http://%s%s`, bearer, s.addr, path)
					r := c.run([]string{"sh", "-c", script}, sbx)
					if strings.Contains(r.Output, "skip") {
						continue
					}
					if !strings.Contains(r.Output, "code=403") {
						t.Errorf("HOLE: GET %s from inside a sandbox: %v, want 403", path, r)
					}
				}
				if !strings.Contains(s.stderr.String(), "request from inside a sandbox of this server refused") {
					t.Errorf("no refusal logged:\n%s", s.stderr.String())
				}
				// The server still serves its own client after all this.
				if _, err := c.readFile(fx.w("in.txt")); err != nil {
					t.Fatalf("the server stopped serving its client: %v", err)
				}
			})
		}
	}
}

// signHS256 makes a JWT the signed-bearer-token mode accepts.
func signHS256(secret string, exp time.Time) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body := enc.EncodeToString([]byte(fmt.Sprintf(`{"exp":%d}`, exp.Unix())))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(head + "." + body))
	return head + "." + body + "." + enc.EncodeToString(mac.Sum(nil))
}

// The server's environment block holds no credential once it runs, and
// fs methods with no sandbox refuse the server's own /proc entries, also
// through a symlink a sandbox could plant.
func TestServerKeepsNoSecrets(t *testing.T) {
	const marker = "sk-hostile-marker-9876543210"
	s := startServer(t, []string{"CODEX_API_KEY=" + marker, "OPENAI_API_KEY=" + marker, "SOME_SERVICE_TOKEN=" + marker})
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.pid()))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(environ, []byte(marker)) {
		t.Fatalf("/proc/%d/environ still shows a credential", s.pid())
	}
	if !bytes.Contains(environ, []byte("PATH=")) {
		t.Fatalf("/proc/%d/environ lost the other variables: %q", s.pid(), environ)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := dial(ctx, t, s.url)
	cl.handshake(ctx, t)
	dir := t.TempDir()
	if err := os.Symlink("/proc/self/environ", filepath.Join(dir, "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/proc/self/environ", fmt.Sprintf("/proc/%d/environ", s.pid()), "/proc/thread-self/environ", "/proc/self/mem", filepath.Join(dir, "AGENTS.md")} {
		var res struct {
			DataBase64 string `json:"dataBase64"`
		}
		err := cl.call(ctx, "fs/readFile", map[string]any{"path": fileURI(p)}, &res)
		if err == nil {
			t.Errorf("HOLE: fs/readFile %s with no sandbox served the server's own /proc entry", p)
		} else if rpcCode(err) != -32600 || !strings.Contains(err.Error(), "Permission denied") {
			t.Errorf("fs/readFile %s: %v, want -32600 Permission denied", p, err)
		}
	}
	// A process the client starts still gets the variables it asks for,
	// and an inherited environment still carries the server's.
	out := runOutput(ctx, t, cl, []string{"sh", "-c", "echo $CODEX_API_KEY"}, map[string]any{"inherit": "all", "ignoreDefaultExcludes": true})
	if !strings.Contains(out, marker) {
		t.Errorf("an inherited environment lost CODEX_API_KEY: %q", out)
	}
}

// runOutput runs argv unsandboxed with the environment policy pol and
// returns its output.
func runOutput(ctx context.Context, t *testing.T, cl *client, argv []string, pol map[string]any) string {
	t.Helper()
	id := fmt.Sprintf("env-%d", time.Now().UnixNano())
	if err := cl.call(ctx, "process/start", map[string]any{"processId": id, "argv": argv, "cwd": fileURI("/"), "tty": false, "pipeStdin": false,
		"env": map[string]string{"PATH": "/usr/bin:/bin"}, "envPolicy": pol}, nil); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	after := uint64(0)
	for {
		var res struct {
			Chunks []struct {
				Chunk []byte `json:"chunk"`
			} `json:"chunks"`
			NextSeq uint64 `json:"nextSeq"`
			Closed  bool   `json:"closed"`
		}
		if err := cl.call(ctx, "process/read", map[string]any{"processId": id, "afterSeq": after, "waitMs": 1000}, &res); err != nil {
			t.Fatal(err)
		}
		for _, ch := range res.Chunks {
			out.Write(ch.Chunk)
		}
		if res.NextSeq > 0 {
			after = res.NextSeq - 1
		}
		if res.Closed {
			return out.String()
		}
	}
}

package cli_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// connectRecorder is a registry whose /connect records the bearer and
// ChatGPT-Account-ID and answers 401 (not retried: the CLI fails after
// that one request).
type connectRecorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	auth []string
}

func newConnectRecorder(t *testing.T) *connectRecorder {
	r := &connectRecorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.auth = append(r.auth, req.Method+" "+req.URL.Path+" "+req.Header.Get("Authorization")+" acct="+req.Header.Get("ChatGPT-Account-ID"))
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":{"code":"unauthorized","message":"recorded"}}`)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *connectRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.auth
	r.auth = nil
	return out
}

func cliJWT(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	c, _ := json.Marshal(map[string]any{"exp": exp.Unix()})
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(c) + "." + enc([]byte("sig"))
}

// The CLI's --remote takes its registry token from the sources a codex
// harness has (--token-stdin, CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN,
// CODEX_API_KEY, a `codex login` sign-in: API key or ChatGPT token with
// its account), sends it only as the /connect bearer, and never prints it.
func TestRemoteCredentialSources(t *testing.T) {
	reg := newConnectRecorder(t)
	fresh := cliJWT(time.Now().Add(time.Hour))
	expired := cliJWT(time.Now().Add(-time.Hour))
	signIn := func(tok string) string {
		b, _ := json.Marshal(map[string]any{"OPENAI_API_KEY": nil, "tokens": map[string]any{"access_token": tok, "account_id": "acct-file", "id_token": tok, "refresh_token": "r-secret"}, "last_refresh": "2026-01-01T00:00:00Z"})
		return string(b)
	}
	path := "POST /cloud/environment/E/connect "
	cases := []struct {
		name     string
		args     []string
		env      map[string]string
		stdin    string
		authJSON string
		code     int
		want     string // the one /connect's auth, "" when none is sent
		msg      string
		secret   string // must appear in no output
	}{
		{name: "token from stdin", args: []string{"--token-stdin"}, stdin: "tok-stdin-1\nrest\n", code: 255, want: path + "Bearer tok-stdin-1 acct=", secret: "tok-stdin-1"},
		{name: "stdin beats the variables", args: []string{"--token-stdin"}, env: map[string]string{"CODEX_API_KEY": "k-api-1"}, stdin: "tok-stdin-2\r\n", code: 255, want: path + "Bearer tok-stdin-2 acct=", secret: "tok-stdin-2"},
		{name: "harness variable and account", env: map[string]string{"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN": "tok-noise-1", "CODEX_EXEC_SERVER_NOISE_CHATGPT_ACCOUNT_ID": "acct-env", "CODEX_API_KEY": "k-api-2"}, code: 255, want: path + "Bearer tok-noise-1 acct=acct-env", secret: "tok-noise-1"},
		{name: "api key", env: map[string]string{"CODEX_API_KEY": "k-api-3"}, code: 255, want: path + "Bearer k-api-3 acct=", secret: "k-api-3"},
		{name: "auth.json api key", authJSON: `{"OPENAI_API_KEY":"sk-file-1"}`, code: 255, want: path + "Bearer sk-file-1 acct=", secret: "sk-file-1"},
		{name: "auth.json sign-in", authJSON: signIn(fresh), code: 255, want: path + "Bearer " + fresh + " acct=acct-file", secret: fresh},
		{name: "auth.json expired sign-in", authJSON: signIn(expired), code: 255, msg: "run `codex login`", secret: expired},
		{name: "nothing", code: 2, msg: "needs a registry token"},
		{name: "stdin without a newline", args: []string{"--token-stdin"}, stdin: "tok-stdin-3", code: 2, msg: "newline-terminated", secret: "tok-stdin-3"},
		{name: "stdin and --token", args: []string{"--token-stdin", "--token", "tok-flag-1"}, stdin: "x\n", code: 2, msg: "conflicts", secret: "tok-flag-1"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			home := t.TempDir()
			for _, k := range []string{"EXEC_SERVER_URL", "EXEC_SERVER_TOKEN", "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN", "CODEX_EXEC_SERVER_NOISE_CHATGPT_ACCOUNT_ID", "CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID", "CODEX_API_KEY"} {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			t.Setenv("CODEX_HOME", home)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			if c.authJSON != "" {
				if err := os.WriteFile(filepath.Join(home, "auth.json"), []byte(c.authJSON), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			args := append([]string{"ls", "--remote", reg.srv.URL, "--environment-id", "E", "--connect-timeout", "10s"}, c.args...)
			code, out, errOut := mainOut(t, c.stdin, append(args, "/")...)
			got := reg.take()
			if code != c.code || (c.msg != "" && !strings.Contains(errOut, c.msg)) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, c.code, c.msg)
			}
			switch {
			case c.want == "" && len(got) != 0:
				t.Errorf("a refused credential reached the registry: %q", got)
			case c.want != "" && (len(got) == 0 || got[0] != c.want):
				t.Errorf("requests %q, want first %q", got, c.want)
			}
			for _, s := range []string{c.secret, "r-secret"} {
				if s != "" && strings.Contains(out+errOut, s) {
					t.Errorf("the token %q is in the output: stdout %q stderr %q", s, out, errOut)
				}
			}
			if t.Failed() {
				fmt.Println(errOut)
			}
		})
	}
}

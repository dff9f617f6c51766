package interop

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDiscoveryParity sends the same environmentConfig/read,
// capabilities/discoverV2 and http/request calls to the reference and to
// ours, both with one CODEX_HOME (outside the temp dir), and requires the
// same answers byte for byte: results, error codes and texts. The config
// has MCP servers in the command and url forms, a trusted git project with
// .codex layers at two levels, and TOML the re-serialization must get
// right; the HTTP calls go to one local server whose answers do not vary
// (no Date header).
func TestDiscoveryParity(t *testing.T) {
	if os.Getenv("EXEC_SERVER_REFERENCE") == "" || len(targets) < 2 {
		t.Skip("EXEC_SERVER_REFERENCE is not set: nothing to compare with")
	}
	base := scratchBase(t)
	root := mkScratch(t, base, "discovery-")
	home := filepath.Join(root, "home")
	repo := filepath.Join(root, "repo")
	sub := filepath.Join(repo, "sub")
	bare := filepath.Join(root, "bare") // a .git directory without HEAD
	files := map[string]string{
		filepath.Join(home, "config.toml"): `model = "gpt-5.5"
zeta = 1
alpha.beta = "dotted"
[mcp_servers.docs]
url = "http://127.0.0.1:9/mcp"
http_headers = { "X-Team" = "a", b = "two" }
[mcp_servers.local]
command = "/bin/true"
args = ["a", "it's", 'lit\x', "q\"uote", "multi\nline", "tab\there", "uni é"]
startup_timeout_sec = 10.5
enabled = true
[mcp_servers.local.env]
Z = "1"
A = "2"
[[mcp_servers.local.tools]]
name = "t1"
[[mcp_servers.local.tools]]
name = "t2"
when = 1979-05-27T07:32:00.5-07:00
[projects."` + repo + `"]
trust_level = "trusted"
[projects."` + bare + `"]
trust_level = "trusted"
`,
		filepath.Join(bare, ".git", "keep"):                       "",
		filepath.Join(bare, "sub", ".codex", "config.toml"):       "[mcp_servers.bare]\ncommand = \"b\"\n",
		filepath.Join(home, "skills", "deploy", "SKILL.md"):       "---\nname: deploy\ndescription: Deploys\n  the app.\nmetadata:\n  short-description: ship it\n---\n",
		filepath.Join(home, "skills", ".system", "x", "SKILL.md"): "---\nname: sys\ndescription: 'A system skill'\n---\n",
		filepath.Join(home, "skills", "n", "SKILL.md"):            "---\ndescription: |\n  no\n  name\n---\n",
		filepath.Join(repo, ".git"):                               "gitdir: /nonexistent\n",
		filepath.Join(repo, ".codex", "config.toml"):              "model = \"r\"\nnotify = [\"x\"]\n[mcp_servers.repo]\nurl = \"http://127.0.0.1:9/repo\"\n",
		filepath.Join(sub, ".codex", "config.toml"):               "[mcp_servers.sub]\ncommand = \"s\"\n",
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Date"] = nil
		switch r.URL.Path {
		case "/redir":
			http.Redirect(w, r, "/plain", http.StatusFound)
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			for _, part := range []string{"data: one\n\n", "data: two\n\n"} {
				fmt.Fprint(w, part)
				w.(http.Flusher).Flush()
			}
		default:
			w.Header().Set("Content-Type", "text/plain")
			w.Header()["X-Multi"] = []string{"a", "b"}
			if r.URL.Path == "/auth" {
				w.Header().Set("X-Seen-Authorization", r.Header.Get("Authorization"))
			}
			if r.URL.Path == "/404" {
				w.WriteHeader(http.StatusNotFound)
			}
			fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
		}
	}))
	defer web.Close()

	uri := func(p string) string { return FileURI(p) }
	read := func(cwd string, paths ...[]string) map[string]any {
		return map[string]any{"cwd": uri(cwd), "configPaths": paths, "requirementsPaths": [][]string{{"mcp_servers"}}}
	}
	get := func(id, path string, extra ...any) map[string]any {
		m := map[string]any{"requestId": id, "method": "GET", "url": web.URL + path}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		return m
	}
	calls := []struct {
		method string
		params any
	}{
		{"environmentConfig/read", read(root, []string{"mcp_servers"})},
		{"environmentConfig/read", read(sub, []string{"mcp_servers"})},
		{"environmentConfig/read", read(repo, []string{"mcp_servers", "local"}, []string{"model"}, []string{"alpha"}, []string{"zeta"})},
		{"environmentConfig/read", read(filepath.Join(bare, "sub"), []string{"mcp_servers"})},
		{"environmentConfig/read", read(root, []string{"mcp_servers", "nothere"})},
		{"environmentConfig/read", read(root, []string{"model", "x"})},
		{"environmentConfig/read", read(root, []string{"nothere"})},
		{"environmentConfig/read", read(filepath.Join(root, "missing"), []string{"mcp_servers"})},
		{"environmentConfig/read", map[string]any{"cwd": uri(root), "configPaths": [][]string{}, "requirementsPaths": [][]string{}}},
		{"environmentConfig/read", map[string]any{"cwd": uri(root), "configPaths": [][]string{{}}, "requirementsPaths": [][]string{}}},
		{"environmentConfig/read", map[string]any{"cwd": root, "configPaths": [][]string{{"a"}}, "requirementsPaths": [][]string{}}},
		{"environmentConfig/read", map[string]any{"configPaths": [][]string{{"a"}}, "requirementsPaths": [][]string{}}},
		{"environmentConfig/read", nil},
		{"capabilities/discoverV2", map[string]any{"cwd": uri(root)}},
		{"capabilities/discoverV2", map[string]any{"cwd": uri(root), "sandbox": nil}},
		{"capabilities/discoverV2", map[string]any{}},
		{"capabilities/discoverV2", map[string]any{"cwd": "relative"}},
		{"http/request", get("h1", "/plain")},
		{"http/request", get("h2", "/404")},
		{"http/request", get("h3", "/redir")},
		{"http/request", get("h4", "/redir", "redirectPolicy", "stop")},
		{"http/request", map[string]any{"requestId": "h5", "method": "POST", "url": web.URL + "/post", "bodyBase64": base64.StdEncoding.EncodeToString([]byte("hi")),
			"headers": []map[string]string{{"name": "X-B", "value": "1"}, {"name": "x-a", "value": "2"}}}},
		{"http/request", get("h6", "/plain", "method", "HEAD")},
		{"http/request", get("h7", "/plain", "url", "ftp://127.0.0.1/x")},
		{"http/request", get("h8", "/plain", "url", "not a url")},
		{"http/request", get("h9", "/plain", "method", "BAD METHOD")},
		{"http/request", get("h10", "/plain", "headers", []map[string]string{{"name": "bad name", "value": "x"}})},
		{"http/request", get("h11", "/plain", "bodyBase64", "!!")},
		{"http/request", get("h12", "/plain", "url", "http://"+closedAddr(t)+"/")},
		{"http/request", get("h13", "/auth", "headers", []map[string]any{{"name": "authorization", "value": "Bearer ", "valueEnvVar": "PARITY_TEST_TOKEN"}})},
		{"http/request", get("h14", "/plain", "headers", []map[string]any{{"name": "authorization", "value": "Bearer ", "valueEnvVar": "PARITY_TEST_MISSING"}})},
		{"http/request", get("h15", "/plain", "headers", []map[string]any{{"name": "x-k", "value": "v", "valueEnvVar": "PARITY_TEST_EMPTY"}})},
		{"http/request", get("h16", "/plain", "headers", []map[string]any{{"name": "x-k", "valueEnvVar": "PARITY_TEST_TOKEN"}})},
		{"http/request", map[string]any{"method": "GET", "url": web.URL}},
		{"http/request", nil},
	}

	// Both servers inherit these (httpHeaderEnvVars).
	t.Setenv("PARITY_TEST_TOKEN", "tok")
	t.Setenv("PARITY_TEST_EMPTY", "")
	answers := map[string][]string{}
	streams := map[string]string{}
	for _, tg := range targets {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		args := []string{"CODEX_HOME=" + home, tg.bin}
		if tg.ref {
			args = []string{"CODEX_HOME=" + home, "RUST_LOG=error", tg.bin, "exec-server"}
		}
		srv, err := StartServer(ctx, Spec{Name: tg.name, Bin: "/usr/bin/env", Args: args}, Stdio)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		c, err := srv.Dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Initialize(ctx); err != nil {
			t.Fatal(err)
		}
		for _, call := range calls {
			m, err := c.CallMsg(ctx, call.method, call.params)
			if err != nil {
				t.Fatalf("%s: %s %v: %v", tg.name, call.method, call.params, err)
			}
			a := string(m.Result)
			if m.Error != nil {
				a = fmt.Sprintf("error %d %s", m.Error.Code, m.Error.Message)
			}
			answers[tg.name] = append(answers[tg.name], a)
		}
		// A streamed body: the result, then the deltas' bytes and the last
		// delta.
		m, err := c.CallMsg(ctx, "http/request", get("s1", "/stream", "streamResponse", true))
		if err != nil || m.Error != nil {
			t.Fatalf("%s: streamed http/request: %v %v", tg.name, err, m)
		}
		var data bytes.Buffer
		var last string
		for {
			n, err := c.NextOther(ctx)
			if err != nil {
				t.Fatalf("%s: waiting for bodyDelta: %v", tg.name, err)
			}
			var d struct {
				Delta []byte `json:"deltaBase64"`
				Done  bool   `json:"done"`
			}
			if n.Method != "http/request/bodyDelta" || json.Unmarshal(n.Params, &d) != nil {
				t.Fatalf("%s: unexpected %s", tg.name, n.Raw)
			}
			data.Write(d.Delta)
			if d.Done {
				// Where the body is cut into deltas is the network's
				// timing (two chunks flushed back to back arrive in one
				// read or two), so the last delta's seq is not compared.
				var p map[string]any
				_ = json.Unmarshal(n.Params, &p)
				delete(p, "seq")
				b, _ := json.Marshal(p)
				last = string(b)
				break
			}
		}
		streams[tg.name] = string(m.Result) + "\n" + data.String() + "\n" + last
		srv.Close()
		cancel()
	}
	ref, ours := answers["reference"], answers["ours"]
	for i, call := range calls {
		if ref[i] != ours[i] {
			t.Errorf("%s %v:\nreference %s\nours      %s", call.method, call.params, ref[i], ours[i])
		}
	}
	if streams["reference"] != streams["ours"] {
		t.Errorf("streamed http/request:\nreference %s\nours      %s", streams["reference"], streams["ours"])
	}
	if t.Failed() {
		return
	}
	// Not vacuous: the answers hold layers, skills and bodies.
	for _, want := range []int{1, 13, 17} {
		if len(ours[want]) < 100 {
			t.Errorf("answer %d is suspiciously short: %s", want, ours[want])
		}
	}
}

// closedAddr is a 127.0.0.1 address nothing listens on (one just closed).
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

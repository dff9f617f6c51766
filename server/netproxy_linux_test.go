package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/test/asnobody"
	"github.com/execgo/exec-server/sandbox"
)

// helloServer serves "hello" on 127.0.0.1 and returns its port.
func helloServer(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func needProxyTools(t *testing.T) {
	t.Helper()
	if s := sandbox.Probe(); !s.Available {
		t.Skipf("sandbox not available: %s", s.Missing)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
}

// output collects a process's stdout and stderr until it closes.
func output(p *peer, id string) (string, int) {
	t := p.t
	t.Helper()
	var out strings.Builder
	code := -1
	for _, w := range p.events(id) {
		var ev struct {
			Chunk    string `json:"chunk"`
			ExitCode int    `json:"exitCode"`
		}
		mustUnmarshal(t, w.Params, &ev)
		switch w.Method {
		case "process/output":
			b, _ := base64.StdEncoding.DecodeString(ev.Chunk)
			out.Write(b)
		case "process/exited":
			code = ev.ExitCode
		}
	}
	return out.String(), code
}

// TestManagedNetworkProxy runs a sandboxed command with a managed proxy
// that allows localhost only: through the HTTP proxy and SOCKS5, localhost
// answers; 127.0.0.1 (local, not explicitly allowed) and a name not on the
// list get the 403; a direct connection cannot be made at all; every
// refusal is a network/policyDecision.
func TestManagedNetworkProxy(t *testing.T) {
	needProxyTools(t)
	port := helloServer(t)
	dir := t.TempDir()
	p := stdioPeer(t, New(Config{}))
	p.init()
	script := fmt.Sprintf(`
echo "env=$HTTP_PROXY|$ALL_PROXY|$NO_PROXY|$CODEX_NETWORK_PROXY_ACTIVE"
echo "allowed=$(curl -s http://localhost:%[1]d/)"
echo "socks=$(curl -s --proxy "$ALL_PROXY" http://localhost:%[1]d/)"
echo "connect=$(curl -s -p http://localhost:%[1]d/)"
echo "local=$(curl -s -w ' %%{http_code}' http://127.0.0.1:%[1]d/)"
echo "miss=$(curl -s -w ' %%{http_code}' http://denied.example/)"
curl -s --noproxy '*' --max-time 5 http://127.0.0.1:%[1]d/; echo "direct=$?"
`, port)
	sp := startParams(t, "np", false, "/bin/sh", "-c", script)
	sp["cwd"] = "file://" + dir
	sp["sandbox"] = proxySandbox(dir)
	sp["enforceManagedNetwork"] = true
	sp["networkProxy"] = proxyLaunch(`{"localhost":"allow"}`, "")
	p.call("process/start", sp)
	out, code := output(p, "np")
	t.Logf("output:\n%s", out)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"env=http://127.0.0.1:", "|socks5h://127.0.0.1:", "||1\n",
		"allowed=hello\n", "socks=hello\n", "connect=hello\n",
		`local={"status":"blocked","host":"127.0.0.1","reason":"not_allowed_local","decision":"deny","source":"baseline_policy","protocol":"http","port":` + fmt.Sprint(port) + `,"message":"Sandbox policy blocks local/private network addresses."} 403`,
		`"reason":"not_allowed"`, "Domain not in allowlist.\"} 403\n",
		"direct=7\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	var hosts []string
	for range 2 {
		w := p.wait("policyDecision", func(w wire) bool {
			return w.Method == "network/policyDecision" && !strings.Contains(string(w.Params), `"decision":"allow"`)
		})
		var d struct {
			ProcessID, Decision, Source, Reason, Protocol, Host, Method string
		}
		mustUnmarshal(t, w.Params, &d)
		if d.ProcessID != "np" || d.Decision != "deny" || d.Source != "baseline_policy" || d.Protocol != "http" || d.Method != "GET" {
			t.Errorf("decision %s", w.Params)
		}
		hosts = append(hosts, d.Host+":"+d.Reason)
	}
	if strings.Join(hosts, ",") != "127.0.0.1:not_allowed_local,denied.example:not_allowed" {
		t.Errorf("decisions %v", hosts)
	}
	_ = json.Valid
}

// TestNetworkPolicyRequest: with policyDecisionTimeoutMs, a host not on
// the allowlist is put to the client (network/policyRequest, ids counting
// from 1); allow lets it through, deny and ask give the 403 with the
// client's reason and a decider-sourced policyDecision, an invalid answer
// and no answer are denials.
func TestNetworkPolicyRequest(t *testing.T) {
	needProxyTools(t)
	port := helloServer(t)
	dir := t.TempDir()
	p := stdioPeer(t, New(Config{}))
	p.init()
	// The hosts asked about are 127.0.0.1 to .5, not on the allowlist;
	// local addresses are allowed (allowLocalBinding) so that an allowed
	// one connects (the server listens on 127.0.0.1).
	script := fmt.Sprintf(`for h in 1 2 3 4 5; do echo "$h=$(curl -s -w ' %%{http_code}' http://127.0.0.$h:%d/)"; done`, port)
	sp := startParams(t, "pr", false, "/bin/sh", "-c", script)
	sp["cwd"] = "file://" + dir
	sp["sandbox"] = proxySandbox(dir)
	sp["enforceManagedNetwork"] = true
	sp["networkProxy"] = json.RawMessage(strings.Replace(string(proxyLaunch(`{"localhost":"allow"}`, `,"policyDecisionTimeoutMs":200`)),
		`"allowLocalBinding":false`, `"allowLocalBinding":true`, 1))
	p.call("process/start", sp)
	answers := []string{
		`{"decision":{"type":"allow"}}`,
		`{"decision":{"type":"deny","reason":"no from the client"}}`,
		`{"decision":{"type":"ask","reason":"ask the user"}}`,
		`{"decision":{"type":"deny"}}`, // a deny needs a reason
		"",                             // no answer: denied after the timeout
	}
	for i, a := range answers {
		w := p.wait("policyRequest", func(w wire) bool { return w.Method == "network/policyRequest" })
		if string(w.ID) != fmt.Sprint(i+1) {
			t.Errorf("request id %s, want %d", w.ID, i+1)
		}
		want := fmt.Sprintf(`{"processId":"pr","request":{"protocol":"http","host":"127.0.0.%d","port":%d}}`, i+1, port)
		if string(w.Params) != want {
			t.Errorf("params %s, want %s", w.Params, want)
		}
		if a != "" {
			p.raw(`{"id":` + string(w.ID) + `,"result":` + a + `}`)
		}
	}
	out, _ := output(p, "pr")
	t.Logf("output:\n%s", out)
	for _, want := range []string{
		"1=hello 200\n",
		`2={"status":"blocked","host":"127.0.0.2","reason":"no from the client","decision":"deny","source":"decider"`,
		`3={"status":"blocked","host":"127.0.0.3","reason":"ask the user","decision":"ask","source":"decider"`,
		`4={"status":"blocked","host":"127.0.0.4","reason":"not_allowed","decision":"deny","source":"decider"`,
		`5={"status":"blocked","host":"127.0.0.5","reason":"not_allowed","decision":"deny","source":"decider"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	allow := p.wait("allow decision", func(w wire) bool {
		return w.Method == "network/policyDecision" && strings.Contains(string(w.Params), `"decision":"allow"`)
	})
	if !strings.Contains(string(allow.Params), `"scope":"domain","decision":"allow","source":"decider","reason":"allow","protocol":"http","host":"127.0.0.1"`) {
		t.Errorf("allow decision %s", allow.Params)
	}
	var got []string
	for range 4 {
		w := p.wait("policyDecision", func(w wire) bool {
			return w.Method == "network/policyDecision" && !strings.Contains(string(w.Params), `"decision":"allow"`)
		})
		var d struct{ Host, Decision, Source, Reason string }
		mustUnmarshal(t, w.Params, &d)
		got = append(got, d.Host+"/"+d.Decision+"/"+d.Source+"/"+d.Reason)
	}
	if strings.Join(got, ",") != "127.0.0.2/deny/decider/no from the client,127.0.0.3/ask/decider/ask the user,"+
		"127.0.0.4/deny/decider/not_allowed,127.0.0.5/deny/decider/not_allowed" {
		t.Errorf("decisions %v", got)
	}
}

// TestManagedNetworkNeverReachesTheServer: even with every local address
// allowed, a sandboxed command cannot reach the exec-server's own
// listener through its proxy (it could start unconfined processes there).
func TestManagedNetworkNeverReachesTheServer(t *testing.T) {
	needProxyTools(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := ln.Addr().String()
	p := wsPeer(t, "ws://"+addr)
	p.init()
	dir := t.TempDir()
	hello := helloServer(t)
	script := fmt.Sprintf(`echo "server=$(curl -s http://%s/readyz)"; echo "other=$(curl -s http://127.0.0.1:%d/)"`, addr, hello)
	sp := startParams(t, "self", false, "/bin/sh", "-c", script)
	sp["cwd"] = "file://" + dir
	sp["sandbox"] = proxySandbox(dir)
	sp["networkProxy"] = json.RawMessage(strings.Replace(string(proxyLaunch(`{"*":"allow"}`, "")),
		`"allowLocalBinding":false`, `"allowLocalBinding":true`, 1))
	p.call("process/start", sp)
	out, _ := output(p, "self")
	if !strings.Contains(out, `server={"status":"blocked","host":"127.0.0.1","reason":"denied"`) || !strings.Contains(out, "other=hello\n") {
		t.Fatalf("output:\n%s", out)
	}
}

// TestManagedNetworkNeverWidensTheSandbox: a proxy launch with a sandbox
// whose network is restricted (or a launch with enabled false) gives the
// command no network at all: no proxy, no direct connection.
func TestManagedNetworkNeverWidensTheSandbox(t *testing.T) {
	needProxyTools(t)
	hello := helloServer(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	for i, c := range []struct{ network, launch string }{
		{`"network":"restricted"`, `"enabled":true`},
		{`"network":"enabled"`, `"enabled":false`},
	} {
		dir := t.TempDir()
		id := fmt.Sprint("w", i)
		sp := startParams(t, id, false, "/bin/sh", "-c",
			fmt.Sprintf(`echo "active=$CODEX_NETWORK_PROXY_ACTIVE"; curl -s --max-time 5 http://127.0.0.1:%d/; echo "curl=$?"`, hello))
		sp["cwd"] = "file://" + dir
		sp["sandbox"] = json.RawMessage(strings.Replace(string(proxySandbox(dir)), `"network":"enabled"`, c.network, 1))
		sp["networkProxy"] = json.RawMessage(strings.Replace(string(proxyLaunch(`{"*":"allow"}`, "")), `"enabled":true`, c.launch, 1))
		p.call("process/start", sp)
		out, _ := output(p, id)
		if !strings.Contains(out, "active=\n") || strings.Contains(out, "hello") || strings.Contains(out, "curl=0") {
			t.Errorf("%s, %s: output\n%s", c.network, c.launch, out)
		}
	}
}

// TestManagedNetworkNonRoot runs the proxy tests as an unprivileged user:
// the init is then root of a user namespace of its own, and still opens
// the listeners in the command's network namespace and hands them over.
func TestManagedNetworkNonRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	needProxyTools(t)
	asnobody.Run(t, "", "^(TestManagedNetworkProxy|TestNetworkPolicyRequest|TestManagedNetworkNeverWidensTheSandbox)$", nil,
		"sandbox not available")
}

package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/execgo/exec-server/sandbox"
)

// helloServer serves "hello" on 127.0.0.1 and returns its port.
func helloServer(t *testing.T) int {
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
func output(t *testing.T, p *peer, id string) (string, int) {
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
	out, code := output(t, p, "np")
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
		w := p.wait("policyDecision", func(w wire) bool { return w.Method == "network/policyDecision" })
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

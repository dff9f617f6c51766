package interop

import (
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/test/codexref"
	"github.com/execgo/exec-server/internal/test/linesrv"
)

// socksScript is a SOCKS5 CONNECT client (RFC 1928, no authentication) in
// python3's standard library: it sends a line through the tunnel to
// host:port and prints the answer, or "refused N" with the reply code.
const socksScript = `import os,socket,struct,sys
u=os.environ["ALL_PROXY"].split("//")[1];h,p=u.rsplit(":",1)
s=socket.create_connection((h,int(p)));s.sendall(b"\x05\x01\x00");s.recv(2)
d=sys.argv[1].encode();s.sendall(b"\x05\x01\x00\x03"+bytes([len(d)])+d+struct.pack(">H",int(sys.argv[2])))
r=s.recv(10)
if r[1]!=0: print("refused",r[1]);sys.exit(0)
s.sendall(b"ping\n");print(s.recv(100).decode().strip())`

// TestCodexNetworkProxy runs the real codex (0.171) with its managed
// network proxy on (features.network_proxy and a permission profile with
// the network enabled and an allowlist of "localhost") against our server,
// with an HTTP server and a TCP echo server on the host's 127.0.0.1:
//   - codex sends the proxy launch (networkProxy, enforceManagedNetwork);
//   - the allowed host answers through the HTTP proxy and, raw TCP,
//     through SOCKS5;
//   - 127.0.0.1 (local, not explicitly allowed) and a name not on the list
//     get the 403 and its JSON body, SOCKS5 a refusal;
//   - a direct connection, bypassing the proxy, is impossible;
//   - each decision (allows too, as the reference) reached codex as a
//     network/policyDecision.
//
// codex exec never sends policyDecisionTimeoutMs (it needs auto-review
// approvals, and exec forces approvals to never), so the
// network/policyRequest round trip is tested in the server package
// (TestNetworkPolicyRequest) instead.
func TestCodexNetworkProxy(t *testing.T) {
	codex := codexref.Bin(t)
	for _, tool := range []string{"curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the command needs %s", tool)
		}
	}
	base := scratchBase(t)
	ours := oursTarget()
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello-http") })}
	go hs.Serve(httpLn)
	t.Cleanup(func() { hs.Close() })
	httpPort := httpLn.Addr().(*net.TCPAddr).Port
	tcpPort, _ := linesrv.Start(t, "127.0.0.1", linesrv.Pong)

	cmd := fmt.Sprintf(`echo "active=$CODEX_NETWORK_PROXY_ACTIVE"
echo "http=$(curl -s http://localhost:%[1]d/)"
echo "local=$(curl -s -w ' %%{http_code}' http://127.0.0.1:%[1]d/)"
echo "miss=$(curl -s -w ' %%{http_code}' http://not-listed.example/)"
echo "tcp=$(python3 -c '%[3]s' localhost %[2]d)"
echo "tcplocal=$(python3 -c '%[3]s' 127.0.0.1 %[2]d)"
curl -s --noproxy '*' --max-time 5 http://127.0.0.1:%[1]d/; echo "direct=$?"
python3 -c 'import socket; socket.create_connection(("127.0.0.1",%[2]d),timeout=5)' 2>/dev/null; echo "directtcp=$?"
`, httpPort, tcpPort, socksScript)
	sc := codexScenario{
		name: "network-proxy",
		flags: []string{
			"-c", "features.network_proxy=true",
			"-c", `default_permissions="ws"`,
			"-c", `permissions.ws.filesystem={":root"="read",":project_roots"="write"}`,
			"-c", `permissions.ws.network={enabled=true,domains={"localhost"="allow"}}`,
		},
		script: func(work, token string) [][]map[string]any {
			return [][]map[string]any{execCommand("call-net", cmd)}
		},
	}
	r := runCodexOnce(t, codex, base, ours, sc)
	start := r.startOf("call-net")
	if start.err != nil {
		t.Fatalf("process/start refused: %v", start.err)
	}
	if start.params["enforceManagedNetwork"] != true || start.params["networkProxy"] == nil {
		t.Fatalf("codex did not send the proxy launch: enforceManagedNetwork %v networkProxy %v",
			start.params["enforceManagedNetwork"], start.params["networkProxy"])
	}
	out := r.toolOutput("call-net")
	t.Logf("command output:\n%s", out)
	for _, want := range []string{
		"active=1\n", "http=hello-http\n",
		`local={"status":"blocked","host":"127.0.0.1","reason":"not_allowed_local"`,
		`"message":"Sandbox policy blocks local/private network addresses."} 403`,
		`miss={"status":"blocked","host":"not-listed.example","reason":"not_allowed","decision":"deny","source":"baseline_policy","protocol":"http","port":80,"message":"Domain not in allowlist."} 403`,
		"tcp=pong\n", "tcplocal=refused 2\n",
		"direct=7\n", "directtcp=1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("command output lacks %q", want)
		}
	}
	got := map[string]bool{}
	for _, d := range r.traffic.notifications("network/policyDecision") {
		got[fmt.Sprintf("%v/%v/%v/%v", d["host"], d["protocol"], d["decision"], d["reason"])] = true
	}
	for _, want := range []string{
		"localhost/http/allow/allow", // the reference reports allows too (measured)
		"localhost/socks5_tcp/allow/allow",
		"127.0.0.1/http/deny/not_allowed_local",
		"not-listed.example/http/deny/not_allowed",
		"127.0.0.1/socks5_tcp/deny/not_allowed_local",
	} {
		if !got[want] {
			t.Errorf("no network/policyDecision %s (got %v)", want, got)
		}
	}
}

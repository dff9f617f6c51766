package interop

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/test/codexref"
	"github.com/execgo/exec-server/internal/test/linesrv"
)

// TestCodexTransparentTCP runs the real codex (0.171) with transparent_tcp
// in its permission profile against our server: codex sends
// networkProxy.proxy.transparentTcp (it refused every command while the
// capability was false), and the command's raw TCP, with the proxy
// variables removed, reaches the allowed 127.0.0.2 server only through the
// proxy (an allow decision reached codex), while 127.0.0.3, not allowed,
// never sees a connection. It needs what the server's transparent TCP
// needs (nftables NAT in a network namespace; server TestTransparentTCP
// skips without it, this one fails: codex then refuses the command).
func TestCodexTransparentTCP(t *testing.T) {
	codex := codexref.Bin(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("the command needs python3")
	}
	base := scratchBase(t)
	ours := oursTarget()
	allowed, _ := linesrv.Start(t, "127.0.0.2", linesrv.Pong)
	denied, deniedConns := linesrv.Start(t, "127.0.0.3", linesrv.Pong)
	probe := `import socket,sys
try:
  s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=20);s.sendall(b"ping\n");print(s.recv(100).decode().strip() or "closed")
except OSError as e: print("error",e.errno)`
	cmd := fmt.Sprintf(`unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy
echo "allowed=$(python3 -c '%[3]s' 127.0.0.2 %[1]d)"
echo "denied=$(python3 -c '%[3]s' 127.0.0.3 %[2]d)"
`, allowed, denied, probe)
	sc := codexScenario{
		name: "transparent-tcp",
		flags: []string{
			"-c", "features.network_proxy=true",
			"-c", `default_permissions="ws"`,
			"-c", `permissions.ws.filesystem={":root"="read",":project_roots"="write"}`,
			"-c", `permissions.ws.network={enabled=true,transparent_tcp=true,domains={"127.0.0.2"="allow"}}`,
		},
		script: func(work, token string) [][]map[string]any {
			return [][]map[string]any{execCommand("call-tt", cmd)}
		},
	}
	r := runCodexOnce(t, codex, base, ours, sc)
	start := r.startOf("call-tt")
	if start.err != nil {
		t.Fatalf("process/start refused: %v", start.err)
	}
	np, _ := json.Marshal(start.params["networkProxy"])
	if !strings.Contains(string(np), `"transparentTcp":true`) {
		// transparent_tcp is new in 0.171: older clients drop it (then
		// the command has no raw TCP at all, measured with 0.169).
		if v, _ := exec.Command(codex, "--version").Output(); strings.Contains(string(v), " 0.169.") {
			t.Skipf("%s has no transparent_tcp", strings.TrimSpace(string(v)))
		}
		t.Fatalf("codex did not send transparentTcp: networkProxy %s", np)
	}
	out := r.toolOutput("call-tt")
	t.Logf("command output:\n%s", out)
	if !strings.Contains(out, "allowed=pong\n") {
		t.Errorf("the allowed server was not reached: %q", out)
	}
	if strings.Contains(out, "denied=pong") {
		t.Errorf("the denied server answered: %q", out)
	}
	if n := deniedConns.Load(); n != 0 {
		t.Errorf("the denied server saw %d connections", n)
	}
	got := map[string]bool{}
	for _, d := range r.traffic.notifications("network/policyDecision") {
		got[fmt.Sprintf("%v/%v/%v/%v", d["host"], d["protocol"], d["decision"], d["reason"])] = true
	}
	for _, want := range []string{"127.0.0.2/socks5_tcp/allow/allow", "127.0.0.3/socks5_tcp/deny/not_allowed_local"} {
		if !got[want] {
			t.Errorf("no network/policyDecision %s (got %v)", want, got)
		}
	}
}

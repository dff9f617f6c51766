package interop

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/codexref"
	"github.com/execgo/exec-server/netproxy"
)

const (
	maskOpenAI = "sk-proj-e2eDEF0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH_ij-kl"
	maskGitHub = "ghp_e2eabcdefghijklmnopqrstuvwxyz012345678"
	maskGHE    = "ghp_gheabcdefghijklmnopqrstuvwxyz012345678"
)

// TestCodexCredentialMasking runs the real codex (0.171) with credential
// masking on (features.credential_masking, the network proxy's
// credential_broker, a non-login shell, secrets set through
// shell_environment_policy) against our server:
//   - codex sends networkProxy.proxy.credentialMasking (it does only when
//     the executor advertises credentialMasking);
//   - the command's environment, printed and read from /proc/self/environ,
//     holds dummies only, of the reference's shape;
//   - through the proxy, curl trusting the bundle the certificate
//     variables name reaches an HTTPS server that receives the real
//     GitHub Enterprise token (bound by GH_HOST=localhost; the server
//     listens on 127.0.0.1:443 with a certificate of its own test CA,
//     which our server trusts through SSL_CERT_FILE, Go's system roots).
//
// The built-in OpenAI and GitHub cloud destinations are real hosts that
// this machine cannot reach, so their restoration is tested in netproxy
// (TestRestore) and server (TestCredentialMasking).
func TestCodexCredentialMasking(t *testing.T) {
	codex := codexref.Bin(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the command needs curl")
	}
	base := scratchBase(t)
	ours := oursTarget()
	ln, err := net.Listen("tcp", "127.0.0.1:443")
	if err != nil {
		t.Skipf("the GitHub Enterprise stand-in needs 127.0.0.1:443: %v", err)
	}
	upCA, err := netproxy.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := upCA.Leaf("localhost")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 8)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Path + " " + r.Header.Get("Authorization")
		fmt.Fprint(w, "ghe-ok")
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{*leaf}}}
	go hs.ServeTLS(ln, "", "")
	t.Cleanup(func() { hs.Close() })
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, upCA.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := `env | grep -E '^(OPENAI_API_KEY|GITHUB_TOKEN|GH_ENTERPRISE_TOKEN|GH_HOST|CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE|SSL_CERT_FILE)=' | sort | sed 's/^/env:/'
cat /proc/self/environ | tr '\0' '\n' | grep -E '^(OPENAI_API_KEY|GITHUB_TOKEN|GH_ENTERPRISE_TOKEN)=' | sort | sed 's/^/self:/'
echo "ghe=$(curl -sS -H "Authorization: Bearer $GH_ENTERPRISE_TOKEN" https://localhost/api/v3/user 2>&1)"
`
	sc := codexScenario{
		name: "credential-masking",
		flags: []string{
			"-c", "features.credential_masking=true",
			"-c", "features.network_proxy={enabled=true,credential_broker=true}",
			"-c", "allow_login_shell=false",
			"-c", `shell_environment_policy.set={OPENAI_API_KEY="` + maskOpenAI + `",GITHUB_TOKEN="` + maskGitHub +
				`",GH_ENTERPRISE_TOKEN="` + maskGHE + `",GH_HOST="localhost"}`,
			"-c", `default_permissions="ws"`,
			"-c", `permissions.ws.filesystem={":root"="read",":project_roots"="write"}`,
			"-c", `permissions.ws.network={enabled=true,domains={"localhost"="allow"}}`,
		},
		script: func(work, token string) [][]map[string]any {
			return [][]map[string]any{execCommand("call-mask", cmd)}
		},
		serverEnv: []string{"SSL_CERT_FILE=" + roots},
	}
	r := runCodexOnce(t, codex, base, ours, sc)
	start := r.startOf("call-mask")
	if start.err != nil {
		t.Fatalf("process/start refused: %v", start.err)
	}
	np, _ := start.params["networkProxy"].(map[string]any)
	proxy, _ := np["proxy"].(map[string]any)
	if proxy["credentialMasking"] != true {
		t.Fatalf("codex did not ask for credential masking: networkProxy %v", np)
	}
	out := r.toolOutput("call-mask")
	t.Logf("command output:\n%s", out)
	for _, real := range []string{maskOpenAI, maskGitHub, maskGHE} {
		if strings.Contains(out, real) {
			t.Errorf("the command (and the model) saw the real value %s", real)
		}
	}
	for _, re := range []string{
		`env:OPENAI_API_KEY=sk-proj-masked[A-Za-z0-9]+\n`, `env:GITHUB_TOKEN=ghp_masked[A-Za-z0-9]+\n`,
		`env:GH_ENTERPRISE_TOKEN=ghp_masked[A-Za-z0-9]+\n`, `env:CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE=1\n`,
		`env:SSL_CERT_FILE=/\S+/ca-bundle-[0-9a-f]{64}\.pem\n`,
		`self:OPENAI_API_KEY=sk-proj-masked[A-Za-z0-9]+\n`, `self:GH_ENTERPRISE_TOKEN=ghp_masked[A-Za-z0-9]+\n`,
		`ghe=ghe-ok`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("command output lacks %s", re)
		}
	}
	select {
	case g := <-got:
		if g != "/api/v3/user Bearer "+maskGHE {
			t.Errorf("the GitHub Enterprise stand-in received %q, want the real token", g)
		}
	case <-time.After(30 * time.Second):
		t.Error("the GitHub Enterprise stand-in received no request")
	}
}

package server

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	maskRealOpenAI = "sk-proj-abcDEF0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH_ij-kl"
	maskRealGitHub = "ghp_abcdefghijklmnopqrstuvwxyz0123456789AB"
	maskRealMine   = "mytok-1234567890abcdef"
)

// recordingTLS is an upstream HTTPS server on 127.0.0.1 with its own test
// CA; it records the Authorization header of each request and echoes it.
func recordingTLS(t *testing.T) (*httptest.Server, chan string) {
	got := make(chan string, 16)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		got <- r.URL.Path + " " + a
		fmt.Fprint(w, "echo:"+a)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// recvWithin is the next request an upstream recorded, or "none" when
// none came (every request of the command has ended before it is read:
// the wait only guards against a hang).
func recvWithin(ch chan string) string {
	select {
	case g := <-ch:
		return g
	case <-time.After(30 * time.Second):
		return "none"
	}
}

func maskLaunch(domains, providers string) json.RawMessage {
	return json.RawMessage(`{"proxy":{"enabled":true,"credentialMasking":true,"enableSocks5":true,"enableSocks5Udp":false,` +
		`"allowUpstreamProxy":true,"dangerouslyAllowAllUnixSockets":false,"mode":"full","domains":` + domains + `,` +
		`"unixSockets":null,"allowLocalBinding":false` + providers + `},"auditMetadata":{},"environmentId":"remote","executionId":"e1"}`)
}

// TestCredentialMasking runs a sandboxed command with credential masking:
// its environment (as it prints it, and as /proc/self/environ and its
// shell's /proc/PID/environ hold it) has only dummies, of the reference's
// shape, and the certificate variables point at a bundle it can read but
// not change; through the proxy, curl trusting that bundle reaches an
// upstream TLS server (its own test CA, trusted by the proxy through
// Config.MaskUpstreamRoots) that receives the real value, and echoes it
// back as a stand-in; another server, not a bound destination, receives
// the dummy.
func TestCredentialMasking(t *testing.T) {
	needProxyTools(t)
	bound, boundGot := recordingTLS(t)
	other, otherGot := recordingTLS(t)
	bu, _ := url.Parse(bound.URL)
	roots := x509.NewCertPool()
	roots.AddCert(bound.Certificate())
	dir := t.TempDir()
	p := stdioPeer(t, New(Config{MaskUpstreamRoots: roots}))
	p.init()
	script := fmt.Sprintf(`
env | sort | sed 's/^/env:/'
cat /proc/self/environ | tr '\0' '\n' | sed 's/^/self:/'
tr '\0' '\n' < /proc/$$/environ | sed 's/^/shell:/'
echo "bound=$(curl -sS -H "Authorization: Bearer $MY_TOKEN" %[1]s/api/models)"
echo "other=$(curl -sS -k -H "Authorization: Bearer $MY_TOKEN" %[2]s/api/models)"
echo "openai-elsewhere=$(curl -sS -H "Authorization: Bearer $OPENAI_API_KEY" %[1]s/other)"
grep -c 'PRIVATE KEY' "$SSL_CERT_FILE"; echo "key-in-bundle=$?"
echo x >> "$SSL_CERT_FILE" 2>/dev/null; echo "bundle-write=$?"
touch "$(dirname "$SSL_CERT_FILE")/x" 2>/dev/null; echo "bundle-dir-write=$?"
`, bound.URL, other.URL)
	sp := startParams(t, "mask", false, "/bin/bash", "-c", script)
	sp["cwd"] = "file://" + dir
	sp["env"] = map[string]string{"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": maskRealOpenAI, "GITHUB_TOKEN": maskRealGitHub,
		"MY_TOKEN": maskRealMine}
	sp["sandbox"] = proxySandbox(dir)
	sp["enforceManagedNetwork"] = true
	sp["networkProxy"] = maskLaunch(`{"127.0.0.1":"allow"}`,
		`,"credentialProviders":{"mine":{"env":["MY_TOKEN"],"patterns":["mytok-[0-9a-f]{16}"],"url_prefixes":["https://`+bu.Host+`/api"],"auth":["bearer"]}}`)
	p.call("process/start", sp)
	out, code := output(p, "mask")
	t.Logf("output:\n%s", out)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, real := range []string{maskRealOpenAI, maskRealGitHub, maskRealMine} {
		if strings.Contains(out, real) {
			t.Errorf("the command saw the real value %s", real)
		}
	}
	vars := map[string]string{}
	for _, prefix := range []string{"env:", "self:", "shell:"} {
		seen := map[string]string{}
		for l := range strings.SplitSeq(out, "\n") {
			if kv, ok := strings.CutPrefix(l, prefix); ok {
				k, v, _ := strings.Cut(kv, "=")
				seen[k] = v
			}
		}
		if !regexp.MustCompile(`^sk-proj-masked[A-Za-z0-9]+$`).MatchString(seen["OPENAI_API_KEY"]) ||
			!regexp.MustCompile(`^ghp_masked[A-Za-z0-9]+$`).MatchString(seen["GITHUB_TOKEN"]) ||
			!regexp.MustCompile(`^mytok-[0-9a-f]{16}$`).MatchString(seen["MY_TOKEN"]) || seen["CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE"] != "1" {
			t.Errorf("%s dummies: %q %q %q", prefix, seen["OPENAI_API_KEY"], seen["GITHUB_TOKEN"], seen["MY_TOKEN"])
		}
		for _, k := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CODEX_CA_CERTIFICATE"} {
			if !strings.Contains(seen[k], "/ca-bundle-") {
				t.Errorf("%s%s=%q", prefix, k, seen[k])
			}
		}
		if prefix == "env:" {
			vars = seen
		}
	}
	dummy := vars["MY_TOKEN"]
	if g := recvWithin(boundGot); g != "/api/models Bearer "+maskRealMine {
		t.Errorf("the bound upstream got %q, want the real value", g)
	}
	if g := recvWithin(otherGot); g != "/api/models Bearer "+dummy {
		t.Errorf("the other upstream got %q, want the dummy", g)
	}
	if g := recvWithin(boundGot); g != "/other Bearer "+vars["OPENAI_API_KEY"] {
		t.Errorf("the OpenAI key outside api.openai.com went out as %q, want the dummy", g)
	}
	for _, want := range []string{"bound=echo:Bearer mytok-", "other=echo:Bearer " + dummy, "key-in-bundle=1", "bundle-write=1", "bundle-dir-write=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The bundle holds certificates only; the key is nowhere on disk.
	b, err := os.ReadFile(vars["SSL_CERT_FILE"])
	if err != nil || strings.Contains(string(b), "PRIVATE KEY") || !strings.Contains(string(b), "CERTIFICATE") {
		t.Errorf("bundle %s: %v", vars["SSL_CERT_FILE"], err)
	}
	if fi, err := os.Stat(filepath.Dir(vars["SSL_CERT_FILE"])); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bundle dir: %v %v", fi, err)
	}
}

// TestCredentialMaskingFailsClosed: a custom provider that cannot be used
// (invalid, or with a member this server does not know) refuses the
// start; the command never runs with its secret unmasked.
func TestCredentialMaskingFailsClosed(t *testing.T) {
	needProxyTools(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	for name, providers := range map[string]string{
		"no patterns":    `,"credentialProviders":{"p":{"env":["K"],"patterns":[],"url_prefixes":["https://x.example/"],"auth":["bearer"]}}`,
		"http remote":    `,"credentialProviders":{"p":{"env":["K"],"patterns":["k-[a-z]{4}"],"url_prefixes":["http://x.example/"],"auth":["bearer"]}}`,
		"unknown member": `,"credentialProviders":{"p":{"env":["K"],"patterns":["k-[a-z]{4}"],"url_prefixes":["https://x.example/"],"auth":["bearer"],"body":true}}`,
		"built-in key":   `,"credentialProviders":{"p":{"env":["OPENAI_API_KEY"],"patterns":["sk-.*"],"url_prefixes":["https://x.example/"],"auth":["bearer"]}}`,
		"bad regexp":     `,"credentialProviders":{"p":{"env":["K"],"patterns":["("],"url_prefixes":["https://x.example/"],"auth":["bearer"]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			marker := filepath.Join(dir, "ran")
			sp := startParams(t, "m-"+strings.ReplaceAll(name, " ", "-"), false, "/bin/bash", "-c", "echo ran > "+marker)
			sp["cwd"] = "file://" + dir
			sp["env"] = map[string]string{"PATH": "/usr/bin:/bin", "K": "k-abcd"}
			sp["sandbox"] = proxySandbox(dir)
			sp["enforceManagedNetwork"] = true
			sp["networkProxy"] = maskLaunch(`null`, providers)
			w := p.response(p.request("process/start", sp))
			if w.Error == nil {
				t.Fatalf("start accepted: %s", w.raw)
			}
			if !strings.Contains(w.raw, `"code":-32603`) || !strings.Contains(w.raw, `{"kind":"sandboxUnavailable"}`) ||
				!strings.Contains(w.raw, "networkProxy") {
				t.Fatalf("got %s, want -32603 sandboxUnavailable naming networkProxy", w.raw)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the refused command ran")
			}
		})
	}
}

// TestCredentialMaskingNoSnapshot: a shell snapshot is captured with the
// real environment and replayed from a file the command can read; with
// masking the command runs without one (argv unchanged, not the replay's
// -pc) and sees only the dummy.
func TestCredentialMaskingNoSnapshot(t *testing.T) {
	needProxyTools(t)
	dir := t.TempDir()
	p := stdioPeer(t, New(Config{}))
	p.init()
	for i := range 2 { // the second start would replay the first's capture
		id := fmt.Sprintf("snap%d", i)
		sp := startParams(t, id, false, "/bin/bash", "-lc", `echo "key=$OPENAI_API_KEY"; echo "argv=$(tr '\0' ' ' </proc/$$/cmdline | cut -c1-13)"`)
		sp["cwd"] = "file://" + dir
		sp["env"] = map[string]string{"PATH": "/usr/bin:/bin", "HOME": dir, "OPENAI_API_KEY": maskRealOpenAI}
		sp["sandbox"] = proxySandbox(dir)
		sp["enforceManagedNetwork"] = true
		sp["networkProxy"] = maskLaunch(`null`, "")
		sp["shellSnapshot"] = map[string]any{"scopeId": "thread:remote", "shell": map[string]string{"name": "bash", "path": "/bin/bash"}}
		p.call("process/start", sp)
		out, code := output(p, id)
		if code != 0 || strings.Contains(out, maskRealOpenAI) || !strings.Contains(out, "key=sk-proj-masked") || !strings.Contains(out, "argv=/bin/bash -lc") {
			t.Fatalf("start %d: exit %d, output:\n%s", i, code, out)
		}
	}
}

// TestCredentialMaskingWithoutNetwork: a masked launch that gives the
// command no network (the proxy disabled, or a sandbox without network)
// still masks its environment.
func TestCredentialMaskingWithoutNetwork(t *testing.T) {
	needProxyTools(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	for i, launch := range []string{
		strings.Replace(string(maskLaunch(`null`, "")), `"enabled":true`, `"enabled":false`, 1),
		string(maskLaunch(`null`, "")),
	} {
		dir := t.TempDir()
		id := fmt.Sprintf("nonet%d", i)
		sp := startParams(t, id, false, "/bin/bash", "-c", `echo "key=$OPENAI_API_KEY"`)
		sp["cwd"] = "file://" + dir
		sp["env"] = map[string]string{"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": maskRealOpenAI}
		sb := string(proxySandbox(dir))
		if i == 1 {
			sb = strings.Replace(sb, `"network":"enabled"`, `"network":"restricted"`, 1)
		}
		sp["sandbox"] = json.RawMessage(sb)
		sp["enforceManagedNetwork"] = true
		sp["networkProxy"] = json.RawMessage(launch)
		p.call("process/start", sp)
		out, code := output(p, id)
		if code != 0 || strings.Contains(out, maskRealOpenAI) || !strings.Contains(out, "key=sk-proj-masked") {
			t.Fatalf("launch %d: exit %d, output:\n%s", i, code, out)
		}
	}
}

package hostile

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
)

// upgradeStatus tries a websocket upgrade with the given Authorization
// header ("" for none) and returns the status code and body.
func upgradeStatus(t *testing.T, base, authz string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("upgrade request: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

func writeSecret(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAuthEndToEnd runs the binary with each --ws-auth mode and checks the
// upgrade refusals (status, content type, the reference's texts), that
// /readyz stays open, that a valid bearer gets in, and that neither the
// token nor the secret ever appears in the server's own output, even at
// debug level.
func TestAuthEndToEnd(t *testing.T) {
	dir := t.TempDir()
	const token = "capability-token-7f3a9c2e51d04b8a"
	const secret = "shared-secret-0123456789abcdef-0123456789abcdef"
	tokenFile := writeSecret(t, dir, "token", token+"\n")
	secretFile := writeSecret(t, dir, "secret", secret+"\n")
	sign := func(claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	now := time.Now()
	good := sign(jwt.MapClaims{"exp": now.Add(time.Minute).Unix(), "iss": "lead", "aud": []string{"x", "exec"}})

	modes := []struct {
		name  string
		args  []string
		good  string
		cases [][2]string // Authorization header, expected 401 body
	}{
		{"capability-token", []string{"--ws-auth", "capability-token", "--ws-token-file", tokenFile}, token, [][2]string{
			{"", "missing websocket bearer token"},
			{"Basic " + token, "invalid authorization header"},
			{"Bearer " + token + "x", "invalid websocket bearer token"},
		}},
		{"signed-bearer-token", []string{"--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", secretFile, "--ws-issuer", "lead", "--ws-audience", "exec"}, good, [][2]string{
			{"", "missing websocket bearer token"},
			{"Bearer " + token, "invalid websocket jwt"},
			{"Bearer " + sign(jwt.MapClaims{"exp": now.Add(-time.Hour).Unix(), "iss": "lead", "aud": "exec"}), "expired websocket jwt"},
			{"Bearer " + sign(jwt.MapClaims{"exp": now.Add(time.Hour).Unix(), "nbf": now.Add(time.Hour).Unix(), "iss": "lead", "aud": "exec"}), "websocket jwt is not valid yet"},
			{"Bearer " + sign(jwt.MapClaims{"exp": now.Add(time.Hour).Unix(), "iss": "other", "aud": "exec"}), "websocket jwt issuer mismatch"},
			{"Bearer " + sign(jwt.MapClaims{"exp": now.Add(time.Hour).Unix(), "iss": "lead", "aud": "other"}), "websocket jwt audience mismatch"},
			{"Bearer " + sign(jwt.MapClaims{"iss": "lead", "aud": "exec"}), "invalid websocket jwt"},
		}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := startServer(t, nil, append(m.args, "--log-level", "debug")...)
			base := "http://" + s.addr
			resp, err := http.Get(base + "/readyz")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("/readyz without a token: %v %v", resp, err)
			}
			resp.Body.Close()
			for _, c := range m.cases {
				code, ctype, body := upgradeStatus(t, base, c[0])
				if code != http.StatusUnauthorized || body != c[1] || ctype != "text/plain; charset=utf-8" {
					t.Errorf("Authorization %.40q: %d %q %q, want 401 %q", c[0], code, ctype, body, c[1])
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, s.url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + m.good}}})
			if err != nil {
				t.Fatalf("dial with a valid bearer: %v", err)
			}
			c.CloseNow()
			time.Sleep(100 * time.Millisecond)
			logs := s.stderr.String()
			for _, leak := range []string{token, secret, m.good} {
				if strings.Contains(logs, leak) {
					t.Errorf("server output contains a secret %.12q...", leak)
				}
			}
		})
	}
}

// TestStartupRefusals checks the startup errors that protect an exposed
// server: one line on stderr, a non-zero exit, no listener.
func TestStartupRefusals(t *testing.T) {
	dir := t.TempDir()
	short := writeSecret(t, dir, "short", "too-short-secret")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "ws://0.0.0.0:0"}, "refusing to listen on ws://0.0.0.0:0 without authentication"},
		{[]string{"--listen", "ws://[::]:0"}, "refusing to listen on ws://[::]:0 without authentication"},
		{[]string{"--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", short}, "must be at least 32 bytes"},
		{[]string{"--ws-token-file", short}, "websocket auth flags require"},
		{[]string{"--listen", "stdio", "--ws-auth", "capability-token", "--ws-token-file", short}, "WebSocket auth requires a WebSocket listener, not stdio"},
	} {
		cmd := exec.Command(binary, c.args...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%q started", c.args)
			continue
		}
		text := strings.TrimSpace(string(out))
		if !strings.Contains(text, c.want) || strings.Count(text, "\n") > 0 {
			t.Errorf("%q: output %q, want one line containing %q", c.args, text, c.want)
		}
		if strings.Contains(text, "too-short-secret") {
			t.Errorf("%q: the error shows the secret", c.args)
		}
	}
}

// TestTLS serves wss:// and https /readyz with --tls-cert/--tls-key.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, pool := selfSigned(t)
	cert := writeSecret(t, dir, "cert.pem", string(certPEM))
	key := writeSecret(t, dir, "key.pem", string(keyPEM))

	cmd := exec.Command(binary, "--listen", "ws://127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make([]byte, 128)
	n, _ := stdout.Read(line)
	url := strings.TrimSpace(string(line[:n]))
	if !strings.HasPrefix(url, "wss://") {
		t.Fatalf("first stdout line %q is not a wss:// URL", url)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	resp, err := hc.Get("https://" + strings.TrimPrefix(url, "wss://") + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("https /readyz: %v %v", resp, err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatalf("wss dial: %v", err)
	}
	msg := `{"id":1,"method":"initialize","params":{"clientName":"tls"}}`
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	if _, data, err := c.Read(ctx); err != nil || !strings.Contains(string(data), "sessionId") {
		t.Fatalf("initialize over wss: %s %v", data, err)
	}
	c.CloseNow()
	// Plain text on the TLS port gets nowhere.
	if _, _, err := websocket.Dial(ctx, "ws://"+strings.TrimPrefix(url, "wss://"), nil); err == nil {
		t.Fatal("plain ws:// accepted on the TLS port")
	}
}

func selfSigned(t *testing.T) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "exec-server test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(parsed)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), pool
}

// TestLimits runs the binary with small limits and checks that each is
// enforced with a clear error, and that the server goes on serving.
func TestLimits(t *testing.T) {
	mark := marker()
	t.Cleanup(func() { killMarked(mark) })
	dir := t.TempDir()
	s := startServer(t, nil, "--max-processes", "2", "--max-handles", "2", "--max-sessions", "2",
		"--max-connections", "3", "--max-message-bytes", "4096", "--max-json-depth", "16")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := dial(ctx, t, s.url)
	cl.handshake(ctx, t)

	expect := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", what, err, want)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	env := map[string]string{"HOSTILE_MARK": mark}
	for i := range 2 {
		if err := cl.startProcess(ctx, "p"+string(rune('a'+i)), []string{"sleep", "100"}, env); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	expect("third process", cl.startProcess(ctx, "pc", []string{"sleep", "100"}, env), "too many processes")

	open := func(h string) error {
		return cl.call(ctx, "fs/open", map[string]any{"handleId": h, "path": "file://" + dir + "/" + h, "mode": "replace"}, nil)
	}
	var re *rpcError
	if err := open("ha"); errors.As(err, &re) && re.Code == -32601 {
		t.Logf("fs/open is not served by this build: the handle limit is not checked")
	} else {
		if err != nil {
			t.Fatalf("open ha: %v", err)
		}
		if err := open("hb"); err != nil {
			t.Fatalf("open hb: %v", err)
		}
		expect("third handle", open("hc"), "too many open file handles")
	}

	deep := strings.Repeat("[", 40) + strings.Repeat("]", 40)
	expect("deep message", cl.sendRaw(ctx, `{"id":99,"method":"process/read","params":`+deep+`}`), "recursion limit exceeded")

	// A second session fits; a third does not.
	cl2 := dial(ctx, t, s.url)
	cl2.handshake(ctx, t)
	cl3 := dial(ctx, t, s.url)
	expect("third session", cl3.call(ctx, "initialize", map[string]any{"clientName": "x"}, nil), "too many sessions")
	// Three connections are open: a fourth upgrade is refused.
	if code, _, body := upgradeStatus(t, "http://"+s.addr, ""); code != http.StatusServiceUnavailable {
		t.Errorf("fourth connection: %d %q, want 503", code, body)
	} else {
		t.Logf("fourth connection: %d %s", code, strings.TrimSpace(body))
	}
	cl3.close()

	// An over-limit message may cost its connection, nothing more.
	big := strings.Repeat("x", 8192)
	err := cl2.call(ctx, "initialize", map[string]any{"clientName": big}, nil)
	t.Logf("over-limit message: %v", err)
	if err := cl.call(ctx, "environment/status", nil, nil); err != nil {
		t.Fatalf("first client after another's over-limit message: %v", err)
	}
	s.alive(t)
}

// TestEnvironmentHygiene starts a child that inherits the server's whole
// environment, default excludes off, on a server whose auth token and
// shared secret come from files, and checks that neither reaches the child.
func TestEnvironmentHygiene(t *testing.T) {
	dir := t.TempDir()
	const token = "hygiene-token-5b1e0c77aa"
	tokenFile := writeSecret(t, dir, "token", token)
	s := startServer(t, nil, "--ws-auth", "capability-token", "--ws-token-file", tokenFile)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, s.url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(c)
	go cl.readLoop()
	defer cl.close()
	cl.handshake(ctx, t)
	err = cl.call(ctx, "process/start", map[string]any{
		"processId": "env", "argv": []string{"sh", "-c", "env; echo; cat /proc/$PPID/cmdline | tr '\\0' ' '"}, "cwd": "file:///",
		"env": map[string]string{}, "tty": false,
		"envPolicy": map[string]any{"inherit": "all", "ignoreDefaultExcludes": true},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var res struct {
		Chunks []struct {
			Chunk []byte `json:"chunk"`
		} `json:"chunks"`
		NextSeq uint64 `json:"nextSeq"`
		Closed  bool   `json:"closed"`
	}
	after := uint64(0)
	for !res.Closed && ctx.Err() == nil {
		if err := cl.call(ctx, "process/read", map[string]any{"processId": "env", "afterSeq": after, "waitMs": 1000}, &res); err != nil {
			t.Fatal(err)
		}
		for _, ch := range res.Chunks {
			out.Write(ch.Chunk)
		}
		after = res.NextSeq - 1
	}
	if !strings.Contains(out.String(), "PATH=") {
		t.Fatalf("the child did not inherit the server's environment: %q", out.String())
	}
	if strings.Contains(out.String(), token) {
		t.Fatalf("the auth token reached the child's environment")
	}
}

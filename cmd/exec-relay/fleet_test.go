package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/execgo/exec-server/internal/test/syncbuf"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/remote/executor"
	"github.com/execgo/exec-server/remote/harness"
	"github.com/execgo/exec-server/remote/noise"
)

// startRun runs exec-relay with args until the test ends and returns the
// base URL it printed.
func startRun(t *testing.T, args ...string) string {
	t.Helper()
	pr, pw := io.Pipe()
	var stderr syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, args, pw, &stderr)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("exec-relay did not shut down")
		}
		if t.Failed() {
			t.Logf("exec-relay %v stderr:\n%s", args, stderr.String())
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("exec-relay %v: %v; stderr %s", args, err, stderr.String())
	}
	go io.Copy(io.Discard, pr)
	return strings.TrimSpace(line)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func writeFile(t *testing.T, name, content string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func post(t *testing.T, url, token string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func key(t *testing.T) noise.PublicKey {
	kp, err := noise.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return kp.Public()
}

// Two single nodes given the same --url-secret-file verify each other's
// signed URLs (without it, each signs with its own random secret).
func TestSharedURLSecret(t *testing.T) {
	secret := writeFile(t, "secret", strings.Repeat("k", 48)+"\n")
	tok := writeFile(t, "tok", "t1\n")
	a := startRun(t, "--listen", "127.0.0.1:0", "--executor-token-file", tok, "--harness-token-file", tok, "--url-secret-file", secret)
	b := startRun(t, "--listen", "127.0.0.1:0", "--executor-token-file", tok, "--harness-token-file", tok, "--url-secret-file", secret)
	st, m := post(t, a+"/cloud/environment/E/register", "t1", map[string]any{"security_profile": "noise_hybrid_ik_v1", "executor_public_key": key(t)})
	if st != 200 {
		t.Fatalf("register: %d %v", st, m)
	}
	u := m["url"].(string)
	onB := "ws://" + strings.TrimPrefix(b, "http://") + u[strings.Index(u, "/rendezvous/"):]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, onB, nil)
	if err == nil || resp == nil {
		t.Fatalf("dial on b: %v", err)
	}
	// b checks the signature, then its own (separate) registry.
	if got := resp.Header.Get("x-codex-rendezvous-rejection-reason"); got != "unexpected_executor_registration_id" {
		t.Fatalf("b rejected a's URL with %q, want the signature accepted", got)
	}
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "exec-relay ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

func TestTLSListener(t *testing.T) {
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "relay"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(priv)
	cert := writeFile(t, "cert.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	keyf := writeFile(t, "key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
	base := startRun(t, "--listen", "127.0.0.1:0", "--insecure-no-auth", "--tls-cert", cert, "--tls-key", keyf)
	if !strings.HasPrefix(base, "https://127.0.0.1:") {
		t.Fatalf("base %q", base)
	}
	pool := x509.NewCertPool()
	pool.AddCert(must(x509.ParseCertificate(der)))
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("readyz over TLS: %d", resp.StatusCode)
	}

	// A stream through the TLS listener (raw sockets under TLS on both
	// sides: rawsock.Listener here, the executor's and harness's dials):
	// messages of every size come back byte for byte.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go executor.Run(ctx, executor.Config{RegistryURL: base, EnvironmentID: "T", Token: "t", Server: echo{},
		HTTPClient: executor.DefaultHTTPClient(pool), ReconnectMin: 200 * time.Millisecond})
	d, err := harness.NewDialer(base, "T", "t", harness.Options{HTTPClient: c})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := d.Dial(ctx)
	for err != nil && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond) // the executor is still registering
		ch, err = d.Dial(ctx)
	}
	if err != nil {
		t.Fatalf("dial over TLS: %v", err)
	}
	defer ch.Close()
	for _, n := range []int{1, 1000, 16 << 10, 60 << 10, 200 << 10} {
		m := []byte(`{"jsonrpc":"2.0","method":"m","params":"` + strings.Repeat("x", n) + `"}`)
		if err := ch.Write(ctx, m, false); err != nil {
			t.Fatal(err)
		}
		got, err := ch.Read(ctx)
		if err != nil || !bytes.Equal(got, m) {
			t.Fatalf("%d-byte message over TLS: got %d bytes, %v", n, len(got), err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

type echo struct{}

func (echo) ServeStream(ctx context.Context, st jsonrpc.Stream) {
	defer st.Close()
	for {
		m, err := st.Read(ctx)
		if err != nil || st.Write(ctx, m, false) != nil {
			return
		}
	}
}

// The fleet through the command line only: an embedded NATS server, two
// exec-relay nodes with --nats-url, --node-name, --url-secret-file and
// their own --public-url; this project's executor registers on node a,
// the harness connects on node b; messages come back byte for byte.
func TestFleetCommandLine(t *testing.T) {
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(ns.Shutdown)
	secret := writeFile(t, "secret", strings.Repeat("f", 64))
	etok := writeFile(t, "etok", "exec-token\n")
	htok := writeFile(t, "htok", "harness-token\n")
	for _, links := range []bool{false, true} {
		t.Run(map[bool]string{false: "nats", true: "peer-links"}[links], func(t *testing.T) {
			fleetCommandLine(t, ns.ClientURL(), secret, etok, htok, links)
		})
	}
}

func fleetCommandLine(t *testing.T, natsURL, secret, etok, htok string, links bool) {
	node := func(name string) string {
		addr := freeAddr(t)
		args := []string{"--listen", addr, "--public-url", "http://" + addr, "--nats-url", natsURL,
			"--node-name", name, "--url-secret-file", secret, "--executor-token-file", etok, "--harness-token-file", htok}
		if links {
			args = append(args, "--peer-listen", "127.0.0.1:0")
		}
		return startRun(t, args...)
	}
	a, b := node("a"), node("b")
	metrics := func() []byte {
		resp, err := http.Get(b + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return body
	}
	if links {
		deadline := time.Now().Add(20 * time.Second)
		for !bytes.Contains(metrics(), []byte("exec_relay_fleet_links 1\n")) {
			if time.Now().After(deadline) {
				t.Fatalf("no peer link between the nodes:\n%s", metrics())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go executor.Run(ctx, executor.Config{RegistryURL: a, EnvironmentID: "E", Token: "exec-token", Server: echo{}, ReconnectMin: 200 * time.Millisecond})
	d, err := harness.NewDialer(b, "E", "harness-token", harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ch interface {
		Write(context.Context, []byte, bool) error
		Read(context.Context) ([]byte, error)
		Close() error
	}
	for {
		c, err := d.Dial(ctx)
		if err == nil {
			ch = c
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("dial: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the executor is still registering
	}
	defer ch.Close()
	for i := range 100 {
		m := []byte(`{"jsonrpc":"2.0","method":"m","params":{"i":` + strings.Repeat("1", i+1) + `}}`)
		if err := ch.Write(ctx, m, false); err != nil {
			t.Fatal(err)
		}
		got, err := ch.Read(ctx)
		if err != nil || !bytes.Equal(got, m) {
			t.Fatalf("message %d: %q %v", i, got, err)
		}
	}
	body := metrics()
	if !bytes.Contains(body, []byte("exec_relay_fleet_frames_out_total")) || bytes.Contains(body, []byte("exec_relay_fleet_frames_out_total 0\n")) {
		t.Fatalf("metrics of node b:\n%s", body)
	}
	if !bytes.Contains(body, []byte("exec_relay_nats_connected 1")) {
		t.Fatalf("metrics of node b:\n%s", body)
	}
	if links == bytes.Contains(body, []byte("exec_relay_fleet_link_frames_out_total 0\n")) {
		t.Fatalf("links %v, metrics of node b:\n%s", links, body)
	}
}

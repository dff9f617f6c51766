package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/server"
)

func parseSecurity(t *testing.T, args ...string) (*securityFlags, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s := addSecurityFlags(fs)
	return s, fs.Parse(args)
}

// writeCert writes a self-signed certificate and its key for 127.0.0.1.
func writeCert(t *testing.T, dir string) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

func TestSecurityFlagsApply(t *testing.T) {
	saved := jsonrpc.DefaultLimits
	t.Cleanup(func() { jsonrpc.DefaultLimits = saved })

	dir := t.TempDir()
	tok := filepath.Join(dir, "tok")
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(tok, []byte("  tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte(strings.Repeat("s", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := writeCert(t, dir)
	const loop = "ws://127.0.0.1:0"

	tests := []struct {
		name   string
		listen string
		args   []string
		want   string // error text; "" means success
		check  func(t *testing.T, cfg *server.Config)
	}{
		{"defaults", loop, nil, "", func(t *testing.T, cfg *server.Config) {
			if cfg.Authenticate != nil || cfg.TLSConfig != nil {
				t.Error("auth or TLS set by default")
			}
			if cfg.MaxMessageBytes != 64<<20 || cfg.MaxProcesses != 4096 || cfg.MaxHandles != 128 ||
				cfg.MaxSessions != 10240 || cfg.MaxConnections != 10240 || cfg.MaxFileBytes != 512<<20 ||
				cfg.MaxIncomingBytes != 1<<30 || cfg.MaxRetainedBytes != 1<<30 || cfg.MaxStdinBytes != 256<<20 {
				t.Errorf("limits %+v", cfg)
			}
		}},
		{"stdio without auth", "stdio", nil, "", nil},
		{"auth flag without mode", loop, []string{"--ws-token-file", tok}, "websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`", nil},
		{"auth on stdio", "stdio", []string{"--ws-auth", "capability-token", "--ws-token-file", tok}, "WebSocket auth requires a WebSocket listener, not stdio", nil},
		{"auth config before stdio", "stdio", []string{"--ws-auth", "capability-token"}, "`--ws-token-file` or `--ws-token-sha256` is required when `--ws-auth capability-token` is set", nil},
		{"empty digest", loop, []string{"--ws-auth", "capability-token", "--ws-token-sha256", ""}, "--ws-token-sha256 must be a 64-character hex SHA-256 digest", nil},
		{"empty token file", loop, []string{"--ws-auth", "capability-token", "--ws-token-file", ""}, "a value is required for '--ws-token-file <PATH>' but none was supplied", nil},
		{"zero skew with capability", loop, []string{"--ws-auth", "capability-token", "--ws-token-file", tok, "--ws-max-clock-skew-seconds", "0"}, "`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, and `--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer-token`", nil},
		{"capability token", loop, []string{"--ws-auth", "capability-token", "--ws-token-file", tok}, "", func(t *testing.T, cfg *server.Config) {
			r, _ := http.NewRequest("GET", "http://x/", nil)
			if err := cfg.Authenticate(r); err == nil || err.Error() != "missing websocket bearer token" {
				t.Errorf("no token: %v", err)
			}
			r.Header.Set("Authorization", "Bearer tok")
			if err := cfg.Authenticate(r); err != nil {
				t.Errorf("good token: %v", err)
			}
		}},
		{"signed with audiences", loop, []string{"--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", secret, "--ws-audience", "a", "--ws-audience", `["b","c"]`, "--ws-max-clock-skew-seconds", "5"}, "", func(t *testing.T, cfg *server.Config) {
			if cfg.Authenticate == nil {
				t.Error("no check")
			}
		}},
		{"non-loopback without auth", "ws://0.0.0.0:0", nil, "refusing to listen on ws://0.0.0.0:0 without authentication", nil},
		{"non-loopback v6 without auth", "ws://[::]:0", nil, "refusing to listen on ws://[::]:0 without authentication", nil},
		{"non-loopback insecure", "ws://0.0.0.0:0", []string{"--insecure-no-auth"}, "", nil},
		{"non-loopback with auth", "ws://0.0.0.0:0", []string{"--ws-auth", "capability-token", "--ws-token-file", tok}, "", nil},
		{"loopback v6", "ws://[::1]:0", nil, "", nil},
		{"mapped loopback", "ws://[::ffff:127.0.0.1]:0", nil, "", nil},
		{"insecure with auth", loop, []string{"--insecure-no-auth", "--ws-auth", "capability-token", "--ws-token-file", tok}, "--insecure-no-auth contradicts --ws-auth: give one or the other", nil},
		{"tls", loop, []string{"--tls-cert", cert, "--tls-key", key}, "", func(t *testing.T, cfg *server.Config) {
			if cfg.TLSConfig == nil || cfg.TLSConfig.GetCertificate == nil {
				t.Fatal("no TLS config")
			}
			if c, err := cfg.TLSConfig.GetCertificate(nil); err != nil || c == nil || len(c.Certificate) == 0 {
				t.Errorf("no certificate served: %v", err)
			}
		}},
		{"tls half", loop, []string{"--tls-cert", cert}, "--tls-cert and --tls-key must be given together", nil},
		{"tls on stdio", "stdio", []string{"--tls-cert", cert, "--tls-key", key}, "TLS requires a WebSocket listener, not stdio", nil},
		{"tls bad key", loop, []string{"--tls-cert", cert, "--tls-key", tok}, "cannot load --tls-cert", nil},
		{"limits", loop, []string{"--max-message-bytes", "2048", "--max-processes", "3", "--max-handles", "4", "--max-sessions", "5", "--max-connections", "6", "--max-json-depth", "16", "--max-json-values", "1000"}, "", func(t *testing.T, cfg *server.Config) {
			if cfg.MaxMessageBytes != 2048 || cfg.MaxProcesses != 3 || cfg.MaxHandles != 4 || cfg.MaxSessions != 5 || cfg.MaxConnections != 6 {
				t.Errorf("limits %+v", cfg)
			}
			if jsonrpc.DefaultLimits != (jsonrpc.Limits{MaxDepth: 16, MaxValues: 1000}) {
				t.Errorf("json limits %+v", jsonrpc.DefaultLimits)
			}
		}},
		{"message limit too small", loop, []string{"--max-message-bytes", "10"}, "--max-message-bytes must be between 1024 and 4294967296, got 10", nil},
		{"budgets", loop, []string{"--max-message-bytes", "2048", "--max-incoming-bytes", "4096", "--max-retained-bytes", "2000000", "--max-stdin-bytes", "3000000"}, "", func(t *testing.T, cfg *server.Config) {
			if cfg.MaxIncomingBytes != 4096 || cfg.MaxRetainedBytes != 2000000 || cfg.MaxStdinBytes != 3000000 {
				t.Errorf("budgets %d %d %d", cfg.MaxIncomingBytes, cfg.MaxRetainedBytes, cfg.MaxStdinBytes)
			}
		}},
		{"incoming below one message", loop, []string{"--max-incoming-bytes", "1000000"}, "--max-incoming-bytes must be at least --max-message-bytes (67108864), got 1000000", nil},
		{"tiny retained budget", loop, []string{"--max-retained-bytes", "0"}, "--max-retained-bytes must be at least 1048576, got 0", nil},
		{"tiny stdin budget", loop, []string{"--max-stdin-bytes", "100"}, "--max-stdin-bytes must be at least 1048576, got 100", nil},
		{"queue and long polls", loop, []string{"--max-queue-bytes", "1048576", "--max-long-polls", "7", "--message-stall-timeout", "5s"}, "", func(t *testing.T, cfg *server.Config) {
			if cfg.MaxQueueBytes != 1<<20 || cfg.MaxLongPolls != 7 || cfg.MessageStallTimeout != 5*time.Second {
				t.Errorf("queue %d, long polls %d, stall %s", cfg.MaxQueueBytes, cfg.MaxLongPolls, cfg.MessageStallTimeout)
			}
		}},
		{"tiny queue", loop, []string{"--max-queue-bytes", "10"}, "--max-queue-bytes must be between 65536 and 1073741824, got 10", nil},
		{"zero stall timeout", loop, []string{"--message-stall-timeout", "0s"}, "--message-stall-timeout must be positive, got 0s", nil},
		{"zero processes", loop, []string{"--max-processes", "0"}, "--max-processes must be between 1 and 1048576, got 0", nil},
		{"negative connections", loop, []string{"--max-connections", "-1"}, "--max-connections must be between 1 and 1048576, got -1", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jsonrpc.DefaultLimits = saved
			s, err := parseSecurity(t, tc.args...)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			var cfg server.Config
			err = s.apply(tc.listen, &cfg)
			got := ""
			if err != nil {
				got = err.Error()
				if strings.Contains(got, "\n") {
					t.Errorf("error is not one line: %q", got)
				}
			}
			if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
				t.Fatalf("apply error %q, want %q", got, tc.want)
			}
			if tc.check != nil && err == nil {
				tc.check(t, &cfg)
			}
		})
	}
}

func TestSecurityFlagParseErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--ws-max-clock-skew-seconds", "1.5"},
		{"--ws-max-clock-skew-seconds", "-1"},
		{"--ws-max-clock-skew-seconds", "99999999999"},
		{"--ws-audience", ""},
		{"--ws-audience", "[1]"},
		{"--ws-audience", `[""]`},
		{"--max-message-bytes", "lots"},
	} {
		if _, err := parseSecurity(t, args...); err == nil {
			t.Errorf("%q parsed", args)
		}
	}
	s, err := parseSecurity(t, "--ws-audience", "a", "--ws-audience", `["b","c"]`)
	if err != nil || strings.Join(s.audience, ",") != "a,b,c" {
		t.Fatalf("audiences %q, %v", s.audience, err)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/syncbuf"
)

func TestRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "tok")
	os.WriteFile(tok, []byte("t1\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("too-short\n"), 0o600)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte(strings.Repeat("s", 40)+"\n"), 0o600)
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"no auth", []string{"--listen", "127.0.0.1:0"}, "are required"},
		{"one file only", []string{"--listen", "127.0.0.1:0", "--executor-token-file", tok}, "are required"},
		{"insecure off loopback", []string{"--listen", "0.0.0.0:0", "--insecure-no-auth"}, "only on a loopback"},
		{"insecure with files", []string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--executor-token-file", tok, "--harness-token-file", tok}, "conflicts"},
		{"empty token file", []string{"--listen", "127.0.0.1:0", "--executor-token-file", empty, "--harness-token-file", tok}, "no token"},
		{"bad listen", []string{"--listen", "localhost:80"}, "IP:PORT"},
		{"bad public url", []string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--public-url", "ftp://x"}, "PublicURL"},
		{"argument", []string{"--insecure-no-auth", "extra"}, "unexpected argument"},
		{"short url secret", []string{"--insecure-no-auth", "--url-secret-file", short}, "at least 32 bytes"},
		{"missing url secret", []string{"--insecure-no-auth", "--url-secret-file", filepath.Join(dir, "none")}, "no such file"},
		{"peer links without nats", []string{"--insecure-no-auth", "--peer-listen", "127.0.0.1:0"}, "need --nats-url"},
		{"nats without node name", []string{"--insecure-no-auth", "--nats-url", "nats://127.0.0.1:1", "--url-secret-file", secret}, "--node-name is required"},
		{"nats without url secret", []string{"--insecure-no-auth", "--nats-url", "nats://127.0.0.1:1", "--node-name", "a"}, "--url-secret-file is required"},
		{"node name without nats", []string{"--insecure-no-auth", "--node-name", "a"}, "need --nats-url"},
		{"tls cert without key", []string{"--insecure-no-auth", "--tls-cert", tok}, "go together"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), c.args, &out, &errb); code != 2 {
				t.Fatalf("exit %d, want 2; stderr %s", code, errb.String())
			}
			if out.Len() != 0 || !strings.Contains(errb.String(), c.msg) {
				t.Fatalf("stdout %q, stderr %q (want %q)", out.String(), errb.String(), c.msg)
			}
		})
	}
}

func TestServesAndShutsDown(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "tok")
	os.WriteFile(tok, []byte("t1\n"), 0o600)
	pr, pw := io.Pipe()
	var stderr syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--executor-token-file", tok, "--harness-token-file", tok}, pw, &stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSpace(line)
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("first line %q", line)
	}
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("readyz %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("POST", base+"/cloud/environment/E/register", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer wrong")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("register with a wrong token: %d", resp.StatusCode)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d; stderr %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no shutdown")
	}
	if !strings.Contains(stderr.String(), "shutting down") {
		t.Fatalf("stderr %q", stderr.String())
	}
}

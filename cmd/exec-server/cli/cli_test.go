package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/cmd/exec-server/cli"
	"github.com/execgo/exec-server/internal/test/testbin"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// serverURL is a websocket server started once for the package's tests
// from this project's server binary; empty when it cannot be built.
var (
	serverURL string
	tokenURL  string // a server that requires the token in tokenFile
	tokenFile string
	tlsURL    string // a wss:// server with a self-signed certificate
	tlsCAFile string // that certificate
	noServer  error
	bin       string // the exec-server binary
)

func TestMain(m *testing.M) {
	flag.Parse()
	removeState := testbin.SandboxState()
	dir, err := os.MkdirTemp("", "exec-server-cli-test-")
	if err != nil {
		panic(err)
	}
	var procs []*exec.Cmd
	func() {
		// EXEC_SERVER_TEST_BIN tests against a binary built elsewhere
		// (a release build, or while the server package is mid-change).
		bin = os.Getenv("EXEC_SERVER_TEST_BIN")
		if bin == "" {
			if bin, err = testbin.ExecServer(); err != nil {
				noServer = err
				return
			}
		}
		tokenFile = filepath.Join(dir, "token")
		if err := os.WriteFile(tokenFile, []byte("t0ken\n"), 0o600); err != nil {
			noServer = err
			return
		}
		certFile, keyFile, err := selfSignedCert(dir)
		if err != nil {
			noServer = err
			return
		}
		tlsCAFile = certFile
		for _, extra := range [][]string{nil, {"--ws-auth", "capability-token", "--ws-token-file", tokenFile}, {"--tls-cert", certFile, "--tls-key", keyFile}} {
			cmd := exec.Command(bin, append([]string{"--listen", "ws://127.0.0.1:0"}, extra...)...)
			cmd.Dir = dir
			dieWithTest(cmd)
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				noServer = err
				return
			}
			procs = append(procs, cmd)
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				noServer = fmt.Errorf("server printed no URL: %v", err)
				return
			}
			switch {
			case extra == nil:
				serverURL = strings.TrimSpace(line)
			case extra[0] == "--ws-auth":
				tokenURL = strings.TrimSpace(line)
			default:
				tlsURL = strings.TrimSpace(line)
			}
		}
	}()
	code := m.Run()
	for _, p := range procs {
		p.Process.Kill()
		p.Wait()
	}
	os.RemoveAll(dir)
	removeState()
	os.Exit(code)
}

func needServer(t *testing.T) {
	t.Helper()
	if noServer != nil {
		t.Skipf("no server: %v", noServer)
	}
}

var reconnectNotice = regexp.MustCompile(`(?m)^exec-server [a-z]+: (connection lost.*; reconnecting… .*|reconnected; the session resumed)\n`)

// run runs one subcommand in-process and renders the transcript that the
// golden files hold, with the URL and dir replaced by $URL and $DIR.
func run(t *testing.T, dir, stdin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := cli.Main(ctx, args[0], args[1:], strings.NewReader(stdin), &stdout, &stderr)
	norm := func(s string) string {
		// Whether this warning (a server without process/closeStdin)
		// comes before the process exits is a race; it is not part of
		// the transcript.
		s = strings.ReplaceAll(s, "exec-server exec: warning: end of input not forwarded: the server cannot close a process's stdin\n", "")
		// A reconnect is transparent (a loaded machine sees one now and
		// then); its notices are not part of the transcript either.
		s = reconnectNotice.ReplaceAllString(s, "")
		if serverURL != "" {
			s = strings.ReplaceAll(s, serverURL, "$URL")
		}
		if tokenURL != "" {
			s = strings.ReplaceAll(s, tokenURL, "$TOKEN_URL")
		}
		if tlsURL != "" {
			s = strings.ReplaceAll(s, tlsURL, "$TLS_URL")
			s = strings.ReplaceAll(s, strings.TrimPrefix(tlsURL, "wss://"), "$TLS_HOST")
			s = strings.ReplaceAll(s, tlsCAFile, "$CA_FILE")
		}
		if dir != "" {
			s = strings.ReplaceAll(s, dir, "$DIR")
		}
		return s
	}
	var b strings.Builder
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	fmt.Fprintf(&b, "$ exec-server %s\nexit %d\n-- stdout --\n%s-- stderr --\n%s", norm(strings.Join(quoted, " ")), code, norm(stdout.String()), norm(stderr.String()))
	return b.String(), code
}

// shellQuote quotes a for a POSIX shell when it needs it.
func shellQuote(a string) string {
	if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:@%+$") == "" {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// golden compares got with testdata/NAME.golden (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from its golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestUsageErrors(t *testing.T) {
	// No server needed: these fail before connecting.
	t.Setenv("EXEC_SERVER_URL", "")
	t.Setenv("EXEC_SERVER_TOKEN", "")
	var all strings.Builder
	for _, args := range [][]string{
		{"exec", "--nope"},
		{"cat", "-h"},
		{"exec", "--url", "ws://127.0.0.1:1"},
		{"exec", "--", "true"},
		{"exec", "--url", "http://x", "--", "true"},
		{"exec", "--url", "ws://127.0.0.1:1", "-e", "=V", "--", "true"},
		{"exec", "--url", "ws://127.0.0.1:1", "--cwd", "relative", "--", "true"},
		{"exec", "--url", "ws://127.0.0.1:1", "-w", "relative", "true"},
		{"exec", "-url", "ws://127.0.0.1:1", "-cwd", "relative", "true"},
		{"exec", "--url", "ws://127.0.0.1:1", "--env-file", "/nonexistent/env", "true"},
		{"exec", "--url", "ws://127.0.0.1:1", "--detach-keys", "ctrl-1", "true"},
		{"exec", "--url", "ws://127.0.0.1:1", "--timeout", "-1s", "true"},
		{"exec", "--url", "ws://127.0.0.1:1", "-x", "true"},
		{"exec", "-h"},
		{"ls", "--url", "ws://127.0.0.1:1", "-la", "relative"},
		{"cp", "-h"},
		{"cp", "--url", "ws://127.0.0.1:1", "a", "b"},
		{"cp", "--url", "ws://127.0.0.1:1", "only-one"},
		{"cp", "--url", "ws://127.0.0.1:1", ":relative", "b"},
		{"ls", "--url", "ws://127.0.0.1:1", "relative"},
		{"cat", "--url", "ws://127.0.0.1:1"},
		{"frobnicate"},
	} {
		out, code := run(t, "", "", args...)
		want := 2
		if args[len(args)-1] == "-h" {
			want = 0
		}
		if code != want {
			t.Errorf("%v: exit %d, want %d", args, code, want)
		}
		all.WriteString(out)
	}
	golden(t, "usage_errors", all.String())
}

func TestExec(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	var all strings.Builder
	cases := []struct {
		stdin string
		args  []string
		code  int
	}{
		{"", []string{"exec", "--url", serverURL, "--", "sh", "-c", "echo out; echo err >&2; exit 3"}, 3},
		{"", []string{"exec", "--url", serverURL, "-e", "GREETING=hello", "-e", "X=1=2", "--", "sh", "-c", `echo "$GREETING $X"`}, 0},
		{"", []string{"exec", "--url", serverURL, "--cwd", dir, "pwd"}, 0},
		{"", []string{"exec", "--url", serverURL, "--env-inherit", "none", "-e", "ONLY=this", "--", "/bin/sh", "-c", "env | grep -v '^PWD=\\|^SHLVL=\\|^_=' | sort"}, 0},
		{"abc\ndef\n", []string{"exec", "--url", serverURL, "-i", "--", "head", "-n", "2"}, 0},
		{"one\ntwo\nthree\n", []string{"exec", "--url", serverURL, "-i", "--", "wc", "-l"}, 0},
		{"", []string{"exec", "--url", serverURL, "-t", "--", "sh", "-c", "test -t 1 && echo on a terminal"}, 0},
		{"hi\n", []string{"exec", "--url", serverURL, "-it", "--", "sh", "-c", "read x; echo got $x"}, 0},
		{"", []string{"exec", "--url", serverURL, "--", "sh", "-c", "kill -KILL $$"}, 137},
		{"", []string{"exec", "--url", serverURL, "--", "no-such-command-xyz"}, 127},
		{"", []string{"exec", "--url", serverURL, "--", dir}, 126},
		{"", []string{"exec", "--url", serverURL, "--cwd", dir + "/missing", "--", "true"}, 127},
		{"", []string{"exec", "--url", tokenURL, "--", "true"}, 255},
		{"", []string{"exec", "--url", tokenURL, "--token", "wrong", "--", "true"}, 255},
		{"", []string{"exec", "--url", tokenURL, "--token-file", tokenFile, "--", "echo", "authorized"}, 0},
		{"", []string{"exec", "--url", tlsURL, "--", "true"}, 255},
		{"", []string{"exec", "--url", tlsURL, "--ca-file", tlsCAFile, "--", "echo", "over wss"}, 0},
	}
	for _, tc := range cases {
		out, code := run(t, dir, tc.stdin, tc.args...)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, code, tc.code, out)
		}
		all.WriteString(strings.ReplaceAll(out, tokenFile, "$TOKEN_FILE"))
	}
	golden(t, "exec", all.String())
}

func TestFiles(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	if out, _ := run(t, dir, "", "ls", "--url", serverURL, "/"); strings.Contains(out, "does not implement") {
		t.Skipf("the server does not implement the fs methods yet: %s", out)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(dir+"/src/sub", 0o755))
	must(os.WriteFile(dir+"/src/a.txt", []byte("alpha\n"), 0o644))
	must(os.WriteFile(dir+"/src/sub/b.txt", []byte("beta\n"), 0o644))
	must(os.WriteFile(dir+"/src/.hidden", []byte("h\n"), 0o644))
	big := make([]byte, 3<<20+7)
	rand.Read(big)
	must(os.WriteFile(dir+"/big.bin", big, 0o644))
	must(os.MkdirAll(dir+"/remote", 0o755))
	must(os.MkdirAll(dir+"/back", 0o755))

	var all strings.Builder
	step := func(stdin string, wantCode int, args ...string) {
		t.Helper()
		out, code := run(t, dir, stdin, args...)
		if code != wantCode {
			t.Errorf("%v: exit %d, want %d\n%s", args, code, wantCode, out)
		}
		all.WriteString(out)
	}
	u := serverURL
	step("", 0, "cp", "--url", u, dir+"/src/a.txt", ":"+dir+"/remote/")
	step("", 0, "cp", "--url", u, "-r", dir+"/src", ":"+dir+"/remote/tree")
	step("", 0, "cp", "--url", u, dir+"/big.bin", ":"+dir+"/remote/big.bin")
	step("piped\n", 0, "cp", "--url", u, "-", ":"+dir+"/remote/piped.txt")
	step("", 0, "ls", "--url", u, ":"+dir+"/remote")
	step("", 0, "ls", "--url", u, "-a", dir+"/remote/tree")
	step("", 0, "cat", "--url", u, ":"+dir+"/remote/a.txt", ":"+dir+"/remote/piped.txt")
	step("", 0, "cp", "--url", u, ":"+dir+"/remote/big.bin", dir+"/back/big.bin")
	step("", 0, "cp", "--url", u, "-r", ":"+dir+"/remote/tree", dir+"/back/tree")
	step("", 0, "cp", "--url", u, ":"+dir+"/remote/a.txt", ":"+dir+"/remote/a-copy.txt")
	step("", 0, "cp", "--url", u, ":"+dir+"/remote/a.txt", "-")
	step("", 1, "cat", "--url", u, ":"+dir+"/remote/missing")
	step("", 1, "cp", "--url", u, dir+"/src", ":"+dir+"/remote/x")
	step("", 1, "ls", "--url", u, ":"+dir+"/missing")
	golden(t, "files", all.String())

	if got, _ := os.ReadFile(dir + "/back/big.bin"); !bytes.Equal(got, big) {
		t.Errorf("big.bin did not survive the round trip (%d bytes back)", len(got))
	}
	for _, f := range []string{"a.txt", "sub/b.txt", ".hidden"} {
		want, _ := os.ReadFile(dir + "/src/" + f)
		if got, err := os.ReadFile(dir + "/back/tree/" + f); err != nil || !bytes.Equal(got, want) {
			t.Errorf("back/tree/%s = %q, %v; want %q", f, got, err, want)
		}
	}
	if got, _ := os.ReadFile(dir + "/remote/a-copy.txt"); string(got) != "alpha\n" {
		t.Errorf("remote-to-remote copy: %q", got)
	}
}

// brokenPipe accepts n bytes, then fails as a closed pipe does.
type brokenPipe struct{ n int }

func (b *brokenPipe) Write(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, syscall.EPIPE
	}
	k := min(len(p), b.n)
	b.n -= k
	if k < len(p) {
		return k, syscall.EPIPE
	}
	return k, nil
}

// `exec-server exec -- yes | head -1`: when our stdout closes, the remote
// command is terminated and we exit as a pipeline member would (141).
func TestExecStdoutClosed(t *testing.T) {
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	code := cli.Main(ctx, "exec", []string{"--url", serverURL, "--", "yes"}, strings.NewReader(""), &brokenPipe{n: 10}, &stderr)
	if code != 141 {
		t.Errorf("exit %d (stderr %q), want 141", code, stderr.String())
	}
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key into dir.
func selfSignedCert(dir string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "exec-server test"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

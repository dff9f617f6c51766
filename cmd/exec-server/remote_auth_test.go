package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/codexref"
)

// regRequest is what a registry double keeps of a request: the parts the
// reference and this executor must agree on. Header values other than the
// credential's are reduced to their names; the body to its JSON shape.
type regRequest struct {
	Method, Path  string
	Headers       []string // lower-case names, minus transport details
	Authorization string
	AccountID     string
	BodyShape     string
	// Check is what the double verified of a signed request (Agent
	// Identity: the task registration's and the assertion's signatures).
	Check string
}

// recorder is a registry double over TLS and over plain http that records
// each request and answers 500, so that an executor exits after its first
// register (a 500 is not retried). GET …/wham/config/bundle, the account
// policy the reference 0.171 loads in --chatgpt-token-stdin mode, gets {}.
type recorder struct {
	tls, plain *httptest.Server
	caFile     string
	mu         sync.Mutex
	reqs       []regRequest
	hold       chan struct{} // when not nil, register waits for it (or the client's end)
	seen       chan struct{} // gets a value (if there is room) for each request recorded

	agent      agentDouble
	taskStatus int // the Agent task registration's answer status (0: 200)
}

// transportHeaders are set by each HTTP stack its own way.
var transportHeaders = map[string]bool{"accept-encoding": true, "content-length": true, "host": true, "user-agent": true, "connection": true}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{seen: make(chan struct{}, 1), agent: agentFixture()}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		rr := regRequest{Method: req.Method, Path: req.URL.Path, Authorization: req.Header.Get("Authorization"), AccountID: req.Header.Get("Chatgpt-Account-Id"), BodyShape: jsonShape(body)}
		for k := range req.Header {
			if k = strings.ToLower(k); !transportHeaders[k] {
				rr.Headers = append(rr.Headers, k)
			}
		}
		sort.Strings(rr.Headers)
		if strings.HasSuffix(req.URL.Path, "/oauth/token") {
			r.mu.Lock()
			r.reqs = append(r.reqs, rr)
			r.mu.Unlock()
			json.NewEncoder(w).Encode(map[string]string{"id_token": freshTok, "access_token": freshTok, "refresh_token": "r2"})
			return
		}
		if strings.HasSuffix(req.URL.Path, "/wham/config/bundle") {
			io.WriteString(w, "{}")
			return
		}
		if strings.HasSuffix(req.URL.Path, "/agent-identities/jwks") {
			r.mu.Lock()
			r.reqs = append(r.reqs, rr)
			r.mu.Unlock()
			w.Write(r.agent.jwks)
			return
		}
		if strings.HasSuffix(req.URL.Path, "/task/register") {
			rr.Check = r.agent.checkTaskRegistration(body)
			r.mu.Lock()
			r.reqs = append(r.reqs, rr)
			status := r.taskStatus
			r.mu.Unlock()
			if status != 0 {
				w.WriteHeader(status)
				io.WriteString(w, `{"error":{"code":"double","message":"task refused"}}`)
				return
			}
			io.WriteString(w, `{"task_id":"task-9"}`)
			return
		}
		if strings.HasPrefix(rr.Authorization, "AgentAssertion ") {
			rr.Authorization = "AgentAssertion " + r.agent.checkAssertion(strings.TrimPrefix(rr.Authorization, "AgentAssertion "))
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, rr)
		hold := r.hold
		r.mu.Unlock()
		select {
		case r.seen <- struct{}{}:
		default:
		}
		if hold != nil {
			select {
			case <-hold:
			case <-req.Context().Done():
			}
		}
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"code":"double","message":"recorded"}}`)
	})
	// A CA and a leaf it signs: rustls (the reference) does not accept a
	// self-signed leaf such as httptest's as its own trust anchor.
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "registry double CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafT := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafT, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	r.tls = httptest.NewUnstartedServer(h)
	r.tls.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}}
	r.tls.StartTLS()
	r.plain = httptest.NewServer(h)
	t.Cleanup(func() {
		r.mu.Lock()
		if r.hold != nil {
			close(r.hold)
			r.hold = nil
		}
		r.mu.Unlock()
		r.tls.Close()
		r.plain.Close()
	})
	r.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(r.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *recorder) take() []regRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

// jsonShape is a JSON value with every string replaced by "s" and every
// number by 0: the register body's key is fresh each time.
func jsonShape(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(data, &v) != nil {
		return "not json"
	}
	var shape func(any) any
	shape = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = shape(e)
			}
			return x
		case []any:
			for i, e := range x {
				x[i] = shape(e)
			}
			return x
		case string:
			if x == "noise_hybrid_ik_v1" || strings.HasPrefix(x, "Noise_") {
				return x // constants stay
			}
			return "s"
		case float64:
			return 0
		}
		return v
	}
	b, _ := json.Marshal(shape(v))
	return string(b)
}

// testJWT is an unsigned-looking compact JWT with claims (the executor and
// the reference only decode it).
func testJWT(claims map[string]any) string {
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	c, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding.EncodeToString
	return enc(h) + "." + enc(c) + "." + enc([]byte("sig"))
}

// freshTok is the access token the double's token endpoint hands out.
var freshTok = testJWT(map[string]any{"exp": float64(time.Now().Add(24 * time.Hour).Unix()), "fresh": true})

type authCase struct {
	name     string
	tls      bool // the https double, else the plain loopback one
	url      string
	args     []string
	env      []string
	stdin    string
	authJSON string
	code     int    // exit status
	refusal  string // the reference's refusal text, "" when it registers
	want     *regRequest
	refresh  bool         // a token refresh request comes before want
	pre      []regRequest // requests before want (or before the refusal)
	task     int          // the Agent task registration's status (0: 200)
}

func authCases() []authCase {
	exp := float64(time.Now().Add(time.Hour).Unix())
	claimTok := testJWT(map[string]any{"exp": exp, "https://api.openai.com/auth": map[string]any{"chatgpt_account_id": "acct-claim"}})
	bareTok := testJWT(map[string]any{"exp": exp})
	expiredTok := testJWT(map[string]any{"exp": float64(time.Now().Add(-time.Hour).Unix()), "https://api.openai.com/auth": map[string]any{"chatgpt_account_id": "acct-claim"}})
	idTok := testJWT(map[string]any{"exp": exp, "email": "a@example.com"})
	lr := time.Now().UTC().Format(time.RFC3339)
	signIn := func(tokens map[string]any, lastRefresh bool) string {
		m := map[string]any{"OPENAI_API_KEY": nil, "tokens": tokens}
		if lastRefresh {
			m["last_refresh"] = lr
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	full := map[string]any{"id_token": idTok, "access_token": bareTok, "refresh_token": "r", "account_id": "acct-file"}
	without := func(k string) map[string]any {
		m := map[string]any{}
		for kk, v := range full {
			if kk != k {
				m[kk] = v
			}
		}
		return m
	}
	hdrs := []string{"accept", "authorization", "content-type"}
	hdrsAcct := []string{"accept", "authorization", "chatgpt-account-id", "content-type"}
	reg := func(auth, acct string) *regRequest {
		h := hdrs
		if acct != "" {
			h = hdrsAcct
		}
		return &regRequest{Method: "POST", Path: "/cloud/environment/env-1/register", Headers: h, Authorization: auth, AccountID: acct,
			BodyShape: `{"executor_public_key":{"mlkem768_public_key":"s","suite":"Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256","x25519_public_key":"s"},"security_profile":"noise_hybrid_ik_v1"}`}
	}
	bearer := []string{"--registration-bearer-stdin"}
	cg := []string{"--chatgpt-token-stdin"}
	cases := []authCase{
		{name: "api key", env: []string{"CODEX_API_KEY=k-1"}, code: 1, want: reg("Bearer k-1", "")},
		{name: "bearer stdin https", tls: true, args: bearer, stdin: "a.b-c_d~e+f/g=\n", code: 1, want: reg("Bearer a.b-c_d~e+f/g=", "")},
		{name: "bearer stdin crlf beats api key", args: bearer, env: []string{"CODEX_API_KEY=k-1"}, stdin: "brr-Z9q\r\nignored\n", code: 1, want: reg("Bearer brr-Z9q", "")},
		{name: "bearer 16383 bytes", args: bearer, stdin: strings.Repeat("a", 16383) + "\n", code: 1, want: reg("Bearer "+strings.Repeat("a", 16383), "")},
		{name: "bearer empty", args: bearer, stdin: "\n", code: 1, refusal: "invalid registration bearer"},
		{name: "bearer with a space", args: bearer, stdin: "be ar\n", code: 1, refusal: "invalid registration bearer"},
		{name: "bearer without newline", args: bearer, stdin: "brr-Z9q", code: 1, refusal: "expected a newline-terminated registration bearer of at most 16 KiB"},
		{name: "bearer 16384 bytes", args: bearer, stdin: strings.Repeat("a", 16384) + "\n", code: 1, refusal: "expected a newline-terminated registration bearer of at most 16 KiB"},
		{name: "bearer plain http elsewhere", url: "http://registry.invalid", args: bearer, stdin: "brr-Z9q\n", code: 1, refusal: "requires https for non-loopback endpoints"},
		{name: "chatgpt token claim", tls: true, args: cg, stdin: claimTok + "\n", code: 1, want: reg("Bearer "+claimTok, "acct-claim")},
		{name: "chatgpt token matching account", tls: true, args: append(cg, "--chatgpt-account-id", "acct-claim"), stdin: claimTok + "\n", code: 1, want: reg("Bearer "+claimTok, "acct-claim")},
		{name: "chatgpt token account flag only", tls: true, args: append(cg, "--chatgpt-account-id", "given"), stdin: bareTok + "\n", code: 1, want: reg("Bearer "+bareTok, "given")},
		{name: "chatgpt token expired is sent", tls: true, args: cg, stdin: expiredTok + "\n", code: 1, want: reg("Bearer "+expiredTok, "acct-claim")},
		{name: "chatgpt token wrong account", tls: true, args: append(cg, "--chatgpt-account-id", "other"), stdin: claimTok + "\n", code: 1, refusal: "--chatgpt-account-id does not match the token"},
		{name: "chatgpt token no account", tls: true, args: cg, stdin: bareTok + "\n", code: 1, refusal: "token has no ChatGPT account ID; supply --chatgpt-account-id"},
		{name: "chatgpt token not a JWT", tls: true, args: cg, stdin: "notajwt\n", code: 1, refusal: "invalid ChatGPT access token"},
		{name: "chatgpt token no newline", tls: true, args: cg, stdin: claimTok, code: 1, refusal: "expected a bounded, newline-terminated ChatGPT access token"},
		{name: "chatgpt token http loopback", args: cg, stdin: claimTok + "\n", code: 1, refusal: "ChatGPT token registry URLs must use HTTPS without userinfo or fragments"},
		{name: "chatgpt token and bearer", tls: true, args: append(cg, "--registration-bearer-stdin"), stdin: claimTok + "\n", code: 2, refusal: "cannot be used with"},
		{name: "auth.json sign-in", authJSON: signIn(full, true), code: 1, want: reg("Bearer "+bareTok, "acct-file")},
		{name: "auth.json without account", authJSON: signIn(without("account_id"), true), code: 1, want: reg("Bearer "+bareTok, "")},
		{name: "auth.json api key", authJSON: `{"OPENAI_API_KEY":"sk-file"}`, code: 1, want: reg("Bearer sk-file", "")},
		{name: "api key beats auth.json", authJSON: signIn(full, true), env: []string{"CODEX_API_KEY=k-1"}, code: 1, want: reg("Bearer k-1", "")},
		{name: "auth.json expired is refreshed", authJSON: signIn(map[string]any{"id_token": idTok, "access_token": expiredTok, "refresh_token": "r", "account_id": "acct-file"}, true),
			env: []string{"CODEX_REFRESH_TOKEN_URL_OVERRIDE={tls}/oauth/token"}, code: 1, refresh: true, want: reg("Bearer "+freshTok, "acct-file")},
		{name: "auth.json expiring in 60 s is refreshed", authJSON: signIn(map[string]any{"id_token": idTok, "access_token": testJWT(map[string]any{"exp": float64(time.Now().Add(time.Minute).Unix())}), "refresh_token": "r", "account_id": "acct-file"}, true),
			env: []string{"CODEX_REFRESH_TOKEN_URL_OVERRIDE={tls}/oauth/token"}, code: 1, refresh: true, want: reg("Bearer "+freshTok, "acct-file")},
		{name: "auth.json without refresh token", authJSON: signIn(without("refresh_token"), true), code: 1, refusal: "requires ChatGPT authentication or API key authentication; run `codex login` or set CODEX_API_KEY"},
		{name: "auth.json id_token not a JWT", authJSON: signIn(map[string]any{"id_token": "x", "access_token": bareTok, "refresh_token": "r"}, true), code: 1, refusal: "requires ChatGPT authentication or API key authentication"},
		{name: "auth.json without last_refresh", authJSON: signIn(full, false), code: 1, refusal: "executor credential has no usable bearer"},
		{name: "auth.json empty", authJSON: `{}`, code: 1, refusal: "executor credential has no usable bearer"},
	}
	return append(cases, agentCases(reg)...)
}

type authRun struct {
	code   int
	stderr string
	reqs   []regRequest
}

// runAuthCase runs one executor (ours, or the reference when ref is not
// "") on c against r, with a fresh CODEX_HOME under home.
func runAuthCase(t *testing.T, r *recorder, c authCase, ref, home string) authRun {
	t.Helper()
	codexHome, err := os.MkdirTemp(home, "h-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(codexHome)
	if c.authJSON != "" {
		if err := os.WriteFile(filepath.Join(codexHome, "auth.json"), []byte(c.authJSON), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	url := c.url
	if url == "" {
		url = r.plain.URL
		if c.tls {
			url = r.tls.URL
		}
	}
	args := append([]string{"--remote", url, "--environment-id", "env-1"}, c.args...)
	var cmd *exec.Cmd
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if ref != "" {
		pre := []string{"exec-server"}
		if !slices.Contains(c.args, "--use-agent-identity-auth") {
			// The account policy of --chatgpt-token-stdin comes from
			// here. Not with Agent Identity, which the reference refuses
			// ("unavailable", nothing sent) under a chatgpt_base_url
			// other than production's or staging's.
			pre = append(pre, "-c", fmt.Sprintf("chatgpt_base_url=%q", r.tls.URL+"/backend-api/"))
		}
		args = append(pre, args...)
		cmd = exec.CommandContext(ctx, ref, args...)
	} else {
		cmd = exec.CommandContext(ctx, binary, args...)
		cmd.Env = append(cmd.Env, serverEnv)
	}
	cmd.Dir = codexHome
	// Only what the case gives: no CODEX_API_KEY or other credential
	// from the test's own environment.
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"), "HOME="+codexHome, "CODEX_HOME="+codexHome,
		"SSL_CERT_FILE="+r.caFile, "CODEX_CA_CERTIFICATE="+r.caFile, "RUST_BACKTRACE=0")
	for _, kv := range c.env {
		kv = strings.ReplaceAll(kv, "{tls}", r.tls.URL)
		cmd.Env = append(cmd.Env, strings.ReplaceAll(kv, "{plain}", r.plain.URL))
	}
	r.mu.Lock()
	r.taskStatus = c.task
	r.mu.Unlock()
	cmd.Stdin = strings.NewReader(c.stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return authRun{code: code, stderr: stderr.String(), reqs: r.take()}
}

func checkAuthRun(t *testing.T, who string, c authCase, got authRun) {
	t.Helper()
	if got.code != c.code {
		t.Errorf("%s: exit %d, want %d; stderr %q", who, got.code, c.code, got.stderr)
	}
	if len(c.pre) > 0 && c.refusal != "" {
		// A retried request counts once. The reference 0.171 retries a
		// refused task registration, and may refuse a token before its
		// JWKS fetch has reached the double (the two run concurrently
		// there): of its requests before a refusal, a prefix is enough.
		var uniq []regRequest
		for _, r := range got.reqs {
			if len(uniq) == 0 || !reflect.DeepEqual(uniq[len(uniq)-1], r) {
				uniq = append(uniq, r)
			}
		}
		n := len(c.pre)
		if who == "reference" {
			n = min(n, len(uniq))
		}
		if len(uniq) != n || (n > 0 && !reflect.DeepEqual(uniq, c.pre[:n])) {
			t.Errorf("%s: requests\n%+v\nwant\n%+v\nstderr %q", who, got.reqs, c.pre, got.stderr)
		}
		got.reqs = nil
	} else if len(c.pre) > 0 {
		n := min(len(c.pre), len(got.reqs))
		if !reflect.DeepEqual(got.reqs[:n], c.pre) {
			t.Errorf("%s: requests\n%+v\nwant first\n%+v\nstderr %q", who, got.reqs, c.pre, got.stderr)
			return
		}
		got.reqs = got.reqs[n:]
	}
	if c.refusal != "" {
		if !strings.Contains(got.stderr, c.refusal) {
			t.Errorf("%s: stderr %q, want the refusal %q", who, got.stderr, c.refusal)
		}
		if len(got.reqs) != 0 {
			t.Errorf("%s: a refused credential still reached the registry: %+v", who, got.reqs)
		}
		return
	}
	if c.refresh {
		want := regRequest{Method: "POST", Path: "/oauth/token", Headers: []string{"accept", "content-type", "originator"},
			BodyShape: `{"client_id":"s","grant_type":"s","refresh_reason":"s","refresh_token":"s"}`}
		if len(got.reqs) == 0 || !reflect.DeepEqual(got.reqs[0], want) {
			t.Errorf("%s: requests\n%+v\nwant first\n%+v", who, got.reqs, want)
			return
		}
		got.reqs = got.reqs[1:]
	}
	if len(got.reqs) != 1 || !reflect.DeepEqual(got.reqs[0], *c.want) {
		t.Errorf("%s: requests\n%+v\nwant one\n%+v\nstderr %q", who, got.reqs, *c.want, got.stderr)
	}
}

// TestRemoteAuthModes: each registry credential source gives the
// reference's register request (method, path, header names, bearer,
// ChatGPT-Account-ID, body shape) or its refusal, before any request.
// With EXEC_SERVER_REFERENCE set (the 0.171 binary) every case also runs
// the reference against the same double and compares the two.
func TestRemoteAuthModes(t *testing.T) {
	r := newRecorder(t)
	home := t.TempDir()
	ref := os.Getenv("EXEC_SERVER_REFERENCE")
	var refHome string
	if ref != "" {
		refHome = codexref.Scratch(t, "exec-server-remote-auth", "home-")
	}
	for _, c := range authCases() {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			ours := runAuthCase(t, r, c, "", home)
			checkAuthRun(t, "ours", c, ours)
			for _, tok := range []string{"k-1", "brr-Z9q", "sk-file", "acct-claim", r.agent.good} {
				if strings.Contains(ours.stderr, tok) && !strings.Contains(c.refusal, tok) {
					t.Errorf("ours: stderr shows the credential %q: %q", tok, ours.stderr)
				}
			}
			if ref == "" {
				return
			}
			theirs := runAuthCase(t, r, c, ref, refHome)
			checkAuthRun(t, "reference", c, theirs)
		})
	}
}

// TestExitOnStdinClose: with --exit-on-stdin-close (or
// CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE=true) the executor exits 0 when its
// stdin ends, even while a registration is still waiting for its answer;
// the reference (EXEC_SERVER_REFERENCE) does the same.
func TestExitOnStdinClose(t *testing.T) {
	r := newRecorder(t)
	r.mu.Lock()
	r.hold = make(chan struct{})
	r.mu.Unlock()
	home := t.TempDir()
	type variant struct {
		who, ref string
		env      []string
		args     []string
	}
	vs := []variant{
		{who: "ours, flag", args: []string{"--exit-on-stdin-close"}},
		{who: "ours, env", env: []string{"CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE=true"}},
		{who: "ours, after a stdin bearer", args: []string{"--exit-on-stdin-close", "--registration-bearer-stdin"}},
	}
	if ref := os.Getenv("EXEC_SERVER_REFERENCE"); ref != "" {
		vs = append(vs, variant{who: "reference, flag", ref: ref, args: []string{"--exit-on-stdin-close"}},
			variant{who: "reference, after a stdin bearer", ref: ref, args: []string{"--exit-on-stdin-close", "--registration-bearer-stdin"}})
		home = codexref.Scratch(t, "exec-server-remote-auth", "home-")
	}
	for _, v := range vs {
		args := append([]string{"--remote", r.plain.URL, "--environment-id", "env-1"}, v.args...)
		var cmd *exec.Cmd
		if v.ref != "" {
			cmd = exec.Command(v.ref, append([]string{"exec-server"}, args...)...)
		} else {
			cmd = exec.Command(binary, args...)
			cmd.Env = append(cmd.Env, serverEnv)
		}
		cmd.Dir = home
		cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"), "HOME="+home, "CODEX_HOME="+home, "CODEX_API_KEY=k-1")
		cmd.Env = append(cmd.Env, v.env...)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		io.WriteString(stdin, "brr-Z9q\nmore input is read and ignored\n")
		select {
		case <-r.seen: // registering, and held there
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("%s: no register request; stderr %q", v.who, stderr.String())
		}
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v after stdin closed; stderr %q", v.who, err, stderr.String())
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%s: still running 60 s after stdin closed", v.who)
		}
		r.take()
	}
}

// The flag's rules: only with --remote; the variable takes true or false.
func TestExitOnStdinCloseFlags(t *testing.T) {
	t.Setenv("CODEX_HOME", t.TempDir())
	cases := []struct {
		args []string
		env  string
		code int
		msg  string
	}{
		{[]string{"--exit-on-stdin-close"}, "", 2, "--exit-on-stdin-close requires --remote"},
		{nil, "true", 2, "--exit-on-stdin-close requires --remote"},
		{[]string{"--remote", "http://127.0.0.1:1", "--environment-id", "E"}, "1", 2, "expected true or false"},
		{[]string{"--chatgpt-token-stdin"}, "", 2, "requires --remote"},
		{[]string{"--use-agent-identity-auth"}, "", 2, "--use-agent-identity-auth requires --remote"},
		{[]string{"--remote", "http://127.0.0.1:1", "--environment-id", "E", "--remote-transport", "direct"}, "", 2, "requires --aws-sigv4"},
		{[]string{"--remote", "http://127.0.0.1:1", "--environment-id", "E", "--executor-credential-stdin"}, "", 2, "not supported yet"},
		{[]string{"forward", "--remote", "http://127.0.0.1:1"}, "", 2, "--connect are required"},
		{[]string{"forward", "--remote", "http://127.0.0.1:1", "--environment-id", "E", "--connect", "http://127.0.0.1:1"}, "", 2, "invalid --connect URL"},
		{[]string{"forward", "--remote", "https://127.0.0.1:1", "--environment-id", "E", "--connect", "ws://127.0.0.1:1", "--chatgpt-token-stdin"}, "", 2, "cannot be used with forward"},
		{[]string{"forward", "--remote", "https://127.0.0.1:1", "--environment-id", "E", "--connect", "ws://127.0.0.1:1", "--aws-sigv4"}, "", 1, "requires --remote-transport direct"},
		{[]string{"forward", "--remote", "https://127.0.0.1:1", "--environment-id", "E", "--connect", "ws://127.0.0.1:1", "--aws-sigv4", "--remote-transport", "direct"}, "", 1, "direct exec-server transport does not support forwarding"},
	}
	for _, c := range cases {
		if c.env != "" {
			t.Setenv("CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE", c.env)
		} else {
			os.Unsetenv("CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE")
		}
		var out, errb bytes.Buffer
		code := run(c.args, strings.NewReader(""), &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v (env %q): exit %d, stderr %q; want %d and %q", c.args, c.env, code, errb.String(), c.code, c.msg)
		}
	}
	// CODEX_ACCESS_TOKEN is never silently ignored for another credential.
	// A child process: run's secretenv keeps what it scrubs for the
	// process's life, past t.Setenv's restore.
	cmd := serverCommand("--remote", "http://127.0.0.1:1", "--environment-id", "E")
	cmd.Env = append(cmd.Env, "CODEX_API_KEY=k-1", "CODEX_ACCESS_TOKEN=jwt")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(errb.String(), "requires --use-agent-identity-auth") {
		t.Errorf("CODEX_ACCESS_TOKEN: %v, %q", err, errb.String())
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/coder/websocket"

	"github.com/execgo/exec-server/internal/test/codexref"
)

// directRequest is what the direct double keeps of a request: method,
// path and query, header names, the SigV4 scope and signed headers, and
// whether the signature verifies with the double's copy of the secret.
type directRequest struct {
	Method, Path  string
	Headers       []string
	Scope         string // Credential=…: key id / region / service
	SignedHeaders string
	Signature     string // "valid" or why not
	Body          string
	Reply         string // for an accepted upgrade: what the executor answered to initialize
}

// directDouble is a registry with direct/register and the direct socket
// on loopback. upgrade decides each upgrade's answer (0: accept, serve
// initialize, then close).
type directDouble struct {
	srv     *httptest.Server
	secrets map[string]string // access key id -> secret
	upgrade func(n int) int
	mu      sync.Mutex
	reqs    []directRequest
	seen    chan struct{}
	ups     int
}

var credRe = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$`)

func newDirectDouble(t *testing.T, upgrade func(n int) int) *directDouble {
	d := &directDouble{secrets: map[string]string{"AKIDEXAMPLE": "secret-example", "AKIDPROFILE": "secret-profile"}, upgrade: upgrade, seen: make(chan struct{}, 64)}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.srv.Close)
	return d
}

// verify recomputes the request's SigV4 signature with the SDK's signer
// over exactly the headers it names as signed.
func (d *directDouble) verify(r *http.Request, body []byte) (scope, signed, verdict string) {
	m := credRe.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		return "", "", "no SigV4 Authorization: " + r.Header.Get("Authorization")
	}
	scope, signed = m[1]+"/"+m[3]+"/"+m[4], m[5]
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return scope, signed, "bad X-Amz-Date"
	}
	c, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	for _, h := range strings.Split(signed, ";") {
		if h != "host" && h != "x-amz-date" {
			c.Header.Set(h, r.Header.Get(h))
		}
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: m[1], SecretAccessKey: d.secrets[m[1]]}, c, hex.EncodeToString(sum[:]), m[4], m[3], at); err != nil {
		return scope, signed, err.Error()
	}
	if c.Header.Get("Authorization") != r.Header.Get("Authorization") {
		return scope, signed, "signature does not verify"
	}
	return scope, signed, "valid"
}

func (d *directDouble) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rr := directRequest{Method: r.Method, Path: r.URL.RequestURI()}
	for k := range r.Header {
		if k = strings.ToLower(k); !transportHeaders[k] && !strings.HasPrefix(k, "sec-websocket-") && k != "upgrade" {
			rr.Headers = append(rr.Headers, k)
		}
	}
	sort.Strings(rr.Headers)
	rr.Scope, rr.SignedHeaders, rr.Signature = d.verify(r, body)
	rr.Body = string(body)
	record := func() {
		d.mu.Lock()
		d.reqs = append(d.reqs, rr)
		d.mu.Unlock()
		select {
		case d.seen <- struct{}{}:
		default:
		}
	}
	if strings.HasSuffix(r.URL.Path, "/direct/register") {
		record()
		fmt.Fprintf(w, `{"environment_id":"env-1","transport":"direct_jsonrpc_v1","registration_id":"reg-1","url":"ws://%s/direct-socket/env-1?sig=abc&x=1"}`, r.Host)
		return
	}
	d.mu.Lock()
	n := d.ups
	d.ups++
	d.mu.Unlock()
	if st := d.upgrade(n); st != 0 {
		record()
		w.WriteHeader(st)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		record()
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	c.Write(ctx, websocket.MessageBinary, []byte(`{"id":1,"method":"initialize","params":{"clientName":"direct-double"}}`))
	typ, msg, err := c.Read(ctx)
	var reply struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	switch {
	case err != nil:
		rr.Reply = "no reply: " + err.Error()
	case json.Unmarshal(msg, &reply) != nil || reply.ID != 1 || len(reply.Result) == 0:
		rr.Reply = "not an initialize result: " + string(msg)
	default:
		rr.Reply = typ.String() + " initialize result"
	}
	record()
	c.Close(websocket.StatusNormalClosure, "")
}

func (d *directDouble) take() []directRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.reqs
	d.reqs, d.ups = nil, 0
	return out
}

type directCase struct {
	name    string
	upgrade func(n int) int
	args    []string
	env     []string
	files   map[string]string // under HOME
	url     string            // default the double's
	code    int               // -1: still running after want requests (killed)
	refusal string
	want    []directRequest
}

func directCases() []directCase {
	reg := directRequest{Method: "POST", Path: "/cloud/environment/env-1/direct/register", Headers: []string{"accept", "authorization", "content-type", "x-amz-date"},
		Scope: "AKIDEXAMPLE/us-east-1/execute-api", SignedHeaders: "content-type;host;x-amz-date", Signature: "valid", Body: `{"transport":"direct_jsonrpc_v1"}`}
	up := directRequest{Method: "GET", Path: "/direct-socket/env-1?sig=abc&x=1", Headers: []string{"authorization", "x-amz-date"},
		Scope: "AKIDEXAMPLE/us-east-1/execute-api", SignedHeaders: "host;x-amz-date", Signature: "valid"}
	served := up
	served.Reply = "MessageText initialize result"
	with := func(r directRequest, scope string) directRequest { r.Scope = scope; return r }
	flags := []string{"--remote-transport", "direct", "--aws-sigv4"}
	region := append(flags, "--aws-region", "us-east-1")
	always := func(st int) func(int) int { return func(int) int { return st } }
	return []directCase{
		{name: "serves and redials", upgrade: always(0), args: region, code: -1, want: []directRequest{reg, served, served}},
		{name: "region from the environment", upgrade: always(0), args: flags, env: []string{"AWS_REGION=us-east-1"}, code: -1, want: []directRequest{reg, served}},
		{name: "profile and service", upgrade: always(0), args: append(flags, "--aws-profile", "p1", "--aws-service", "svc-x"),
			files: map[string]string{".aws/credentials": "[p1]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = secret-profile\n", ".aws/config": "[profile p1]\nregion = eu-west-1\n"},
			code:  -1, want: []directRequest{with(reg, "AKIDPROFILE/eu-west-1/svc-x"), with(served, "AKIDPROFILE/eu-west-1/svc-x")}},
		{name: "upgrade 403 is terminal", upgrade: always(403), args: region, code: 1, want: []directRequest{reg, up}},
		{name: "upgrade 410 is terminal", upgrade: always(410), args: region, code: 1, want: []directRequest{reg, up}},
		{name: "upgrade 409 registers again", upgrade: always(409), args: region, code: -1, want: []directRequest{reg, up, reg, up}},
		{name: "upgrade 503 redials", upgrade: always(503), args: region, code: -1, want: []directRequest{reg, up, up}},
		{name: "upgrade 429 then served", upgrade: func(n int) int { return map[bool]int{true: 429}[n == 0] }, args: region, code: -1, want: []directRequest{reg, up, served}},
		{name: "no region", args: flags, code: 1, refusal: "did not resolve a region"},
		{name: "direct without sigv4", args: []string{"--remote-transport", "direct"}, code: 2, refusal: "aws-sigv4"},
		{name: "sigv4 without direct", args: []string{"--aws-sigv4"}, code: 1, refusal: "--aws-sigv4 requires --remote-transport direct"},
		{name: "region without sigv4", args: []string{"--aws-region", "us-east-1"}, code: 2, refusal: "aws-sigv4"},
		{name: "unknown transport", args: []string{"--remote-transport", "bogus", "--aws-sigv4"}, code: 2, refusal: "bogus"},
		{name: "sigv4 and a stdin bearer", args: append(region, "--registration-bearer-stdin"), code: 2, refusal: "cannot be used with"},
		{name: "sigv4 and agent identity", args: append(region, "--use-agent-identity-auth"), code: 2, refusal: "cannot be used with"},
		{name: "plain http elsewhere", url: "http://registry.invalid", args: region, code: 1, refusal: "remote transport requires https for non-loopback endpoints"},
	}
}

// runDirectCase runs one executor (ours, or the reference when ref is not
// "") on c against d until it exits or has made len(c.want) requests.
func runDirectCase(t *testing.T, d *directDouble, c directCase, ref, home string) (code int, stderr string, reqs []directRequest) {
	t.Helper()
	h, err := os.MkdirTemp(home, "h-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(h)
	for name, data := range c.files {
		p := filepath.Join(h, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d.upgrade = c.upgrade
	if d.upgrade == nil {
		d.upgrade = func(int) int { return 0 }
	}
	u := c.url
	if u == "" {
		u = d.srv.URL
	}
	args := append([]string{"--remote", u, "--environment-id", "env-1"}, c.args...)
	var cmd *exec.Cmd
	if ref != "" {
		cmd = exec.Command(ref, append([]string{"exec-server"}, args...)...)
	} else {
		cmd = exec.Command(binary, args...)
		cmd.Env = append(cmd.Env, serverEnv)
	}
	cmd.Dir = h
	// Never the instance metadata service, never the test's own AWS
	// settings: only what the case gives.
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"), "HOME="+h, "CODEX_HOME="+h, "RUST_BACKTRACE=0",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE="+filepath.Join(h, ".aws/config"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(h, ".aws/credentials"))
	if c.files == nil {
		cmd.Env = append(cmd.Env, "AWS_ACCESS_KEY_ID=AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY=secret-example")
	}
	cmd.Env = append(cmd.Env, c.env...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(60 * time.Second)
	var werr error
wait:
	for {
		d.mu.Lock()
		n := len(d.reqs)
		d.mu.Unlock()
		if c.code == -1 && n >= len(c.want) {
			cmd.Process.Kill()
			<-done
			code = -1
			break
		}
		select {
		case werr = <-done:
			var ee *exec.ExitError
			if errors.As(werr, &ee) {
				code = ee.ExitCode()
			} else if werr != nil {
				t.Fatal(werr)
			}
			break wait
		case <-d.seen:
		case <-deadline:
			cmd.Process.Kill()
			<-done
			t.Fatalf("still running after 60 s with %d requests; stderr %q", n, errb.String())
		}
	}
	reqs = d.take()
	if c.code == -1 && len(reqs) > len(c.want) {
		reqs = reqs[:len(c.want)]
	}
	return code, errb.String(), reqs
}

// TestRemoteDirect: --remote-transport direct --aws-sigv4 against a
// loopback double that verifies each SigV4 signature with the SDK's
// signer: registration, the signed upgrade, JSON-RPC served over it,
// redial after close, the terminal, re-registering and retried upgrade
// answers, and the flag refusals. With EXEC_SERVER_REFERENCE every case
// runs on the reference too, and both must match the same expectation.
func TestRemoteDirect(t *testing.T) {
	d := newDirectDouble(t, nil)
	home := t.TempDir()
	ref := os.Getenv("EXEC_SERVER_REFERENCE")
	var refHome string
	if ref != "" {
		refHome = codexref.Scratch(t, "exec-server-remote-direct", "home-")
	}
	for _, c := range directCases() {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			type who struct{ name, bin, home string }
			runs := []who{{"ours", "", home}}
			if ref != "" {
				runs = append(runs, who{"reference", ref, refHome})
			}
			for _, w := range runs {
				code, stderr, reqs := runDirectCase(t, d, c, w.bin, w.home)
				if code != c.code {
					t.Errorf("%s: exit %d, want %d; stderr %q", w.name, code, c.code, stderr)
				}
				if c.refusal != "" && !strings.Contains(stderr, c.refusal) {
					t.Errorf("%s: stderr %q, want %q", w.name, stderr, c.refusal)
				}
				if strings.Contains(stderr, "secret-") {
					t.Errorf("%s: stderr shows the AWS secret: %q", w.name, stderr)
				}
				if len(reqs) != len(c.want) || (len(c.want) > 0 && !reflect.DeepEqual(reqs, c.want)) {
					t.Errorf("%s: requests\n%+v\nwant\n%+v\nstderr %q", w.name, reqs, c.want, stderr)
				}
			}
		})
	}
}

package netproxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	realOpenAI = "sk-proj-abcDEF0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH_ij-kl"
	realGitHub = "ghp_abcdefghijklmnopqrstuvwxyz0123456789AB"
	realMine   = "mytok-1234567890abcdef"
)

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func mustProviders(t *testing.T, custom map[string]ProviderConfig) *Providers {
	t.Helper()
	ps, err := CompileProviders(custom)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestMaskEnv: the built-in variables (the reference's: GitHub cloud,
// OpenAI; GitHub Enterprise only with GH_HOST) and a custom provider's
// are replaced by dummies of the reference's shape, the broker's two
// variables are set, and no real value is left anywhere in the
// environment; a value a custom provider names but does not match is
// removed.
func TestMaskEnv(t *testing.T) {
	ps := mustProviders(t, map[string]ProviderConfig{
		"mine": {Env: []string{"MY_TOKEN", "MY_OTHER"}, Patterns: []string{"mytok-[0-9a-f]{16}"},
			URLPrefixes: []string{"https://api.example.com/v1"}, Auth: []string{AuthBearer}},
	})
	env := []string{"PATH=/bin", "OPENAI_API_KEY=" + realOpenAI, "GITHUB_TOKEN=" + realGitHub,
		"GH_ENTERPRISE_TOKEN=ghp_enterprise0123456789abcdefghijklmnopq", "MY_TOKEN=" + realMine, "MY_OTHER=not-a-match",
		BrokerActiveVar + "=0"}
	out, creds, removed := ps.Mask(env)
	m := envMap(out)
	for _, kv := range out {
		for _, real := range []string{realOpenAI, realGitHub, realMine, "not-a-match"} {
			if strings.Contains(kv, real) {
				t.Errorf("a real value is left: %s", kv)
			}
		}
	}
	if o := m["OPENAI_API_KEY"]; !strings.HasPrefix(o, "sk-proj-masked") || len(o) != len(realOpenAI) {
		t.Errorf("OPENAI_API_KEY dummy %q", o)
	}
	if g := m["GITHUB_TOKEN"]; !regexp.MustCompile(`^ghp_masked[A-Za-z0-9]+$`).MatchString(g) || len(g) != len(realGitHub) {
		t.Errorf("GITHUB_TOKEN dummy %q", g)
	}
	if d := m["MY_TOKEN"]; !regexp.MustCompile(`^mytok-[0-9a-f]{16}$`).MatchString(d) || d == realMine {
		t.Errorf("MY_TOKEN dummy %q", d)
	}
	if m["GH_ENTERPRISE_TOKEN"] != "ghp_enterprise0123456789abcdefghijklmnopq" {
		t.Errorf("GH_ENTERPRISE_TOKEN without GH_HOST is not brokered (as the reference), got %q", m["GH_ENTERPRISE_TOKEN"])
	}
	if _, ok := m["MY_OTHER"]; ok || !slices.Equal(removed, []string{"MY_OTHER"}) {
		t.Errorf("MY_OTHER kept (%v), removed %v", ok, removed)
	}
	if m[BrokerActiveVar] != "1" {
		t.Errorf("%s=%q", BrokerActiveVar, m[BrokerActiveVar])
	}
	var marker [][2]string
	if err := json.Unmarshal([]byte(m[BrokeredCredentialsVar]), &marker); err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"@alias:GITHUB_TOKEN", m["GITHUB_TOKEN"]}, {"@alias:MY_TOKEN", m["MY_TOKEN"]},
		{"@alias:OPENAI_API_KEY", m["OPENAI_API_KEY"]}, {"GITHUB_TOKEN", m["GITHUB_TOKEN"]},
		{"MY_TOKEN", m["MY_TOKEN"]}, {"OPENAI_API_KEY", m["OPENAI_API_KEY"]}}
	if !slices.Equal(marker, want) {
		t.Errorf("marker %v\nwant %v", marker, want)
	}
	if got := creds.Vars(); len(got) != 3 {
		t.Errorf("credentials %v", got)
	}
	// GH_HOST binds the enterprise token to that host.
	out, creds, _ = ps.Mask([]string{"GH_HOST=ghe.corp.example", "GH_ENTERPRISE_TOKEN=ghp_enterprise0123456789abcdefghijklmnopq"})
	if strings.Contains(strings.Join(out, "\n"), "ghp_enterprise") || !creds.Intercepts("ghe.corp.example", 443) {
		t.Errorf("GH_HOST: %v", out)
	}
}

func TestProviderValidation(t *testing.T) {
	ok := ProviderConfig{Env: []string{"K"}, Patterns: []string{"k-[a-z]{8}"}, URLPrefixes: []string{"https://x.example/"}}
	with := func(f func(*ProviderConfig)) ProviderConfig {
		c := ok
		f(&c)
		return c
	}
	for name, c := range map[string]ProviderConfig{
		"no env":          with(func(c *ProviderConfig) { c.Env = nil }),
		"no patterns":     with(func(c *ProviderConfig) { c.Patterns = nil }),
		"no destinations": with(func(c *ProviderConfig) { c.URLPrefixes = nil }),
		"bad env key":     with(func(c *ProviderConfig) { c.Env = []string{"A-B"} }),
		"built-in key":    with(func(c *ProviderConfig) { c.Env = []string{"OPENAI_API_KEY"} }),
		"http remote":     with(func(c *ProviderConfig) { c.URLPrefixes = []string{"http://x.example/"} }),
		"ftp":             with(func(c *ProviderConfig) { c.URLPrefixes = []string{"ftp://x.example/"} }),
		"query":           with(func(c *ProviderConfig) { c.URLPrefixes = []string{"https://x.example/?a=b"} }),
		"userinfo":        with(func(c *ProviderConfig) { c.URLPrefixes = []string{"https://u@x.example/"} }),
		"dot segment":     with(func(c *ProviderConfig) { c.URLPrefixes = []string{"https://x.example/a/../b"} }),
		"glob host":       with(func(c *ProviderConfig) { c.URLPrefixes = []string{"https://x*.example/"} }),
		"empty match":     with(func(c *ProviderConfig) { c.Patterns = []string{"a*"} }),
		"bad regexp":      with(func(c *ProviderConfig) { c.Patterns = []string{"("} }),
		"unknown auth":    with(func(c *ProviderConfig) { c.Auth = []string{"digest"} }),
		"header no name":  with(func(c *ProviderConfig) { c.Auth = []string{AuthHeader} }),
		"name no header":  with(func(c *ProviderConfig) { c.Header = "X-Key" }),
		"prefix alone":    with(func(c *ProviderConfig) { c.Prefix = "Key " }),
		"host key in env": with(func(c *ProviderConfig) { c.URLPrefixFromEnv = "K" }),
		"huge pattern":    with(func(c *ProviderConfig) { c.Patterns = []string{strings.Repeat("a", 2049)} }),
	} {
		if _, err := CompileProviders(map[string]ProviderConfig{"p": c}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := CompileProviders(map[string]ProviderConfig{"p": ok, "q": ok}); err == nil {
		t.Error("two providers naming the same variable: accepted")
	}
	if _, err := CompileProviders(map[string]ProviderConfig{"p": ok,
		"h": {Env: []string{"H"}, Patterns: []string{`[A-Z]{4}\.[0-9]+`}, URLPrefixes: []string{"*.corp.example", "localhost:8080"},
			URLPrefixFromEnv: "H_URL", Auth: []string{AuthHeader, AuthBasic}, Header: "x-api-key", Prefix: "Key "}}); err != nil {
		t.Errorf("valid providers refused: %v", err)
	}
}

// TestDummyGeneration: dummies of custom patterns match them whole and
// differ from the real value.
func TestDummyGeneration(t *testing.T) {
	for _, pat := range []string{`mytok-[0-9a-f]{16}`, `(?i)abc_[a-z0-9]{20,30}`, `(xoxb|xoxp)-\d{10}-[A-Za-z0-9]{24}`,
		`AKIA[0-9A-Z]{16}`, `[^\s]{12}`, `key\.[a-z]+`, `.{10}`} {
		p, err := compileProvider("p", ProviderConfig{Env: []string{"K"}, Patterns: []string{pat}, URLPrefixes: []string{"x.example"}})
		if err != nil {
			t.Fatalf("%s: %v", pat, err)
		}
		re := regexp.MustCompile(`^(?:` + pat + `)$`)
		for range 20 {
			d, ok := p.generate(0, "")
			if !ok || !re.MatchString(d) {
				t.Fatalf("%s: dummy %q ok=%v", pat, d, ok)
			}
		}
	}
}

// TestRestore: the real value goes back only into the provider's
// headers, on requests to its destinations (scheme, host, port, path
// prefix); anything else keeps the dummy.
func TestRestore(t *testing.T) {
	ps := mustProviders(t, map[string]ProviderConfig{
		"mine": {Env: []string{"MY_TOKEN"}, Patterns: []string{"mytok-[0-9a-f]{16}"},
			URLPrefixes: []string{"https://api.example.com/v1", "*.svc.example", "http://127.0.0.1:8080/"},
			Auth:        []string{AuthHeader, AuthBasic}, Header: "X-Api-Key", Prefix: "Key "},
	})
	out, creds, _ := ps.Mask([]string{"MY_TOKEN=" + realMine, "OPENAI_API_KEY=" + realOpenAI, "GITHUB_TOKEN=" + realGitHub})
	m := envMap(out)
	mine, oai, gh := m["MY_TOKEN"], m["OPENAI_API_KEY"], m["GITHUB_TOKEN"]
	basic := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	cases := []struct {
		name        string
		https       bool
		host        string
		port        uint16
		path        string
		header, val string
		want        string
	}{
		{"custom header", true, "api.example.com", 443, "/v1/models", "X-Api-Key", "Key " + mine, "Key " + realMine},
		{"custom exact path", true, "api.example.com", 443, "/v1", "X-Api-Key", mine, realMine},
		{"custom basic", true, "api.example.com", 443, "/v1/x", "Authorization", basic("user:" + mine), basic("user:" + realMine)},
		{"custom path sibling", true, "api.example.com", 443, "/v10", "X-Api-Key", mine, mine},
		{"custom dot segments", true, "api.example.com", 443, "/v1/../admin", "X-Api-Key", mine, mine},
		{"custom encoded slash", true, "api.example.com", 443, "/v1%2f..", "X-Api-Key", mine, mine},
		{"custom other header", true, "api.example.com", 443, "/v1", "X-Other", mine, mine},
		{"custom other host", true, "evil.example", 443, "/v1", "X-Api-Key", mine, mine},
		{"custom other port", true, "api.example.com", 8443, "/v1", "X-Api-Key", mine, mine},
		{"custom plain http", false, "api.example.com", 443, "/v1", "X-Api-Key", mine, mine},
		{"wildcard sub", true, "a.svc.example", 443, "/", "X-Api-Key", mine, realMine},
		{"wildcard apex", true, "svc.example", 443, "/", "X-Api-Key", mine, mine},
		{"loopback http", false, "127.0.0.1", 8080, "/x", "X-Api-Key", mine, realMine},
		{"openai", true, "api.openai.com", 443, "/v1/responses", "Authorization", "Bearer " + oai, "Bearer " + realOpenAI},
		{"openai elsewhere", true, "api.github.com", 443, "/", "Authorization", "Bearer " + oai, "Bearer " + oai},
		{"github token scheme", true, "api.github.com", 443, "/user", "Authorization", "token " + gh, "token " + realGitHub},
		{"github git basic", true, "github.com", 443, "/o/r.git/info/refs", "Authorization", basic("x-access-token:" + gh), basic("x-access-token:" + realGitHub)},
		{"github ghe.com", true, "acme.ghe.com", 443, "/", "Authorization", "Bearer " + gh, "Bearer " + realGitHub},
		{"github lookalike", true, "github.com.evil.example", 443, "/", "Authorization", "Bearer " + gh, "Bearer " + gh},
		{"github other header", true, "api.github.com", 443, "/", "X-Token", gh, gh},
	}
	for _, c := range cases {
		h := http.Header{}
		h.Set(c.header, c.val)
		creds.Restore(c.https, c.host, c.port, c.path, h)
		if got := h.Get(c.header); got != c.want {
			t.Errorf("%s: %s = %q, want %q", c.name, c.header, got, c.want)
		}
	}
	for _, c := range []struct {
		host string
		port uint16
		want bool
	}{{"api.example.com", 443, true}, {"api.openai.com", 443, true}, {"github.com", 443, true},
		{"x.svc.example", 443, true}, {"127.0.0.1", 8080, false}, {"api.example.com", 80, false}, {"example.com", 443, false}} {
		if got := creds.Intercepts(c.host, c.port); got != c.want {
			t.Errorf("Intercepts(%s:%d) = %v", c.host, c.port, got)
		}
	}
}

func TestRedactReader(t *testing.T) {
	pairs := [][2]string{{"SECRETVALUE", "dummydummy_"}}
	body := strings.Repeat("x", 16<<10-5) + "SECRETVALUE" + strings.Repeat("y", 100) + "SECRETVALUE"
	for _, chunk := range []int{1, 3, 7, 4096} {
		rr := &redactReader{r: &slowReader{s: body, n: chunk}, pairs: pairs}
		b, err := io.ReadAll(rr)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "SECRETVALUE") || len(b) != len(body) || strings.Count(string(b), "dummydummy_") != 2 {
			t.Errorf("chunk %d: %d bytes, secret left %v", chunk, len(b), strings.Contains(string(b), "SECRETVALUE"))
		}
	}
}

type slowReader struct {
	s string
	n int
}

func (r *slowReader) Read(b []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := min(r.n, len(b), len(r.s))
	copy(b, r.s[:n])
	r.s = r.s[n:]
	return n, nil
}

// recvOr is the next request an upstream recorded, or "none" (a guard
// against a hang: every request has ended before it is read).
func recvOr(ch chan string) string {
	select {
	case g := <-ch:
		return g
	case <-time.After(30 * time.Second):
		return "none"
	}
}

// echoTLS is an upstream HTTPS server on 127.0.0.1 (its own test CA) that
// answers with the Authorization and X-Api-Key headers it received; it
// records them too.
func echoTLS(t *testing.T) (*httptest.Server, chan string) {
	got := make(chan string, 16)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("Authorization") + "|" + r.Header.Get("X-Api-Key")
		got <- r.URL.Path + " " + v
		w.Header().Set("X-Echo", v)
		fmt.Fprint(w, v)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// TestInterceptRestores drives the proxy with a Go client through CONNECT
// (and SOCKS5): to the bound destination the upstream receives the real
// value and the command sees only stand-ins in the answer; another
// destination (another port: another server) is tunnelled untouched and
// receives the dummy; an upstream whose certificate the proxy does not
// trust gets nothing (502).
func TestInterceptRestores(t *testing.T) {
	bound, boundGot := echoTLS(t)
	other, otherGot := echoTLS(t)
	bu, _ := url.Parse(bound.URL)
	ou, _ := url.Parse(other.URL)
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	ps := mustProviders(t, map[string]ProviderConfig{"mine": {Env: []string{"MY_TOKEN"}, Patterns: []string{"mytok-[0-9a-f]{16}"},
		URLPrefixes: []string{"https://" + bu.Host + "/api"}, Auth: []string{AuthBearer}}})
	out, creds, _ := ps.Mask([]string{"MY_TOKEN=" + realMine})
	dummy := envMap(out)["MY_TOKEN"]
	roots := x509.NewCertPool()
	roots.AddCert(bound.Certificate())
	roots.AddCert(other.Certificate())
	tp := startProxy(t, map[string]string{"127.0.0.1": "allow"}, Config{Credentials: creds, CA: ca, UpstreamRoots: roots})

	// The command trusts the executor's CA and, to see the untouched
	// tunnel work, the other server's certificate.
	cmdRoots := x509.NewCertPool()
	cmdRoots.AddCert(ca.Certificate())
	cmdRoots.AddCert(other.Certificate())
	for _, via := range []string{"http://" + tp.httpAddr, "socks5://" + tp.socksAddr} {
		pu, _ := url.Parse(via)
		cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: cmdRoots}}}
		get := func(u string) (string, string) {
			t.Helper()
			req, _ := http.NewRequest("GET", u, nil)
			req.Header.Set("Authorization", "Bearer "+dummy)
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatalf("%s via %s: %v", u, via, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b), resp.Header.Get("X-Echo")
		}
		body, echo := get(bound.URL + "/api/models")
		if g := recvOr(boundGot); g != "/api/models Bearer "+realMine+"|" {
			t.Errorf("via %s: upstream got %q, want the real value", via, g)
		}
		if strings.Contains(body+echo, realMine) || !strings.HasPrefix(body, "Bearer ") {
			t.Errorf("via %s: the command saw %q / %q", via, body, echo)
		}
		// Same host, a path outside the prefix: the dummy stays.
		get(bound.URL + "/other")
		if g := recvOr(boundGot); g != "/other Bearer "+dummy+"|" {
			t.Errorf("via %s: outside the prefix the upstream got %q", via, g)
		}
		// Another destination: not intercepted (the command sees the
		// server's own certificate), the dummy goes out as it is.
		get(other.URL + "/api/models")
		if g := recvOr(otherGot); g != "/api/models Bearer "+dummy+"|" {
			t.Errorf("via %s: the other host got %q", via, g)
		}
		cl.CloseIdleConnections()
	}

	// An upstream the proxy does not trust: 502, nothing reaches it.
	tp2 := startProxy(t, map[string]string{"127.0.0.1": "allow"}, Config{Credentials: creds, CA: ca, UpstreamRoots: x509.NewCertPool()})
	pu, _ := url.Parse("http://" + tp2.httpAddr)
	cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: cmdRoots}}}
	req, _ := http.NewRequest("GET", bound.URL+"/api/x", nil)
	req.Header.Set("Authorization", "Bearer "+dummy)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("untrusted upstream: status %d", resp.StatusCode)
	}
	select {
	case g := <-boundGot:
		t.Errorf("untrusted upstream received %q", g)
	default:
	}
	cl.CloseIdleConnections()
	_ = ou
}

// TestInterceptHeadTooLarge: inside an intercepted tunnel a request head is
// bounded as on the plain proxy; an endless one closes the tunnel instead
// of growing the proxy's memory.
func TestInterceptHeadTooLarge(t *testing.T) {
	bound, _ := echoTLS(t)
	bu, _ := url.Parse(bound.URL)
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	ps := mustProviders(t, map[string]ProviderConfig{"mine": {Env: []string{"MY_TOKEN"}, Patterns: []string{"mytok-[0-9a-f]{16}"},
		URLPrefixes: []string{"https://" + bu.Host + "/api"}, Auth: []string{AuthBearer}}})
	_, creds, _ := ps.Mask([]string{"MY_TOKEN=" + realMine})
	roots := x509.NewCertPool()
	roots.AddCert(bound.Certificate())
	tp := startProxy(t, map[string]string{"127.0.0.1": "allow"}, Config{Credentials: creds, CA: ca, UpstreamRoots: roots})
	c, err := net.Dial("tcp", tp.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", bu.Host, bu.Host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	cmdRoots := x509.NewCertPool()
	cmdRoots.AddCert(ca.Certificate())
	tc := tls.Client(&tunnelConn{Conn: c, r: br}, &tls.Config{RootCAs: cmdRoots, ServerName: bu.Hostname()})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("the tunnel was not intercepted: %v", err)
	}
	go func() {
		fmt.Fprint(tc, "GET /api/x HTTP/1.1\r\nHost: "+bu.Host+"\r\nX: ")
		chunk := bytes.Repeat([]byte("a"), 32<<10)
		for range 8 {
			if _, err := tc.Write(chunk); err != nil {
				return
			}
		}
	}()
	// EOF, or a reset: not a timeout.
	if _, err := io.Copy(io.Discard, tc); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the proxy did not close an intercepted tunnel with an endless head")
	}
}

// tunnelConn is a net.Conn whose reads go through r (bytes the CONNECT
// answer's reader may already hold).
type tunnelConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *tunnelConn) Read(p []byte) (int, error) { return b.r.Read(p) }

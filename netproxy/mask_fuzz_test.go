package netproxy

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// FuzzParseDestination: a URL prefix from the request never panics, and
// one accepted has a host, a port and a safe path, and is HTTPS unless it
// is loopback.
func FuzzParseDestination(f *testing.F) {
	for _, s := range []string{"https://api.example.com/v1", "*.svc.example", "localhost:8080", "http://127.0.0.1/",
		"https://[::1]:443/a", "http://x.example/", "https://u@x/", "https://x/a/../b", "https://x/%2f", "*.", "://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDestination(s)
		if err != nil {
			return
		}
		if d.host == "" || d.port == 0 || !safePath(d.path) || (!d.https && !isLoopbackHost(d.host)) {
			t.Fatalf("%q → %+v", s, d)
		}
	})
}

// FuzzProviderPattern: a custom pattern never panics the compiler or the
// generator; a dummy always matches the pattern whole, and a credential it
// masks never stays in the environment.
func FuzzProviderPattern(f *testing.F) {
	for _, s := range []string{`mytok-[0-9a-f]{16}`, `(a|b)+c`, `\d{3,}`, `[^a]{4}`, `(?i)x.y`, `\bk\w+`, `a{0}`, `[\x{100}-\x{200}]{3}`} {
		f.Add(s, "mytok-0123456789abcdef")
	}
	f.Fuzz(func(t *testing.T, pat, real string) {
		p, err := compileProvider("p", ProviderConfig{Env: []string{"K"}, Patterns: []string{pat}, URLPrefixes: []string{"x.example"}})
		if err != nil {
			return
		}
		re := regexp.MustCompile(`^(?:` + pat + `)$`)
		if d, ok := p.generate(0, ""); ok && !re.MatchString(d) {
			t.Fatalf("%q generated %q", pat, d)
		}
		if strings.ContainsAny(real, "=\x00") {
			return
		}
		ps := &Providers{list: []*provider{p}}
		out, _, _ := ps.Mask([]string{"K=" + real})
		for _, kv := range out {
			if kv == "K="+strings.TrimSpace(real) && strings.TrimSpace(real) != "" {
				t.Fatalf("%q: the real value stayed: %v", pat, out)
			}
		}
	})
}

// FuzzRedact: whatever the body and however it is cut, a real value never
// comes out of a response, and its length is kept.
func FuzzRedact(f *testing.F) {
	f.Add("xxSECRETSECRETyy", 3)
	f.Add("SECRETSECRETSECRETSECRET", 1)
	f.Fuzz(func(t *testing.T, body string, chunk int) {
		if chunk <= 0 || chunk > 1<<16 {
			return
		}
		pairs := [][2]string{{"SECRETSECRET", "dummy_dummy_"}}
		b, err := io.ReadAll(&redactReader{r: &slowReader{s: body, n: chunk}, pairs: pairs})
		if err != nil || len(b) != len(body) || strings.Contains(string(b), "SECRETSECRET") {
			t.Fatalf("%q/%d → %q", body, chunk, b)
		}
		h := http.Header{"X": {body}}
		if strings.Contains(redactString(h.Get("X"), pairs), "SECRETSECRET") {
			t.Fatal("header kept the secret")
		}
	})
}

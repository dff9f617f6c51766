package netproxy

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// The cost of interception: one HTTPS GET on a new connection, direct,
// through a plain CONNECT tunnel, and through a tunnel the proxy
// intercepts (two TLS handshakes, the credential restored). The leaf
// certificate is cached after the first request, as in a command's life.
//
//	go test -bench HTTPS -benchtime 1000x -count 3 ./netproxy/

func benchHTTPS(b *testing.B, intercept, viaProxy bool) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	b.Cleanup(up.Close)
	uu, _ := url.Parse(up.URL)
	ca, err := NewCA()
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	cmdRoots := x509.NewCertPool()
	cmdRoots.AddCert(ca.Certificate())
	cmdRoots.AddCert(up.Certificate())
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: cmdRoots}}
	dummy := "mytok-0000000000000000"
	if viaProxy {
		cfg := Config{}
		if intercept {
			ps, err := CompileProviders(map[string]ProviderConfig{"mine": {Env: []string{"MY_TOKEN"},
				Patterns: []string{"mytok-[0-9a-f]{16}"}, URLPrefixes: []string{"https://" + uu.Host + "/"}}})
			if err != nil {
				b.Fatal(err)
			}
			out, creds, _ := ps.Mask([]string{"MY_TOKEN=" + realMine})
			dummy = envMap(out)["MY_TOKEN"]
			cfg = Config{Credentials: creds, CA: ca, UpstreamRoots: roots}
		}
		tp := startProxy(b, map[string]string{"127.0.0.1": "allow"}, cfg)
		pu, _ := url.Parse("http://" + tp.httpAddr)
		tr.Proxy = http.ProxyURL(pu)
	}
	cl := &http.Client{Transport: tr}
	req, _ := http.NewRequest("GET", up.URL+"/v1/x", nil)
	req.Header.Set("Authorization", "Bearer "+dummy)
	b.ResetTimer()
	for b.Loop() {
		resp, err := cl.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func BenchmarkHTTPSDirect(b *testing.B)      { benchHTTPS(b, false, false) }
func BenchmarkHTTPSTunnel(b *testing.B)      { benchHTTPS(b, false, true) }
func BenchmarkHTTPSIntercepted(b *testing.B) { benchHTTPS(b, true, true) }

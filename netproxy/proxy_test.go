package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/tcptest"
)

// testProxy serves a proxy on host loopback listeners; it returns the
// HTTP and SOCKS5 addresses and the decisions it reported.
type testProxy struct {
	p                   *Proxy
	httpAddr, socksAddr string
	mu                  sync.Mutex
	decisions           []Decision
}

// got returns the refusals reported; allowed() the allows.
func (tp *testProxy) got() []Decision {
	return tp.filter(func(d Decision) bool { return d.Decision != DecisionAllow })
}

func (tp *testProxy) allowed() []Decision {
	return tp.filter(func(d Decision) bool { return d.Decision == DecisionAllow })
}

func (tp *testProxy) filter(f func(Decision) bool) []Decision {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []Decision
	for _, d := range tp.decisions {
		if f(d) {
			out = append(out, d)
		}
	}
	return out
}

func startProxy(t testing.TB, domains map[string]string, cfg Config) *testProxy {
	t.Helper()
	pol, err := NewPolicy(domains, nil, false, false)
	if err != nil {
		t.Fatal(err)
	}
	tp := &testProxy{}
	cfg.Policy = pol
	cfg.OnDecision = func(d Decision) {
		tp.mu.Lock()
		tp.decisions = append(tp.decisions, d)
		tp.mu.Unlock()
	}
	tp.p = New(cfg)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp.httpAddr, tp.socksAddr = hl.Addr().String(), sl.Addr().String()
	tp.p.Serve(hl, sl)
	t.Cleanup(tp.p.Close)
	return tp
}

func helloServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func proxyClient(proxyAddr string) *http.Client {
	u, _ := url.Parse("http://" + proxyAddr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 20 * time.Second}
}

// socksDial opens a SOCKS5 CONNECT to host:port; it returns the reply
// code and, on success, the tunnel.
func socksDial(t testing.TB, proxyAddr, host string, port uint16) (byte, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
	req = append(req, host...)
	req = binary.BigEndian.AppendUint16(req, port)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var resp [12]byte
	if _, err := io.ReadFull(c, resp[:]); err != nil {
		t.Fatal(err)
	}
	if resp[3] != 0 {
		c.Close()
		return resp[3], nil
	}
	return 0, c
}

func TestHTTPProxy(t *testing.T) {
	hello := helloServer(t)
	tp := startProxy(t, map[string]string{"127.0.0.1": "allow", "denied.example": "deny"}, Config{})
	cl := proxyClient(tp.httpAddr)

	resp, err := cl.Get("http://" + hello + "/a")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello GET /a" {
		t.Fatalf("allowed: %d %q", resp.StatusCode, body)
	}
	// Keep-alive between requests to the proxy: every request goes over
	// the first one's connection (one client address in the decisions).
	for range 2 {
		resp, err := cl.Get("http://" + hello + "/k")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err = cl.Post("http://"+hello+"/b", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello POST /b" {
		t.Fatalf("second request: %q", body)
	}

	for _, c := range []struct {
		url, reason, header string
	}{
		{"http://denied.example/", ReasonDenied, "blocked-by-denylist"},
		{"http://other.example:8080/", ReasonNotAllowed, "blocked-by-allowlist"},
		{"http://localhost:1/", ReasonNotAllowedLocal, "blocked-by-allowlist"},
	} {
		resp, err := cl.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get("x-proxy-error") != c.header ||
			!bytes.Contains(body, []byte(`"reason":"`+c.reason+`"`)) || !bytes.HasPrefix(body, []byte(`{"status":"blocked",`)) {
			t.Errorf("%s: %d %s %s", c.url, resp.StatusCode, resp.Header, body)
		}
	}
	as := tp.allowed()
	if len(as) != 4 || as[0].Reason != "allow" || as[0].Source != SourceBaseline || as[3].Method != "POST" {
		t.Errorf("allow decisions %+v", as)
	}
	for _, a := range as {
		if a.Client != as[0].Client {
			t.Errorf("requests over more than one client connection (%s, %s): no keep-alive", as[0].Client, a.Client)
		}
	}
	ds := tp.got()
	if len(ds) != 3 || ds[0].Host != "denied.example" || ds[1].Port != 8080 || ds[2].Reason != ReasonNotAllowedLocal || ds[0].Method != "GET" {
		t.Errorf("decisions %+v", ds)
	}
}

func TestCONNECTAndSOCKS(t *testing.T) {
	echo := tcptest.Echo(t)
	host, portStr, _ := net.SplitHostPort(echo)
	var port uint16
	fmt.Sscan(portStr, &port)
	tp := startProxy(t, map[string]string{"127.0.0.1": "allow"}, Config{SOCKS: true})

	// CONNECT
	c, err := net.Dial("tcp", tp.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nearly", echo, echo)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "early" {
		t.Fatalf("bytes sent with the CONNECT: %q %v", buf, err)
	}
	c.Close()

	// SOCKS5, allowed then refused.
	rep, tun := socksDial(t, tp.socksAddr, host, port)
	if rep != 0 {
		t.Fatalf("socks reply %d", rep)
	}
	fmt.Fprint(tun, "ping")
	if _, err := io.ReadFull(tun, buf[:4]); err != nil || string(buf[:4]) != "ping" {
		t.Fatalf("socks echo %q %v", buf[:4], err)
	}
	tun.Close()
	if rep, _ := socksDial(t, tp.socksAddr, "nope.example", 443); rep != repNotAllowed {
		t.Fatalf("refused socks reply %d", rep)
	}
	ds := tp.got()
	if len(ds) != 1 || ds[0].Protocol != ProtoSOCKS5TCP || ds[0].Reason != ReasonNotAllowed {
		t.Errorf("decisions %+v", ds)
	}
}

// TestDialRefusesLocal: an allowed name whose address is loopback or
// private is refused at dial time (DNS rebinding), unless allowlisted as
// local.
func TestDialRefusesLocal(t *testing.T) {
	echo := tcptest.Echo(t)
	_, portStr, _ := net.SplitHostPort(echo)
	var port uint16
	fmt.Sscan(portStr, &port)
	tp := startProxy(t, map[string]string{"*": "allow"}, Config{})
	_, err := tp.p.dial(context.Background(), &target{proto: ProtoHTTP, host: "127.0.0.1", port: port})
	var b *errBlocked
	if !errors.As(err, &b) || b.d.Reason != ReasonNotAllowedLocal {
		t.Fatalf("dial of a local address: %v", err)
	}
	c, err := tp.p.dial(context.Background(), &target{proto: ProtoHTTP, host: "127.0.0.1", port: port, localOK: true})
	if err != nil {
		t.Fatalf("explicitly local: %v", err)
	}
	c.Close()
	// The exec-server's own listener stays out of reach even then.
	self := netip.MustParseAddrPort(echo)
	tp2 := startProxy(t, map[string]string{"*": "allow"}, Config{Forbidden: func(ap netip.AddrPort) bool { return ap == self }})
	_, err = tp2.p.dial(context.Background(), &target{proto: ProtoHTTP, host: "127.0.0.1", port: port, localOK: true})
	if !errors.As(err, &b) || b.d.Reason != ReasonDenied {
		t.Fatalf("dial of a forbidden address: %v", err)
	}
}

// TestUpstreamProxy: with Upstream, every connection is a CONNECT through
// it, also for plain HTTP.
func TestUpstreamProxy(t *testing.T) {
	hello := helloServer(t)
	var connects atomic.Int32
	up := startProxy(t, map[string]string{"127.0.0.1": "allow"}, Config{})
	// A counting front for the upstream proxy.
	ln := tcptest.Serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		connects.Add(1)
		u, err := net.Dial("tcp", up.httpAddr)
		if err != nil {
			c.Close()
			return
		}
		pipe(c, u)
	})
	tp := startProxy(t, map[string]string{"127.0.0.1": "allow"}, Config{Upstream: ln.Addr().String()})
	resp, err := proxyClient(tp.httpAddr).Get("http://" + hello + "/up")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello GET /up" || connects.Load() != 1 {
		t.Fatalf("through the upstream: %q, %d connections to it", body, connects.Load())
	}
	// The upstream refuses what its own policy refuses: a 502 here.
	tp2 := startProxy(t, map[string]string{"*": "allow"}, Config{Upstream: ln.Addr().String()})
	resp, err = proxyClient(tp2.httpAddr).Get("http://elsewhere.example/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("upstream refusal: %d", resp.StatusCode)
	}
}

func TestHeadTooLarge(t *testing.T) {
	tp := startProxy(t, map[string]string{"*": "allow"}, Config{})
	c, err := net.Dial("tcp", tp.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		fmt.Fprint(c, "GET http://x.example/ HTTP/1.1\r\nX: ")
		chunk := bytes.Repeat([]byte("a"), 32<<10)
		for range 8 {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	// EOF, or a reset (the proxy closed with unread bytes): not a timeout.
	if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the proxy did not close a connection with an endless head")
	}
}

// TestCloseEndsEverything: Close ends open tunnels and returns, leaving
// no goroutine.
func TestCloseEndsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	echo := tcptest.Echo(t)
	pol, _ := NewPolicy(map[string]string{"127.0.0.1": "allow"}, nil, false, false)
	p := New(Config{Policy: pol, SOCKS: true})
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	p.Serve(hl, nil)
	c, err := net.Dial("tcp", hl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", echo)
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
		t.Fatal(resp, err)
	}
	p.Close()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("tunnel still open after Close")
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) { // the echo server's
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		t.Errorf("%d goroutines left (before: %d)", n, before)
	}
}

func FuzzSOCKSRequest(f *testing.F) {
	f.Add([]byte{5, 1, 0, 3, 4, 'a', '.', 'b', 'c', 0, 80})
	f.Add([]byte{5, 1, 0, 1, 127, 0, 0, 1, 1, 187})
	f.Add([]byte{5, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 22})
	f.Add([]byte{5, 3, 0, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := readSOCKSRequest(bytes.NewReader(b))
		if err != nil {
			return
		}
		switch req.atyp {
		case atypIPv4, atypIPv6, atypDomain:
			if req.atyp != atypDomain && req.host == "" {
				t.Fatalf("address type %d without a host", req.atyp)
			}
		default:
			if req.host != "" {
				t.Fatalf("unknown address type %d with host %q", req.atyp, req.host)
			}
		}
		_ = readSOCKSGreeting(bytes.NewReader(b), io.Discard)
	})
}

// The proxy's added latency: one HTTP request (a new connection each
// time, as a command without keep-alive makes it) and one TCP connection
// with a round trip, direct and through the proxy.
func BenchmarkHTTPDirect(b *testing.B) {
	hello := helloServer(b)
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	b.ResetTimer()
	for b.Loop() {
		benchGet(b, cl, "http://"+hello+"/")
	}
}

func BenchmarkHTTPProxy(b *testing.B) {
	hello := helloServer(b)
	tp := startProxy(b, map[string]string{"127.0.0.1": "allow"}, Config{})
	u, _ := url.Parse("http://" + tp.httpAddr)
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyURL(u)}}
	b.ResetTimer()
	for b.Loop() {
		benchGet(b, cl, "http://"+hello+"/")
	}
}

func benchGet(b *testing.B, cl *http.Client, u string) {
	resp, err := cl.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func BenchmarkTCPDirect(b *testing.B) {
	echo := tcptest.Echo(b)
	buf := make([]byte, 4)
	for b.Loop() {
		c, err := net.Dial("tcp", echo)
		if err != nil {
			b.Fatal(err)
		}
		benchPing(b, c, buf)
	}
}

func BenchmarkTCPSOCKS5(b *testing.B) {
	echo := tcptest.Echo(b)
	host, portStr, _ := net.SplitHostPort(echo)
	var port uint16
	fmt.Sscan(portStr, &port)
	tp := startProxy(b, map[string]string{"127.0.0.1": "allow"}, Config{SOCKS: true})
	buf := make([]byte, 4)
	for b.Loop() {
		rep, c := socksDial(b, tp.socksAddr, host, port)
		if rep != 0 {
			b.Fatal(rep)
		}
		benchPing(b, c, buf)
	}
}

func benchPing(b *testing.B, c net.Conn, buf []byte) {
	if _, err := c.Write([]byte("ping")); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		b.Fatal(err)
	}
	c.Close()
}

// TestMaxConns: past MaxConns the proxy accepts no more until one ends.
func TestMaxConns(t *testing.T) {
	tp := startProxy(t, map[string]string{"*": "allow"}, Config{MaxConns: 2})
	var open []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", tp.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	// The third connects (backlog) but is not served while two are open.
	c3, err := net.Dial("tcp", tp.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	fmt.Fprint(c3, "GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") // refused at once
	_ = c3.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c3.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a third connection was served past MaxConns 2: %d %v", n, err)
	}
	open[0].Close()
	_ = c3.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c3), nil)
	if err != nil {
		t.Fatalf("after one closed: %v", err)
	}
	resp.Body.Close()
	open[1].Close()
}

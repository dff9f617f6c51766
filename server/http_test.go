package server

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/protocol"
)

// httpTestServer answers like the reference's observations were made
// against: a plain body with a repeated header, a redirect, a slow answer,
// a chunked stream, and an echo of the request.
func httpTestServer(t *testing.T, tlsServer bool) *httptest.Server {
	srv, _ := gatedHTTPServer(t, tlsServer)
	return srv
}

// gatedHTTPServer is httpTestServer whose /stream sends its second part
// only once gate is called.
func gatedHTTPServer(t *testing.T, tlsServer bool) (*httptest.Server, func()) {
	release := make(chan struct{})
	gate := make(chan struct{})
	var gateOnce sync.Once
	open := func() { gateOnce.Do(func() { close(gate) }) }
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redir":
			http.Redirect(w, r, "/plain", http.StatusFound)
		case "/slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: one\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-gate:
			case <-r.Context().Done():
			}
			fmt.Fprint(w, "data: two\n\n")
		case "/echo":
			b, _ := json.Marshal(map[string]any{"method": r.Method, "headers": r.Header, "referer": r.Referer()})
			w.Write(b)
		default:
			w.Header().Set("Content-Type", "text/plain")
			w.Header()["X-Multi"] = []string{"a", "b"}
			w.WriteHeader(map[string]int{"/404": 404}[r.URL.Path] | 200*boolInt(r.URL.Path != "/404"))
			fmt.Fprint(w, "hello")
		}
	})
	var s *httptest.Server
	if tlsServer {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(func() { open(); close(release); s.Close() })
	return s, open
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

type httpRes struct {
	Status  int                   `json:"status"`
	Headers []protocol.HTTPHeader `json:"headers"`
	Body    string                `json:"bodyBase64"`
}

func (r httpRes) header(name string) []string {
	var out []string
	for _, h := range r.Headers {
		if h.Name == name {
			out = append(out, h.Value)
		}
	}
	return out
}

func TestHTTPRequest(t *testing.T) {
	srv := httpTestServer(t, false)
	p := stdioPeer(t, New(Config{}))
	p.init()
	call := func(params map[string]any) httpRes {
		t.Helper()
		var r httpRes
		mustUnmarshal(t, p.call("http/request", params), &r)
		return r
	}

	r := call(map[string]any{"requestId": "r1", "method": "GET", "url": srv.URL + "/plain"})
	if r.Status != 200 || r.Body != base64.StdEncoding.EncodeToString([]byte("hello")) {
		t.Errorf("plain: %+v", r)
	}
	// The headers as the server sent them: lower-case names, repeats kept
	// in order (Go's server writes them sorted by name).
	var names []string
	for _, h := range r.Headers {
		names = append(names, h.Name)
	}
	if got := strings.Join(names, ","); got != "content-type,x-multi,x-multi,date,content-length" {
		t.Errorf("header order %s", got)
	}
	if got := r.header("x-multi"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("x-multi %v", got)
	}
	if r := call(map[string]any{"requestId": "r2", "method": "GET", "url": srv.URL + "/404"}); r.Status != 404 {
		t.Errorf("404 is a result: %+v", r)
	}
	if r := call(map[string]any{"requestId": "r3", "method": "GET", "url": srv.URL + "/redir"}); r.Status != 200 {
		t.Errorf("redirect followed by default: %+v", r)
	}
	if r := call(map[string]any{"requestId": "r4", "method": "GET", "url": srv.URL + "/redir", "redirectPolicy": "stop"}); r.Status != 302 || r.header("location")[0] != "/plain" {
		t.Errorf("redirectPolicy stop: %+v", r)
	}

	// What the server receives: the client's headers, Accept: */*, no
	// Go user agent, no gzip negotiation, the body.
	r = call(map[string]any{"requestId": "r5", "method": "POST", "url": srv.URL + "/echo",
		"headers":    []protocol.HTTPHeader{{Name: "X-B", Value: "1"}, {Name: "x-a", Value: "2"}, {Name: "X-B", Value: "3"}},
		"bodyBase64": base64.StdEncoding.EncodeToString([]byte("hi"))})
	body, _ := base64.StdEncoding.DecodeString(r.Body)
	var echo struct {
		Method  string
		Headers map[string][]string
	}
	mustUnmarshal(t, body, &echo)
	if echo.Method != "POST" || fmt.Sprint(echo.Headers["X-B"]) != "[1 3]" || echo.Headers["Accept"][0] != "*/*" ||
		echo.Headers["User-Agent"] != nil || echo.Headers["Accept-Encoding"] != nil || echo.Headers["Content-Length"][0] != "2" {
		t.Errorf("request as received: %s", body)
	}

	// An address nothing listens on: one just closed (a fixed port such as
	// 1 may be taken on a shared machine).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	// A header from the executor's environment: value then the variable.
	t.Setenv("HTTPREQ_TEST_TOKEN", "s3cret")
	t.Setenv("HTTPREQ_TEST_EMPTY", "")
	r = call(map[string]any{"requestId": "r6", "method": "GET", "url": srv.URL + "/echo",
		"headers": []map[string]any{{"name": "Authorization", "value": "Bearer ", "valueEnvVar": "HTTPREQ_TEST_TOKEN"}}})
	body, _ = base64.StdEncoding.DecodeString(r.Body)
	mustUnmarshal(t, body, &echo)
	if got := echo.Headers["Authorization"]; len(got) != 1 || got[0] != "Bearer s3cret" {
		t.Errorf("valueEnvVar header as received: %v", got)
	}
	envHeader := func(id, v string) map[string]any {
		return map[string]any{"requestId": id, "method": "GET", "url": srv.URL, "headers": []map[string]any{{"name": "x-k", "value": "v", "valueEnvVar": v}}}
	}
	for _, c := range []struct {
		params map[string]any
		code   int
		want   string
	}{
		{envHeader("v1", "HTTPREQ_TEST_MISSING"), -32602, "http/request header x-k requires executor environment variable HTTPREQ_TEST_MISSING"},
		{envHeader("v2", "HTTPREQ_TEST_EMPTY"), -32602, "http/request header x-k requires a non-empty executor environment variable HTTPREQ_TEST_EMPTY"},
		{map[string]any{"requestId": "v3", "method": "GET", "url": srv.URL, "headers": []map[string]any{{"name": "x-k", "valueEnvVar": "HTTPREQ_TEST_TOKEN"}}}, -32602, "missing field `value`"},
		{map[string]any{"requestId": "v4", "method": "GET", "url": srv.URL, "headers": []protocol.HTTPHeader{{Name: "x-k", Value: "a\nb"}}}, -32602, "http/request header value is invalid for x-k: failed to parse header value"},
		{map[string]any{"requestId": "e1", "method": "GET", "url": "ftp://127.0.0.1/x"}, -32602, "http/request only supports http and https URLs, got ftp"},
		{map[string]any{"requestId": "e2", "method": "GET", "url": "not a url"}, -32602, "http/request url is invalid: relative URL without a base"},
		{map[string]any{"requestId": "e3", "method": "BAD METHOD", "url": srv.URL}, -32602, "http/request method is invalid: invalid HTTP method"},
		{map[string]any{"requestId": "e4", "method": "GET", "url": srv.URL, "headers": []protocol.HTTPHeader{{Name: "bad name", Value: "x"}}}, -32602, "http/request header name is invalid: invalid HTTP header name"},
		{map[string]any{"method": "GET", "url": srv.URL}, -32602, "missing field `requestId`"},
		{map[string]any{"requestId": "e5", "method": "GET", "url": srv.URL, "bodyBase64": "!!"}, -32602, "Invalid symbol 33, offset 0."},
		{map[string]any{"requestId": "e6", "method": "GET", "url": "http://" + closed + "/"}, -32603, "http/request failed: error sending request for url (http://" + closed + "/)"},
		{map[string]any{"requestId": "e7", "method": "GET", "url": srv.URL + "/slow", "timeoutMs": 100}, -32603, "http/request failed: error sending request for url (" + srv.URL + "/slow)"},
	} {
		if code, msg := p.callErr("http/request", c.params); code != c.code || msg != c.want {
			t.Errorf("%v: %d %q, want %d %q", c.params, code, msg, c.code, c.want)
		}
	}
}

// TestHTTPRequestStream: the result comes first (bodyBase64 ""), then the
// deltas in seq order, then done:true; a requestId is refused while its
// stream is active and free again after.
func TestHTTPRequestStream(t *testing.T) {
	checkGoroutines(t)
	srv, gate := gatedHTTPServer(t, false)
	p := stdioPeer(t, New(Config{}))
	p.init()
	id := p.request("http/request", map[string]any{"requestId": "s", "method": "GET", "url": srv.URL + "/stream", "streamResponse": true})
	dup := ""
	var order []string
	var data []byte
	for done := false; !done; {
		w := <-p.msgs
		switch {
		case dup != "" && string(w.ID) == dup:
			if w.Error == nil || w.Error.Message != "http/request streamResponse requestId `s` is already active" {
				t.Errorf("duplicate requestId: %s", w.raw)
			}
			gate()
			continue
		case string(w.ID) == id:
			var r httpRes
			mustUnmarshal(t, w.Result, &r)
			if r.Status != 200 || r.Body != "" || r.header("content-type")[0] != "text/event-stream" {
				t.Errorf("stream result %s", w.raw)
			}
			order = append(order, "result")
			dup = p.request("http/request", map[string]any{"requestId": "s", "method": "GET", "url": srv.URL + "/plain", "streamResponse": true})
		case w.Method == "http/request/bodyDelta":
			var d struct {
				RequestID string  `json:"requestId"`
				Seq       int     `json:"seq"`
				Delta     string  `json:"deltaBase64"`
				Done      bool    `json:"done"`
				Error     *string `json:"error"`
			}
			mustUnmarshal(t, w.Params, &d)
			if d.RequestID != "s" || d.Seq != len(order) || d.Error != nil {
				t.Errorf("delta %s after %v", w.raw, order)
			}
			b, _ := base64.StdEncoding.DecodeString(d.Delta)
			data = append(data, b...)
			order = append(order, "delta")
			done = d.Done
			if done && (d.Delta != "" || !strings.Contains(w.raw, `"error":null`)) {
				t.Errorf("last delta %s", w.raw)
			}
		default:
			t.Errorf("unexpected %s", w.raw)
		}
	}
	if order[0] != "result" || string(data) != "data: one\n\ndata: two\n\n" {
		t.Errorf("order %v, data %q", order, data)
	}
	// The id is free once done (the release runs right after the last
	// delta is queued).
	deadline := time.Now().Add(5 * time.Second)
	for {
		w := p.response(p.request("http/request", map[string]any{"requestId": "s", "method": "GET", "url": srv.URL + "/plain", "streamResponse": true}))
		if w.Error == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requestId still active: %s", w.raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHTTPRequestLimit: past MaxHTTPRequestsPerConn calls in flight, a
// clear error; the others complete.
func TestHTTPRequestLimit(t *testing.T) {
	srv := httpTestServer(t, false)
	p := stdioPeer(t, New(Config{}))
	p.init()
	var ids []string
	for i := 0; i < MaxHTTPRequestsPerConn; i++ {
		ids = append(ids, p.request("http/request", map[string]any{"requestId": fmt.Sprint(i), "method": "GET", "url": srv.URL + "/slow", "timeoutMs": 3000}))
	}
	// Let them all reach the server before the one too many.
	time.Sleep(300 * time.Millisecond)
	if code, msg := p.callErr("http/request", map[string]any{"requestId": "x", "method": "GET", "url": srv.URL + "/plain"}); code != -32600 || !strings.Contains(msg, "too many http/request calls in flight") {
		t.Errorf("one too many: %d %q", code, msg)
	}
	for _, id := range ids {
		p.response(id)
	}
	p.call("http/request", map[string]any{"requestId": "y", "method": "GET", "url": srv.URL + "/plain"})
}

// TestHTTPRequestTLS: SSL_CERT_FILE names the roots to trust; a file that
// cannot be read fails every https call.
func TestHTTPRequestTLS(t *testing.T) {
	srv := httpTestServer(t, true)
	dir := t.TempDir()
	certFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	url := "https://127.0.0.1:" + port + "/plain"
	p := stdioPeer(t, New(Config{}))
	p.init()
	t.Setenv("CODEX_CA_CERTIFICATE", "")
	t.Setenv("SSL_CERT_FILE", certFile)
	var r httpRes
	mustUnmarshal(t, p.call("http/request", map[string]any{"requestId": "t", "method": "GET", "url": url}), &r)
	if r.Status != 200 {
		t.Errorf("https with SSL_CERT_FILE: %+v", r)
	}
	t.Setenv("SSL_CERT_FILE", filepath.Join(dir, "missing.pem"))
	if code, _ := p.callErr("http/request", map[string]any{"requestId": "t2", "method": "GET", "url": url}); code != -32603 {
		t.Errorf("unreadable SSL_CERT_FILE: code %d", code)
	}
}

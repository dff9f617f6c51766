// Package httpcall is the http/request family: the executor makes an HTTP
// call for the client (codex reaches the executor's HTTP MCP servers this
// way) and answers with the status, the headers as received, and the body,
// whole or streamed as http/request/bodyDelta notifications after the
// result. Shapes and texts as the reference's (codex-rs/exec-server,
// http/request; docs/protocol.md). The server dispatches to it
// (server/http.go); its state is per connection (ConnState).
package httpcall

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/internal/secretenv"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
)

// Bounds per connection. A whole (non-streamed) body travels in one
// message as base64, so it must stay well under the message limit; a
// streamed body has no total bound (the connection's send queue holds the
// reader back instead).
const (
	MaxRequestsPerConn = 16
	MaxBodyBytes       = 32 << 20
	httpDeltaBytes     = 64 << 10
	maxHTTPHeaderBytes = 1 << 20
)

// Params are http/request's params with the URL parsed.
type Params struct {
	protocol.HTTPRequestParams

	url *url.URL
}

// Result is http/request's result with its body stream.
type Result struct {
	protocol.HTTPRequestResult

	// stream, when set, runs after the result has been queued (the
	// dispatcher's AfterReply hook), so every delta follows it.
	stream func()
}

// AfterReply starts a streamed body; the dispatcher calls it once the
// result is queued, so every delta follows the result.
func (r *Result) AfterReply() {
	if r.stream != nil {
		r.stream()
	}
}

// Decode parses and checks http/request params (a *Params), with the
// reference's error texts.
func Decode(raw json.RawMessage) (any, error) {
	p := new(Params)
	if err := jsonscan.DecodeParams(raw, &p.HTTPRequestParams, "HttpRequestParams", "method", "url", "requestId"); err != nil {
		return nil, err
	}
	if p.RedirectPolicy != nil && *p.RedirectPolicy != "follow" && *p.RedirectPolicy != "stop" {
		return nil, protocol.InvalidParams("unknown variant `%s`, expected `follow` or `stop`", *p.RedirectPolicy)
	}
	for _, h := range p.Headers {
		if h.Value == nil {
			return nil, protocol.InvalidParams("missing field `value`")
		}
	}
	if !isToken(p.Method) {
		return nil, protocol.InvalidParams("http/request method is invalid: invalid HTTP method")
	}
	u, err := url.Parse(p.URL)
	if err != nil || u.Scheme == "" {
		return nil, protocol.InvalidParams("http/request url is invalid: relative URL without a base")
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, protocol.InvalidParams("http/request only supports http and https URLs, got %s", u.Scheme)
	}
	if u.Host == "" {
		return nil, protocol.InvalidParams("http/request url is invalid: empty host")
	}
	if u.Path == "" {
		u.Path = "/"
	}
	p.url = u
	// Checked in the reference's order: name, then the variable, then the
	// value it makes.
	for i := range p.Headers {
		h := &p.Headers[i]
		if !isToken(h.Name) {
			return nil, protocol.InvalidParams("http/request header name is invalid: invalid HTTP header name")
		}
		if h.ValueEnvVar != nil {
			v, ok := secretenv.LookupEnv(*h.ValueEnvVar) // scrubbed credentials included
			if !ok || *h.ValueEnvVar == "" {
				return nil, protocol.InvalidParams("http/request header %s requires executor environment variable %s", h.Name, *h.ValueEnvVar)
			}
			if v == "" {
				return nil, protocol.InvalidParams("http/request header %s requires a non-empty executor environment variable %s", h.Name, *h.ValueEnvVar)
			}
			full := *h.Value + v
			h.Value, h.ValueEnvVar = &full, nil
		}
		for j := 0; j < len(*h.Value); j++ {
			if c := (*h.Value)[j]; c < 0x20 && c != '\t' || c == 0x7f {
				return nil, protocol.InvalidParams("http/request header value is invalid for %s: failed to parse header value", h.Name)
			}
		}
	}
	return p, nil
}

// isToken: RFC 9110 tchar, the characters of a method or a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// ConnState is one connection's HTTP calls: how many are in flight and
// which streamed requestIds are active. Its zero value is ready; it needs
// no clean-up when the connection ends.
type ConnState struct {
	inflight atomic.Int32
	mu       sync.Mutex
	active   map[string]bool
}

// Call makes the HTTP call p on behalf of conn's client. A streamed body
// starts when the result's AfterReply runs (after the result is queued).
func (st *ConnState) Call(ctx context.Context, conn *jsonrpc.Conn, p *Params) (any, error) {
	if st.inflight.Add(1) > MaxRequestsPerConn {
		st.inflight.Add(-1)
		return nil, protocol.InvalidRequest("too many http/request calls in flight on this connection (limit %d); wait for one to finish", MaxRequestsPerConn)
	}
	release := func() { st.inflight.Add(-1) }
	if p.StreamResponse {
		st.mu.Lock()
		if st.active[p.RequestID] {
			st.mu.Unlock()
			release()
			return nil, protocol.InvalidParams("http/request streamResponse requestId `%s` is already active", p.RequestID)
		}
		if st.active == nil {
			st.active = map[string]bool{}
		}
		st.active[p.RequestID] = true
		st.mu.Unlock()
		inner := release
		release = func() {
			st.mu.Lock()
			delete(st.active, p.RequestID)
			st.mu.Unlock()
			inner()
		}
	}
	var cancel context.CancelFunc
	if p.TimeoutMs != nil {
		// The whole call, a streamed body included, as the reference's.
		ctx, cancel = context.WithTimeout(ctx, time.Duration(min(*p.TimeoutMs, uint64(1<<62)/uint64(time.Millisecond)))*time.Millisecond)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	done := func() { cancel(); release() }
	resp, headers, err := doHTTP(ctx, p)
	if err != nil {
		done()
		return nil, err
	}
	res := &Result{HTTPRequestResult: protocol.HTTPRequestResult{Status: resp.StatusCode, Headers: headers}}
	if !p.StreamResponse {
		defer done()
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
		if err != nil {
			return nil, protocol.Internal("http/request failed: error decoding response body")
		}
		if len(body) > MaxBodyBytes {
			return nil, protocol.Internal("http/request failed: the response body exceeds %d bytes; ask for it with streamResponse", MaxBodyBytes)
		}
		res.BodyBase64 = base64.StdEncoding.EncodeToString(body)
		return res, nil
	}
	res.stream = func() {
		ok := conn.GoDetached(func() {
			defer done()
			defer resp.Body.Close()
			streamBody(ctx, conn, p.RequestID, resp.Body)
		})
		if !ok {
			resp.Body.Close()
			done()
		}
	}
	return res, nil
}

// streamBody sends the body as bodyDelta notifications, seq from 1, and a
// last one with done:true (and the error, if reading failed).
func streamBody(ctx context.Context, conn *jsonrpc.Conn, id string, body io.Reader) {
	buf := make([]byte, httpDeltaBytes)
	seq := uint64(0)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			seq++
			if conn.Send(ctx, appendDelta(jsonrpc.GetBuffer(), id, seq, buf[:n], false, "")) != nil {
				return
			}
		}
		if err != nil {
			msg := ""
			if !errors.Is(err, io.EOF) {
				msg = "error decoding response body"
				if ctx.Err() != nil {
					msg = "operation timed out"
				}
			}
			seq++
			_ = conn.Send(context.Background(), appendDelta(jsonrpc.GetBuffer(), id, seq, nil, true, msg))
			return
		}
	}
}

func appendDelta(dst []byte, id string, seq uint64, data []byte, done bool, errMsg string) []byte {
	dst = append(dst, `{"method":"`+protocol.NotifyHTTPRequestBodyDelta+`","params":{"requestId":`...)
	dst = jsonrpc.AppendString(dst, id)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"deltaBase64":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, data)
	dst = append(dst, `","done":`...)
	dst = strconv.AppendBool(dst, done)
	dst = append(dst, `,"error":`...)
	if errMsg == "" {
		dst = append(dst, "null"...)
	} else {
		dst = jsonrpc.AppendString(dst, errMsg)
	}
	return append(dst, "}}"...)
}

// doHTTP makes the call. Any failure before the response headers is the
// reference's one text; the cause is logged.
func doHTTP(ctx context.Context, p *Params) (*http.Response, []protocol.HTTPHeader, error) {
	if p.url.Scheme == "https" {
		// Checked on every call, not only when a connection is dialled: an
		// idle connection must not hide a CA file that is gone.
		if _, err := tlsConfig(); err != nil {
			slog.Debug("http/request failed", "url", p.url.String(), "err", err)
			return nil, nil, protocol.Internal("http/request failed: error sending request for url (%s)", p.url.String())
		}
	}
	var body io.Reader = http.NoBody
	if p.BodyBase64 != nil {
		body = bytes.NewReader(*p.BodyBase64)
	}
	req, err := http.NewRequestWithContext(ctx, p.Method, p.url.String(), body)
	if err != nil {
		return nil, nil, protocol.InvalidParams("http/request url is invalid: %v", err)
	}
	hasAccept := false
	for _, h := range p.Headers {
		req.Header.Add(h.Name, *h.Value)
		hasAccept = hasAccept || strings.EqualFold(h.Name, "accept")
	}
	if !hasAccept {
		req.Header.Set("Accept", "*/*")
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header["User-Agent"] = []string{""} // Go's default would be sent otherwise
	}
	var last net.Conn
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { last = info.Conn },
	}))
	client := &http.Client{Transport: httpTransport}
	if p.RedirectPolicy != nil && *p.RedirectPolicy == "stop" {
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	resp, err := client.Do(req)
	if err != nil {
		slog.Debug("http/request failed", "url", p.url.String(), "err", err)
		return nil, nil, protocol.Internal("http/request failed: error sending request for url (%s)", p.url.String())
	}
	headers := capturedHeaders(last, resp.StatusCode)
	if headers == nil {
		headers = sortedHeaders(resp)
	}
	return resp, headers, nil
}

// httpTransport reads each response's header block off the connection
// (captureConn) to answer with the headers in the order the server sent
// them: net/http keeps them in a map.
var httpTransport = &http.Transport{
	Proxy:              http.ProxyFromEnvironment,
	IdleConnTimeout:    90 * time.Second,
	DisableCompression: true, // the body is handed over as received
	DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{Timeout: 30 * time.Second}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &captureConn{Conn: c}, nil
	},
	DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		cfg, err := tlsConfig()
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(addr)
		cfg = cfg.Clone()
		cfg.ServerName = host
		raw, err := (&net.Dialer{Timeout: 30 * time.Second}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return &captureConn{Conn: tc}, nil
	},
	MaxResponseHeaderBytes: maxHTTPHeaderBytes,
}

// tlsConfig trusts CODEX_CA_CERTIFICATE, else SSL_CERT_FILE, else the
// system roots, as the reference; a named file that cannot be read or holds
// no certificate fails every https call (the reference's behaviour too).
func tlsConfig() (*tls.Config, error) {
	file := os.Getenv("CODEX_CA_CERTIFICATE")
	if file == "" {
		file = os.Getenv("SSL_CERT_FILE")
	}
	if file == "" {
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	}
	tlsCache.mu.Lock()
	defer tlsCache.mu.Unlock()
	st, statErr := os.Stat(file)
	if statErr == nil && tlsCache.file == file && tlsCache.mod.Equal(st.ModTime()) {
		return tlsCache.cfg, tlsCache.err
	}
	cfg, err := loadRoots(file)
	tlsCache.file, tlsCache.cfg, tlsCache.err = file, cfg, err
	if statErr == nil {
		tlsCache.mod = st.ModTime()
	}
	return cfg, err
}

var tlsCache struct {
	mu   sync.Mutex
	file string
	mod  time.Time
	cfg  *tls.Config
	err  error
}

func loadRoots(file string) (*tls.Config, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA certificates %s: %w", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA certificates %s: no certificate found", file)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// captureConn keeps the header block of the last final (non-1xx) response
// read from the connection: writing the next request on a kept-alive
// connection starts a new capture (net/http does not pipeline, so the
// response read after a request is that request's).
type captureConn struct {
	net.Conn
	mu   sync.Mutex
	buf  []byte
	done bool
}

func (c *captureConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.done {
		c.buf, c.done = nil, false
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *captureConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	if !c.done && n > 0 {
		c.buf = append(c.buf, b[:n]...)
		for !c.done {
			end := bytes.Index(c.buf, []byte("\r\n\r\n"))
			if end < 0 {
				if len(c.buf) > maxHTTPHeaderBytes {
					c.done, c.buf = true, nil
				}
				break
			}
			if bytes.HasPrefix(c.buf, []byte("HTTP/1.1 1")) || bytes.HasPrefix(c.buf, []byte("HTTP/1.0 1")) {
				c.buf = c.buf[end+4:] // an interim response
				continue
			}
			c.buf, c.done = c.buf[:end], true
		}
	}
	c.mu.Unlock()
	return n, err
}

// capturedHeaders parses the header block conn saw, when it is the one of
// a response with this status; nil otherwise.
func capturedHeaders(conn net.Conn, status int) []protocol.HTTPHeader {
	c, ok := conn.(*captureConn)
	if !ok {
		return nil
	}
	c.mu.Lock()
	block, done := c.buf, c.done
	c.mu.Unlock()
	if !done || block == nil {
		return nil
	}
	lines := strings.Split(string(block), "\r\n")
	if f := strings.Fields(lines[0]); len(f) < 2 || f[1] != strconv.Itoa(status) {
		return nil
	}
	out := []protocol.HTTPHeader{}
	for _, l := range lines[1:] {
		if l != "" && (l[0] == ' ' || l[0] == '\t') && len(out) > 0 {
			out[len(out)-1].Value += " " + strings.TrimSpace(l) // obsolete folding
			continue
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		out = append(out, protocol.HTTPHeader{Name: strings.ToLower(name), Value: strings.Trim(value, " \t")})
	}
	return out
}

// sortedHeaders is the fallback (a response through an https proxy): the
// map's names sorted, each name's values in order.
func sortedHeaders(resp *http.Response) []protocol.HTTPHeader {
	names := make([]string, 0, len(resp.Header))
	for k := range resp.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	out := []protocol.HTTPHeader{}
	for _, k := range names {
		for _, v := range resp.Header[k] {
			out = append(out, protocol.HTTPHeader{Name: strings.ToLower(k), Value: v})
		}
	}
	return out
}

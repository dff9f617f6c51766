package netproxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxHeader bounds a request's head (the client is the sandboxed command).
const maxHeader = 64 << 10

// blockedBody is the reference's 403 body (key order as measured on 0.171).
type blockedBody struct {
	Status   string `json:"status"`
	Host     string `json:"host"`
	Reason   string `json:"reason"`
	Decision string `json:"decision"`
	Source   string `json:"source"`
	Protocol string `json:"protocol"`
	Port     uint16 `json:"port"`
	Message  string `json:"message"`
}

// serveHTTP serves one client connection: CONNECT tunnels and
// absolute-URI requests, keep-alive between the latter.
func (p *Proxy) serveHTTP(c net.Conn) {
	lim := &headLimit{r: c}
	br := bufio.NewReaderSize(lim, 16<<10)
	for {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Minute))
		req, err := readHead(br, lim)
		if err != nil {
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			p.connect(c, br, req)
			return
		}
		if !p.forward(c, req) {
			return
		}
	}
}

// headLimit bounds what a request's head may read from the client, so
// that an endless header line cannot grow the server's memory.
// readHead reads one request from br, which reads through lim: its head
// may be at most maxHeader bytes, the body that follows is not bounded.
func readHead(br *bufio.Reader, lim *headLimit) (*http.Request, error) {
	lim.n = maxHeader
	req, err := http.ReadRequest(br)
	lim.n = 1 << 62
	return req, err
}

type headLimit struct {
	r io.Reader
	n int64
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	k, err := l.r.Read(p)
	l.n -= int64(k)
	return k, err
}

var errHeadTooLarge = errors.New("request head too large")

func splitHostPort(hostport string, def uint16) (string, uint16, bool) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") && def != 0 {
			return NormalizeHost(hostport), def, true
		}
		return "", 0, false
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return "", 0, false
	}
	return NormalizeHost(host), uint16(port), true
}

// connect serves a CONNECT request.
func (p *Proxy) connect(c net.Conn, br *bufio.Reader, req *http.Request) {
	host, port, ok := splitHostPort(req.Host, 0)
	if !ok {
		writeStatus(c, http.StatusBadRequest, "bad CONNECT target "+strconv.Quote(req.Host))
		return
	}
	t := &target{proto: ProtoHTTPSConnect, host: host, port: port, method: req.Method, client: c.RemoteAddr().String()}
	if err := p.decide(p.ctx, t); err != nil {
		writeBlocked(c, err)
		return
	}
	up, err := p.dial(p.ctx, t)
	if err != nil {
		if !writeBlocked(c, err) {
			writeStatus(c, http.StatusBadGateway, err.Error())
		}
		return
	}
	if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		up.Close()
		return
	}
	if br.Buffered() > 0 {
		c = &bufConn{Conn: c, r: br}
	}
	if p.intercepting(t) {
		p.intercept(c, t, up) // mitm.go
		return
	}
	pipe(c, up)
}

// hopHeaders are not forwarded (RFC 9110 7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward serves an absolute-URI request over a fresh connection to its
// host; it reports whether the client connection may serve another.
func (p *Proxy) forward(c net.Conn, req *http.Request) bool {
	defer req.Body.Close()
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		writeStatus(c, http.StatusBadRequest, "the proxy takes absolute http:// URIs and CONNECT")
		return false
	}
	host, port, ok := splitHostPort(req.URL.Host, 80)
	if !ok {
		writeStatus(c, http.StatusBadRequest, "bad host "+strconv.Quote(req.URL.Host))
		return false
	}
	t := &target{proto: ProtoHTTP, host: host, port: port, method: req.Method, client: c.RemoteAddr().String()}
	if req.Header.Get("X-Unix-Socket") != "" {
		// The reference proxies to unix sockets on macOS only.
		writeBlocked(c, p.block(t, Decision{Decision: DecisionDeny, Source: SourceBaseline, Reason: ReasonUnixSocket}))
		return false
	}
	if err := p.decide(p.ctx, t); err != nil {
		writeBlocked(c, err)
		return false
	}
	up, err := p.dial(p.ctx, t)
	if err != nil {
		if !writeBlocked(c, err) {
			writeStatus(c, http.StatusBadGateway, err.Error())
		}
		return false
	}
	defer up.Close()
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	req.RequestURI = ""
	p.restoreForward(req, t) // mitm.go
	// Keep the client's connection for another request unless it asked
	// to close (Connection: close, or HTTP/1.0 without keep-alive).
	keep := !req.Close
	req.Close = true // one request per upstream connection
	if err := req.Write(up); err != nil {
		writeStatus(c, http.StatusBadGateway, err.Error())
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(up), req)
	if err != nil {
		writeStatus(c, http.StatusBadGateway, err.Error())
		return false
	}
	defer resp.Body.Close()
	// A body delimited by the end of the connection ends the client's too.
	keep = keep && (resp.ContentLength >= 0 || len(resp.TransferEncoding) > 0)
	for _, h := range hopHeaders {
		if h != "Transfer-Encoding" {
			resp.Header.Del(h)
		}
	}
	resp.Close = !keep
	if err := resp.Write(c); err != nil {
		return false
	}
	return keep
}

// writeBlocked answers a refusal with the reference's 403; false when
// err is not one.
func writeBlocked(c net.Conn, err error) bool {
	var b *errBlocked
	if !errors.As(err, &b) {
		return false
	}
	d := b.d
	body, _ := json.Marshal(blockedBody{Status: "blocked", Host: d.Host, Reason: d.Reason, Decision: d.Decision,
		Source: d.Source, Protocol: d.Protocol, Port: d.Port, Message: blockedMessage(d.Reason)})
	resp := "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nx-proxy-error: " + blockedHeader(d.Reason) +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n"
	_, _ = c.Write(append([]byte(resp), body...))
	return true
}

func writeStatus(c net.Conn, code int, msg string) {
	msg += "\n"
	resp := "HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\nContent-Type: text/plain\r\nContent-Length: " +
		strconv.Itoa(len(msg)) + "\r\nConnection: close\r\n\r\n" + msg
	_, _ = c.Write([]byte(resp))
}

package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// handshakeTimeout bounds each TLS handshake of an interception.
const handshakeTimeout = 30 * time.Second

// intercepting reports whether the tunnel t must be intercepted.
func (p *Proxy) intercepting(t *target) bool {
	return p.cfg.Credentials.Intercepts(t.host, t.port) && p.cfg.CA != nil
}

// intercept serves a tunnel to a destination a masked credential is
// bound to: TLS with the command (a leaf for t.host from the executor's
// CA), TLS with the upstream (verified against UpstreamRoots, the system's
// by default, for t.host), then HTTP/1.1 requests one by one, the real
// credentials restored in their headers and the real values kept out of
// the responses. Requests always go to the tunnel's own destination,
// whatever their Host header says. c has been told the tunnel is open.
func (p *Proxy) intercept(c net.Conn, t *target, up net.Conn) {
	defer c.Close()
	defer up.Close()
	// Close ends the client's connection; this ends the upstream's too, so
	// that a wait for an upstream that never answers does not hold it.
	stop := context.AfterFunc(p.ctx, func() { up.Close() })
	defer stop()
	leaf, err := p.cfg.CA.Leaf(t.host)
	if err != nil {
		p.cfg.Logger.Warn("network proxy: no certificate for an intercepted host", "host", t.host, "err", err)
		return
	}
	_ = up.SetDeadline(time.Now().Add(handshakeTimeout))
	uc := tls.Client(up, &tls.Config{ServerName: t.host, RootCAs: p.cfg.UpstreamRoots, NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12})
	upErr := uc.HandshakeContext(p.ctx)
	_ = up.SetDeadline(time.Time{})
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(p.ctx); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	if upErr != nil {
		// The command learns why; the upstream's certificate did not
		// verify (or it did not answer), so nothing is sent to it.
		// It is answered after its first request (an HTTP client takes an
		// answer before it asks for a broken connection).
		p.cfg.Logger.Info("network proxy: intercepted upstream TLS failed", "host", t.host, "port", t.port, "err", upErr)
		_ = tc.SetReadDeadline(time.Now().Add(handshakeTimeout))
		lim := &headLimit{r: tc}
		if req, err := readHead(bufio.NewReader(lim), lim); err == nil {
			req.Body.Close()
			writeStatus(tc, http.StatusBadGateway, "upstream TLS: "+upErr.Error())
		}
		return
	}
	lim := &headLimit{r: tc}
	cbr := bufio.NewReaderSize(lim, 16<<10)
	ubr := bufio.NewReaderSize(uc, 16<<10)
	for {
		_ = tc.SetReadDeadline(time.Now().Add(5 * time.Minute))
		req, err := readHead(cbr, lim)
		if err != nil {
			return
		}
		_ = tc.SetReadDeadline(time.Time{})
		if !p.roundTrip(tc, uc, ubr, req, t) {
			return
		}
	}
}

// roundTrip forwards one intercepted request; false ends the tunnel.
func (p *Proxy) roundTrip(tc, uc net.Conn, ubr *bufio.Reader, req *http.Request, t *target) bool {
	defer req.Body.Close()
	rawPath := req.URL.EscapedPath()
	if req.URL.IsAbs() {
		// An absolute URI inside a tunnel names its own target: it is
		// treated as the tunnel's, and restored only when it agrees.
		if h, port := hostPort(req.URL.Host, 443); h != t.host || port != t.port || req.URL.Scheme != "https" {
			rawPath = ""
		}
	}
	if vars := p.cfg.Credentials.Restore(true, t.host, t.port, rawPath, req.Header); len(vars) > 0 {
		p.cfg.Logger.Info("network proxy: credentials restored", "host", t.host, "port", t.port, "method", req.Method, "vars", vars)
	}
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	keep := !req.Close
	if err := req.Write(uc); err != nil {
		writeStatus(tc, http.StatusBadGateway, err.Error())
		return false
	}
	resp, err := http.ReadResponse(ubr, req)
	if err != nil {
		writeStatus(tc, http.StatusBadGateway, err.Error())
		return false
	}
	defer resp.Body.Close()
	red := p.cfg.Credentials.redactions()
	for _, vs := range resp.Header {
		for i, v := range vs {
			vs[i] = redactString(v, red)
		}
	}
	if len(red) > 0 {
		resp.Body = &redactReader{r: resp.Body, pairs: red}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgrade (websocket) to the bound host: from here on bytes
		// pass as they are, nothing more is restored.
		if err := resp.Write(tc); err != nil {
			return false
		}
		pipe(tc, &bufConn{Conn: uc, r: ubr})
		return false
	}
	keep = keep && !resp.Close && (resp.ContentLength >= 0 || len(resp.TransferEncoding) > 0 ||
		req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified)
	resp.Close = !keep
	if err := resp.Write(tc); err != nil {
		return false
	}
	return keep
}

// restoreForward restores credentials on a plain HTTP request the proxy
// forwards (loopback destinations only: a credential is never bound to
// another host over HTTP).
func (p *Proxy) restoreForward(req *http.Request, t *target) {
	if vars := p.cfg.Credentials.Restore(false, t.host, t.port, req.URL.EscapedPath(), req.Header); len(vars) > 0 {
		p.cfg.Logger.Info("network proxy: credentials restored", "host", t.host, "port", t.port, "method", req.Method, "vars", vars)
	}
}

func redactString(s string, pairs [][2]string) string {
	for _, pr := range pairs {
		if strings.Contains(s, pr[0]) {
			s = strings.ReplaceAll(s, pr[0], pr[1])
		}
	}
	return s
}

// redactReader replaces real values by same-length stand-ins in a
// stream, holding back the bytes that could begin one.
type redactReader struct {
	r     io.Reader
	pairs [][2]string
	buf   []byte // read, not yet given out
	out   []byte // ready
	eof   bool
}

func (rr *redactReader) Read(b []byte) (int, error) {
	for len(rr.out) == 0 {
		if rr.eof {
			if len(rr.buf) == 0 {
				return 0, io.EOF
			}
			rr.out, rr.buf = rr.redact(rr.buf), nil
			break
		}
		var tmp [16 << 10]byte
		n, err := rr.r.Read(tmp[:])
		rr.buf = append(rr.buf, tmp[:n]...)
		if err == io.EOF {
			rr.eof = true
		} else if err != nil {
			return 0, err
		}
		hold := 0
		for _, pr := range rr.pairs {
			hold = max(hold, len(pr[0])-1)
		}
		rr.buf = rr.redact(rr.buf)
		if !rr.eof && len(rr.buf) > hold {
			cut := len(rr.buf) - hold
			rr.out = append(rr.out[:0], rr.buf[:cut]...)
			rr.buf = append(rr.buf[:0], rr.buf[cut:]...)
		}
	}
	n := copy(b, rr.out)
	rr.out = rr.out[n:]
	return n, nil
}

func (rr *redactReader) redact(b []byte) []byte {
	for _, pr := range rr.pairs {
		if bytes.Contains(b, []byte(pr[0])) {
			b = bytes.ReplaceAll(b, []byte(pr[0]), []byte(pr[1]))
		}
	}
	return b
}

func (rr *redactReader) Close() error {
	if c, ok := rr.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

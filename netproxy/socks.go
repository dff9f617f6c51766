package netproxy

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"time"
)

// SOCKS5 (RFC 1928), the CONNECT command, no authentication. Written here
// rather than taken from a library: the maintained server library
// (github.com/things-go/go-socks5) is not served by the Go module proxy
// (403), and github.com/armon/go-socks5 has had no release or change since
// 2016 and resolves a name before its rule check, so a denied name would
// still be looked up. This is the one decoder the proxy needs (fuzzed in
// FuzzSOCKSRequest).

const (
	socksVersion = 5
	cmdConnect   = 1
	atypIPv4     = 1
	atypDomain   = 3
	atypIPv6     = 4

	repSucceeded       = 0
	repGeneralFailure  = 1
	repNotAllowed      = 2
	repHostUnreachable = 4
	repCmdUnsupported  = 7
	repAtypUnsupported = 8
)

var errSOCKS = errors.New("socks5: malformed request")

// socksRequest is a decoded request.
type socksRequest struct {
	cmd  byte
	host string // a name or an IP literal
	port uint16
	atyp byte
}

// readSOCKSGreeting reads the method selection and answers it: no
// authentication, or none acceptable.
func readSOCKSGreeting(r io.Reader, w io.Writer) error {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return err
	}
	if h[0] != socksVersion {
		return errSOCKS
	}
	methods := make([]byte, h[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return err
	}
	for _, m := range methods {
		if m == 0 {
			_, err := w.Write([]byte{socksVersion, 0})
			return err
		}
	}
	_, _ = w.Write([]byte{socksVersion, 0xff})
	return errSOCKS
}

// readSOCKSRequest reads one request. An unknown address type is
// returned with atyp set and no host.
func readSOCKSRequest(r io.Reader) (*socksRequest, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	if h[0] != socksVersion {
		return nil, errSOCKS
	}
	req := &socksRequest{cmd: h[1], atyp: h[3]}
	switch h[3] {
	case atypIPv4:
		var a [4]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return nil, err
		}
		req.host = netip.AddrFrom4(a).String()
	case atypIPv6:
		var a [16]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return nil, err
		}
		req.host = netip.AddrFrom16(a).String()
	case atypDomain:
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return nil, err
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(r, name); err != nil {
			return nil, err
		}
		req.host = string(name)
	default:
		return req, nil
	}
	var p [2]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return nil, err
	}
	req.port = binary.BigEndian.Uint16(p[:])
	return req, nil
}

// socksReply writes a reply with a zero IPv4 bound address.
func socksReply(w io.Writer, rep byte) error {
	_, err := w.Write([]byte{socksVersion, rep, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// serveSOCKS serves one SOCKS5 client connection.
func (p *Proxy) serveSOCKS(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if err := readSOCKSGreeting(c, c); err != nil {
		return
	}
	req, err := readSOCKSRequest(c)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case req.cmd != cmdConnect:
		// UDP ASSOCIATE and BIND are not offered: the command has no UDP
		// way out even when the launch has enableSocks5Udp (stricter than
		// the reference; documented in docs/network-proxy.md).
		_ = socksReply(c, repCmdUnsupported)
		return
	case req.host == "":
		_ = socksReply(c, repAtypUnsupported)
		return
	}
	t := &target{proto: ProtoSOCKS5TCP, host: NormalizeHost(req.host), port: req.port, client: c.RemoteAddr().String()}
	if t.port == 0 {
		_ = socksReply(c, repGeneralFailure)
		return
	}
	if err := p.decide(p.ctx, t); err != nil {
		_ = socksReply(c, repNotAllowed)
		return
	}
	up, err := p.dial(p.ctx, t)
	if err != nil {
		var b *errBlocked
		if errors.As(err, &b) {
			_ = socksReply(c, repNotAllowed)
		} else {
			_ = socksReply(c, repHostUnreachable)
		}
		return
	}
	if err := socksReply(c, repSucceeded); err != nil {
		up.Close()
		return
	}
	if p.intercepting(t) {
		p.intercept(c, t, up) // mitm.go
		return
	}
	pipe(c, up)
}

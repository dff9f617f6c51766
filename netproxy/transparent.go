package netproxy

import (
	"errors"
	"net"
	"net/netip"
)

// Transparent TCP: the command's network namespace redirects its raw TCP
// connections (to anything but its own 127.0.0.1 and ::1) to a listener
// served here (package sandbox, transparent_linux.go). The proxy reads
// where each was going from the kernel (SO_ORIGINAL_DST), then treats it
// as a SOCKS5 CONNECT to that address: same policy, same decider, same
// decisions (protocol socks5_tcp, the host an IP literal). A refused one
// is reset: its connect() had already succeeded, so the command sees
// ECONNRESET on its first read or write.

// ServeTransparent accepts redirected connections on each listener until
// Close. It returns at once.
func (p *Proxy) ServeTransparent(lns ...net.Listener) {
	for _, ln := range lns {
		p.serve(ln, p.serveTransparent)
	}
}

// errNotRedirected is a connection that reached the transparent port
// without a redirect (the command connected to it directly).
var errNotRedirected = errors.New("transparent proxy: connection not redirected")

func (p *Proxy) serveTransparent(c net.Conn) {
	dst, err := originalDst(c)
	if err == nil {
		// The listener's own address is no destination: the command
		// connected to the port itself.
		if la, ok := c.LocalAddr().(*net.TCPAddr); ok && la.AddrPort().Addr().Unmap() == dst.Addr().Unmap() && la.AddrPort().Port() == dst.Port() {
			err = errNotRedirected
		}
	}
	if err != nil {
		p.cfg.Logger.Info("network proxy: transparent connection without a destination", "err", err)
		reset(c)
		return
	}
	t := &target{proto: ProtoSOCKS5TCP, host: dst.Addr().Unmap().String(), port: dst.Port(), client: c.RemoteAddr().String()}
	if t.port == 0 {
		reset(c)
		return
	}
	if err := p.decide(p.ctx, t); err != nil {
		reset(c)
		return
	}
	up, err := p.dial(p.ctx, t)
	if err != nil {
		reset(c)
		return
	}
	pipe(c, up)
}

// reset closes c with a RST rather than a FIN, so a refused connection
// is not read as an empty answer.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// originalDst is the address a redirected connection was made to.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("transparent proxy: not a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var gerr error
	if err := rc.Control(func(fd uintptr) { ap, gerr = sockOriginalDst(int(fd), tc.LocalAddr().(*net.TCPAddr).IP.To4() == nil) }); err != nil {
		return netip.AddrPort{}, err
	}
	return ap, gerr
}

// Package netproxy is the managed network proxy of one sandboxed process
// (the reference's networkProxyLaunch): an HTTP proxy (CONNECT tunnels and
// absolute-URI forwarding) and a SOCKS5 proxy (CONNECT) that let the
// command reach only the hosts its policy allows. The command's own
// network namespace holds nothing but loopback (package sandbox), so these
// listeners, which the sandbox's init opens inside that namespace and
// hands to the server, are its only way out.
//
// Every destination is checked by Policy; a miss may be put to a Decider
// (the client's network/policyRequest); every refusal is reported to
// OnDecision and answered as the reference does (HTTP 403 with a JSON
// body and x-proxy-error; a SOCKS5 "not allowed by ruleset" reply). The
// dial itself refuses loopback and private addresses unless the host was
// explicitly allowed, so a name that resolves to one (DNS rebinding) gets
// no further. With an upstream proxy every connection goes through it by
// CONNECT.
package netproxy

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Request is what a Decider is asked about.
type Request struct {
	Protocol string
	Host     string
	Port     uint16
}

// Answer is a Decider's answer.
type Answer struct {
	Decision string // DecisionAllow, DecisionDeny or DecisionAsk
	Reason   string
}

// Decider answers an allowlist miss (or a review domain). An error or a
// context that ends first is a denial.
type Decider func(ctx context.Context, r Request) (Answer, error)

// Decision is one decision, as reported to OnDecision.
type Decision struct {
	Time     time.Time
	Decision string // allow, deny or ask
	Source   string
	Reason   string
	Protocol string
	Host     string
	Port     uint16
	Method   string // HTTP only
	Client   string // the command's address
}

// Config configures a Proxy.
type Config struct {
	Policy *Policy
	// Decider, when set, is asked about allowlist misses and review
	// domains, for at most DecideTimeout each.
	Decider       Decider
	DecideTimeout time.Duration
	// OnDecision is called for every decision (an allowed destination
	// too, as the reference: decision allow, reason "allow"); it must not
	// block long.
	OnDecision func(Decision)
	// Upstream, when set (host:port), is an HTTP proxy every connection
	// goes through by CONNECT (the server's --tcp-upstream-proxy).
	Upstream string
	// Forbidden, when set, names addresses no connection may reach, even
	// when the host is allowed and local addresses are: the exec-server's
	// own listeners (a command that reached them could start unconfined
	// processes).
	Forbidden func(netip.AddrPort) bool
	// SOCKS enables the SOCKS5 listener.
	SOCKS bool
	// DialTimeout bounds each outbound connection (30s).
	DialTimeout time.Duration
	// MaxConns bounds the command's connections open at once, all
	// listeners together (512): past it the proxy stops accepting and the
	// kernel's backlog holds the rest, so a command cannot spend the
	// server's descriptors.
	MaxConns int
	// MaxAsks bounds the decider's requests in flight at once (16); the
	// others wait, within their own timeout.
	MaxAsks int
	Logger  *slog.Logger

	// Credentials, when set, are the command's masked credentials (see
	// mask.go): tunnels to their HTTPS destinations are intercepted with
	// CA, and their real values restored on the way out.
	Credentials *Credentials
	CA          *CA
	// UpstreamRoots verifies intercepted upstreams (nil: the system's).
	UpstreamRoots *x509.CertPool
}

// Proxy serves one process's listeners until Close.
type Proxy struct {
	cfg Config

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	slots chan struct{} // MaxConns
	asks  chan struct{} // MaxAsks

	mu    sync.Mutex
	lns   []net.Listener
	conns map[net.Conn]struct{}
}

// New returns a Proxy; Serve starts it.
func New(cfg Config) *Proxy {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DecideTimeout <= 0 {
		cfg.DecideTimeout = 30 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 512
	}
	if cfg.MaxAsks <= 0 {
		cfg.MaxAsks = 16
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxy{cfg: cfg, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{},
		slots: make(chan struct{}, cfg.MaxConns), asks: make(chan struct{}, cfg.MaxAsks)}
}

// Serve accepts on the HTTP listener and, when not nil, the SOCKS5 one,
// until Close. It returns at once.
func (p *Proxy) Serve(httpLn, socksLn net.Listener) {
	p.serve(httpLn, p.serveHTTP)
	if socksLn != nil {
		p.serve(socksLn, p.serveSOCKS)
	}
}

func (p *Proxy) serve(ln net.Listener, handle func(net.Conn)) {
	p.mu.Lock()
	if p.ctx.Err() != nil {
		p.mu.Unlock()
		ln.Close()
		return
	}
	p.lns = append(p.lns, ln)
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				if p.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
					p.cfg.Logger.Warn("network proxy: accept", "err", err)
					time.Sleep(10 * time.Millisecond) // EMFILE and the like
					continue
				}
				return
			}
			// At most MaxConns served at once: this listener accepts no
			// more (one waits here) until one ends.
			select {
			case p.slots <- struct{}{}:
			case <-p.ctx.Done():
				c.Close()
				return
			}
			if !p.track(c) {
				c.Close()
				<-p.slots
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { <-p.slots }()
				defer p.untrack(c)
				handle(c)
			}()
		}
	}()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Close stops the listeners, ends every connection and waits for them.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.cancel()
	for _, ln := range p.lns {
		ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// target is one checked destination.
type target struct {
	proto, host, method, client string
	port                        uint16
	localOK                     bool
}

// errBlocked is a refusal; it carries what the answer needs.
type errBlocked struct{ d Decision }

func (e *errBlocked) Error() string { return "blocked: " + e.d.Reason }

// decide applies the policy, then the decider, to t. It reports every
// refusal and returns it as *errBlocked.
func (p *Proxy) decide(ctx context.Context, t *target) error {
	v := p.cfg.Policy.Check(t.host, t.method, t.proto != ProtoHTTP)
	t.localOK = v.LocalOK
	if v.Allowed {
		p.report(t, Decision{Decision: DecisionAllow, Source: SourceBaseline, Reason: reasonAllow})
		return nil
	}
	d := Decision{Decision: DecisionDeny, Source: SourceBaseline, Reason: v.Reason}
	if v.Review && p.cfg.Decider != nil {
		dctx, cancel := context.WithTimeout(ctx, p.cfg.DecideTimeout)
		var a Answer
		var err error
		select {
		case p.asks <- struct{}{}:
			a, err = p.cfg.Decider(dctx, Request{Protocol: t.proto, Host: t.host, Port: t.port})
			<-p.asks
		case <-dctx.Done():
			err = dctx.Err()
		}
		cancel()
		d.Source = SourceDecider
		switch {
		case err != nil:
			p.cfg.Logger.Info("network proxy: no decision, denied", "host", t.host, "err", err)
		case a.Decision == DecisionAllow:
			p.cfg.Logger.Info("network proxy: allowed by the client", "host", t.host, "port", t.port, "protocol", t.proto)
			p.report(t, Decision{Decision: DecisionAllow, Source: SourceDecider, Reason: reasonAllow})
			return nil
		case a.Decision == DecisionAsk:
			d.Decision, d.Reason = DecisionAsk, a.Reason
		default:
			d.Reason = a.Reason
		}
	}
	return p.block(t, d)
}

// reasonAllow is the reference's reason of an allowed destination.
const reasonAllow = "allow"

// report fills d in for t and gives it to OnDecision.
func (p *Proxy) report(t *target, d Decision) Decision {
	d.Time, d.Protocol, d.Host, d.Port, d.Method, d.Client = time.Now(), t.proto, t.host, t.port, t.method, t.client
	if p.cfg.OnDecision != nil {
		p.cfg.OnDecision(d)
	}
	return d
}

// block reports d for t and returns it as an error.
func (p *Proxy) block(t *target, d Decision) error {
	p.cfg.Logger.Info("network proxy: blocked", "host", t.host, "port", t.port, "protocol", t.proto,
		"decision", d.Decision, "source", d.Source, "reason", d.Reason)
	return &errBlocked{p.report(t, d)}
}

// errLocal is a dial refused because the address is not public;
// errForbidden one refused by Config.Forbidden.
var (
	errLocal     = errors.New("address is loopback or private")
	errForbidden = errors.New("address is the exec-server's own")
)

// dial connects to t (already allowed), directly or through the upstream
// proxy. A refused local address is reported and returned as *errBlocked.
func (p *Proxy) dial(ctx context.Context, t *target) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	addr := net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
	if ip, err := netip.ParseAddr(t.host); err == nil && p.cfg.Forbidden != nil && p.cfg.Forbidden(netip.AddrPortFrom(ip, t.port)) {
		return nil, p.block(t, Decision{Decision: DecisionDeny, Source: SourceBaseline, Reason: ReasonDenied})
	}
	if p.cfg.Upstream != "" {
		return p.dialUpstream(ctx, addr)
	}
	d := net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		switch {
		case err != nil:
			return errLocal
		case p.cfg.Forbidden != nil && p.cfg.Forbidden(ap):
			return errForbidden
		case !t.localOK && !IsPublic(ap.Addr()):
			return errLocal
		}
		return nil
	}}
	c, err := d.DialContext(ctx, "tcp", addr)
	switch {
	case err == nil:
	case errors.Is(err, errLocal):
		return nil, p.block(t, Decision{Decision: DecisionDeny, Source: SourceBaseline, Reason: ReasonNotAllowedLocal})
	case errors.Is(err, errForbidden):
		return nil, p.block(t, Decision{Decision: DecisionDeny, Source: SourceBaseline, Reason: ReasonDenied})
	}
	return c, err
}

// dialUpstream opens a CONNECT tunnel to addr through the upstream proxy.
func (p *Proxy) dialUpstream(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream proxy %s: %w", p.cfg.Upstream, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	req := "CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s: %w", p.cfg.Upstream, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s: %w", p.cfg.Upstream, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s refused CONNECT %s: %s", p.cfg.Upstream, addr, resp.Status)
	}
	_ = c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// bufConn is a connection whose first bytes were read ahead.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// pipe copies both ways until either side ends, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // splice(2) between TCP sockets
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	cp(b, a)
	<-done
	a.Close()
	b.Close()
}

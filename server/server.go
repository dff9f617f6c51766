package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/execgo/exec-server/fsys"
	"github.com/execgo/exec-server/internal/budget"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/netproxy"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
	"github.com/execgo/exec-server/transport"
)

// Server serves the protocol. Build one with New, then either Run it on
// its configured listener or hand it streams with ServeStream (embedding,
// tests, relays). It is safe for concurrent use.
type Server struct {
	cfg     Config
	methods map[string]method
	fs      *fsys.FS // the filesystem family (fs/*)

	mu       sync.Mutex
	sessions map[string]*session
	closed   bool

	envOnce  sync.Once
	envCache protocol.EnvironmentInfo

	// probes holds, for each live connection whose stream can be pinged,
	// how to check it and how to cut it (*jsonrpc.Conn → connProbe).
	probes sync.Map

	// Server-wide byte budgets (see Config).
	incoming, retained, stdin *budget.Bytes

	ownAddrs    sync.Map     // netip.AddrPort of each listener → true (network.go)
	obs         *observer    // logs and metrics of what happens
	metricsHTTP http.Handler // /metrics; nil without Config.Metrics

	peers *peerGuard // refuses peers inside this server's sandboxes; nil when off

	mask netproxy.Authority // credential masking's CA, made on first use
}

// New returns a server for cfg.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg.withDefaults(), sessions: make(map[string]*session)}
	s.incoming = budget.New("incoming message bytes", s.cfg.MaxIncomingBytes)
	s.retained = budget.New("retained output bytes", s.cfg.MaxRetainedBytes)
	s.stdin = budget.New("queued stdin bytes", s.cfg.MaxStdinBytes)
	s.fs = fsys.New(fsys.Options{MaxFileBytes: s.cfg.MaxFileBytes, MaxHandles: s.cfg.MaxHandles})
	var m *metrics
	if s.cfg.Metrics != nil {
		var err error
		if m, err = newMetrics(s, s.cfg.Metrics); err != nil {
			s.cfg.Logger.Warn("metrics off: cannot register them", "err", err)
			m = nil
		} else {
			s.metricsHTTP = newMetricsHTTP(s.cfg.Metrics, s.cfg.Logger)
		}
	}
	s.obs = newObserver(s.cfg.Logger, m)
	s.methods = s.buildMethods()
	if !s.cfg.AllowSandboxPeers {
		s.peers = newPeerGuard(s.cfg.Logger)
	}
	return s
}

// ErrServerClosed is returned by Serve once its context has ended and its
// sessions are gone, as net/http's Serve returns http.ErrServerClosed.
var ErrServerClosed = errors.New("server: closed")

// Run serves cfg.Listen until ctx ends (or, on stdio, until stdin closes),
// then kills every managed process and returns nil; other errors (a bad
// Listen, a port in use) are returned as they happen.
func Run(ctx context.Context, cfg Config) error {
	return New(cfg).Run(ctx)
}

// ListenError is ParseListen's error: a listen URL that is not
// "ws://HOST:PORT" (Unsupported: not a ws:// URL at all) or "stdio". Its
// text names no flag; a command line adds its own flag's name.
type ListenError struct {
	URL         string
	Unsupported bool // not ws:// nor stdio; otherwise a bad host or port
}

func (e *ListenError) Error() string {
	if e.Unsupported {
		return fmt.Sprintf("unsupported listen URL `%s`; expected `ws://IP:PORT` or `stdio`", e.URL)
	}
	return fmt.Sprintf("invalid websocket listen URL `%s`; expected `ws://IP:PORT` (or `ws://localhost:PORT`)", e.URL)
}

// ParseListen checks a listen URL. It returns stdio for "stdio" and
// "stdio://", otherwise the host:port of a ws:// URL whose host is an IP
// literal or localhost; localhost is returned as 127.0.0.1, so that it
// binds the loopback interface only, whatever /etc/hosts says. Errors are
// *ListenError.
func ParseListen(listen string) (stdio bool, addr string, err error) {
	switch listen {
	case "stdio", "stdio://":
		return true, "", nil
	}
	rest, ok := strings.CutPrefix(listen, "ws://")
	if !ok {
		return false, "", &ListenError{URL: listen, Unsupported: true}
	}
	rest = strings.TrimSuffix(rest, "/")
	if port, ok := strings.CutPrefix(rest, "localhost:"); ok {
		rest = "127.0.0.1:" + port
	}
	if _, err := netip.ParseAddrPort(rest); err != nil {
		return false, "", &ListenError{URL: listen}
	}
	return false, rest, nil
}

// Run serves the configured listener until ctx ends, then ends every
// session. It returns nil when ctx ended it.
func (s *Server) Run(ctx context.Context) error {
	logSandboxSupport(s.cfg.Logger)
	stdio, addr, err := ParseListen(s.cfg.Listen)
	if err != nil {
		return err
	}
	defer s.Close()
	if stdio {
		in, out := s.cfg.Stdin, s.cfg.Stdout
		if in == nil {
			in = os.Stdin
		}
		if out == nil {
			out = os.Stdout
		}
		for _, p := range []struct {
			name string
			f    any
		}{{"stdin", in}, {"stdout", out}} {
			if err := growPipe(p.f); err != nil {
				s.cfg.Logger.Debug("stdio pipe not grown", "pipe", p.name, "size", stdioPipeSize, "err", err)
			}
		}
		st := transport.NewStdio(in, out, nil, int(s.cfg.MaxMessageBytes))
		s.cfg.Logger.Info("serving on stdio")
		// A blocked read of stdin cannot be interrupted; when ctx ends we
		// return without waiting for it.
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.ServeStreamWith(ctx, st, StreamOptions{EndSessionOnClose: true})
		}()
		select {
		case <-done:
			s.cfg.Logger.Info("shutting down: stdin closed")
		case <-ctx.Done():
			s.cfg.Logger.Info("shutting down", "reason", context.Cause(ctx))
		}
		return nil
	}
	l, err := transport.Listen(addr)
	if err != nil {
		return err
	}
	if err := s.Serve(ctx, l); !errors.Is(err, ErrServerClosed) {
		return err
	}
	return nil
}

// Serve accepts websocket connections on l until ctx ends; it then closes
// l, ends every session (killing their processes) and returns
// ErrServerClosed. Any other error is the listener's.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	scheme := "ws"
	if s.cfg.TLSConfig != nil {
		scheme = "wss"
		l = tls.NewListener(l, s.cfg.TLSConfig)
	}
	hs := &http.Server{
		Handler:           s.Handler(ctx),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		// net/http's own complaints (TLS handshakes, bad requests) go
		// to the configured logger, not to the log package's stderr.
		ErrorLog: slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
	s.addOwnAddr(l.Addr())
	url := fmt.Sprintf("%s://%s", scheme, l.Addr())
	if s.cfg.OnListen != nil {
		s.cfg.OnListen(url)
	}
	s.cfg.Logger.Info("listening", "url", url)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.cfg.Logger.Info("shutting down", "reason", context.Cause(ctx))
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	<-errc
	s.Close()
	return ErrServerClosed
}

// Handler returns the websocket listener's HTTP handler: the protocol on
// "/", /readyz and /metrics (when Config.Metrics is set). Connections end
// when ctx does.
func (s *Server) Handler(ctx context.Context) http.Handler {
	authenticate := s.authenticate()
	ws := transport.NewHandler(transport.HandlerOptions{
		MaxMessageBytes: s.cfg.MaxMessageBytes,
		MaxConnections:  s.cfg.MaxConnections,
		MessageBudget:   s.incoming,
		StallTimeout:    s.cfg.MessageStallTimeout,
		Authenticate:    authenticate,
		Logger:          s.cfg.Logger,
		Context:         ctx,
		Serve: func(cctx context.Context, ws *transport.WebSocket) {
			s.serveCounted(cctx, ws, false)
		},
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.refuseSandboxPeer(w, r) {
			return
		}
		if _, ok := r.Header["Origin"]; ok {
			// The transport refuses it (403) on every path; logged here.
			s.refused(r, http.StatusForbidden, errors.New("request has an Origin header (a browser page)"))
		} else if r.URL.Path == "/metrics" && s.serveMetrics(w, r, authenticate) {
			return
		}
		ws.ServeHTTP(w, s.withIdentity(r))
	})
}

// authenticate is Config.Authenticate (nil when unset), logging and
// counting each refusal.
func (s *Server) authenticate() func(*http.Request) error {
	if s.cfg.Authenticate == nil {
		return nil
	}
	return func(r *http.Request) error {
		err := s.cfg.Authenticate(r)
		if err != nil {
			s.refused(r, http.StatusUnauthorized, err)
		}
		return err
	}
}

// refused logs a refused HTTP request at info: the operator sees probes
// and misconfigured clients without debug logs.
// Anyone who reaches the listener can cause refusals: past refusalBurst
// lines in a second the rest are only counted (and the metric), and the
// next logged line says how many were left out.
func (s *Server) refused(r *http.Request, code int, err error) {
	s.obs.refusal(code)
	if n, ok := s.obs.refusalLogs.allow(time.Now()); ok {
		attrs := []any{"peer", r.RemoteAddr, "path", r.URL.Path, "status", code, "reason", err}
		if n > 0 {
			attrs = append(attrs, "suppressed", n)
		}
		s.cfg.Logger.Info("request refused", attrs...)
	}
}

// StreamOptions say how ServeStreamWith treats a stream's session.
type StreamOptions struct {
	// EndSessionOnClose ends the session, killing its processes, when the
	// stream ends, as on stdio; a peer that closed its sending side still
	// gets a while to read the replies. Otherwise the session is detached
	// when the stream ends and may be resumed for Config.SessionTTL.
	EndSessionOnClose bool
}

// ServeStream serves one connection until it ends. Its session is
// detached when the stream ends and survives for SessionTTL, resumable
// with resumeSessionId: ServeStreamWith(ctx, st, StreamOptions{}).
func (s *Server) ServeStream(ctx context.Context, st jsonrpc.Stream) {
	s.ServeStreamWith(ctx, st, StreamOptions{})
}

// ServeStreamWith serves one connection until it ends, with the session
// lifetime opts asks for.
func (s *Server) ServeStreamWith(ctx context.Context, st jsonrpc.Stream, opts StreamOptions) {
	s.serveCounted(ctx, st, opts.EndSessionOnClose)
}

// serveCounted is serve, counted in the connection metrics.
func (s *Server) serveCounted(ctx context.Context, st jsonrpc.Stream, endSessionOnClose bool) {
	done := s.obs.connOpened()
	defer done()
	s.serve(ctx, st, endSessionOnClose)
}

func (s *Server) serve(ctx context.Context, st jsonrpc.Stream, endSessionOnClose bool) {
	opts := jsonrpc.Options{
		Concurrency: s.cfg.ConcurrentRequests,
		QueueBytes:  s.cfg.MaxQueueBytes,
		Logger:      s.cfg.Logger,
		MapError:    wireError,
	}
	if endSessionOnClose {
		// stdio: a client may close stdin and still read the replies.
		opts.DrainOnEOF = 10 * time.Second
	}
	conn := jsonrpc.NewConn(st, opts)
	if p, ok := st.(pinger); ok {
		s.probes.Store(conn, connProbe{ping: p.Ping, cut: st.Close})
		defer s.probes.Delete(conn)
	}
	cs := &connState{srv: s, conn: conn, endSessionOnClose: endSessionOnClose, identity: identityOf(ctx, endSessionOnClose)}
	cs.handles = s.fs.NewHandles()
	s.cfg.Logger.Debug("connection opened", "peer", st.Describe())
	if !endSessionOnClose {
		// An upgraded connection that never initializes would hold a
		// connection slot for free; it gets InitTimeout to start.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		t := time.AfterFunc(s.cfg.InitTimeout, func() {
			if cs.sess() == nil {
				s.cfg.Logger.Info("closing a connection that did not initialize in time", "peer", st.Describe(), "timeout", s.cfg.InitTimeout)
				cancel()
			}
		})
		defer t.Stop()
	}
	err := conn.Run(ctx, cs.dispatch)
	cs.close()
	if errors.Is(err, io.EOF) {
		err = nil // the peer closed: the normal end
	}
	s.cfg.Logger.Debug("connection closed", "peer", st.Describe(), "err", err)
}

// Close ends every session and kills every managed process.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	all := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, ss := range all {
		wg.Add(1)
		go func() { defer wg.Done(); ss.end() }()
	}
	wg.Wait()
	// The sandboxes' traces on the host (the mount points of missing
	// protected paths, such as WORK/.codex) go before the server does:
	// idle fs helpers end now, and those in flight are waited for.
	ctx, cancel := context.WithTimeout(context.Background(), quiesceTimeout)
	sandbox.Quiesce(ctx)
	cancel()
	s.mask.Close()
}

// quiesceTimeout bounds how long Close waits for the sandboxes' clean-up.
const quiesceTimeout = 15 * time.Second

var errServerClosed = errors.New("server is shutting down")

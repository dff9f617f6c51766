package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/execgo/exec-server/internal/budget"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/transport"
)

// Server serves the protocol. Build one with New, then either Run it on
// its configured listener or hand it streams with ServeStream (embedding,
// tests, relays). It is safe for concurrent use.
type Server struct {
	cfg     Config
	methods map[string]method
	fs      fsService

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
}

// New returns a server for cfg.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg.withDefaults(), sessions: make(map[string]*session)}
	s.incoming = budget.New("incoming message bytes", s.cfg.MaxIncomingBytes)
	s.retained = budget.New("retained output bytes", s.cfg.MaxRetainedBytes)
	s.stdin = budget.New("queued stdin bytes", s.cfg.MaxStdinBytes)
	s.fs = newFS(s.cfg)
	s.methods = s.buildMethods()
	return s
}

// Run serves cfg.Listen until ctx ends (or, on stdio, until stdin closes),
// then kills every managed process and returns.
func Run(ctx context.Context, cfg Config) error {
	return New(cfg).Run(ctx)
}

// ParseListen checks a --listen value. It returns "stdio" or the host:port
// of a ws:// URL whose host is an IP literal.
func ParseListen(listen string) (stdio bool, addr string, err error) {
	switch listen {
	case "stdio", "stdio://":
		return true, "", nil
	}
	rest, ok := strings.CutPrefix(listen, "ws://")
	if !ok {
		return false, "", fmt.Errorf("unsupported --listen URL `%s`; expected `ws://IP:PORT` or `stdio`", listen)
	}
	if _, err := netip.ParseAddrPort(strings.TrimSuffix(rest, "/")); err != nil {
		return false, "", fmt.Errorf("invalid websocket --listen URL `%s`; expected `ws://IP:PORT`", listen)
	}
	return false, strings.TrimSuffix(rest, "/"), nil
}

// Run serves the configured listener until ctx ends.
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
		st := transport.NewStdio(in, out, nil, int(s.cfg.MaxMessageBytes))
		// A blocked read of stdin cannot be interrupted; when ctx ends we
		// return without waiting for it.
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.ServeStream(ctx, st)
		}()
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	}
	l, err := transport.Listen(addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, l)
}

// Serve accepts websocket connections on l until ctx ends.
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
		ErrorLog:          nil,
	}
	if s.cfg.OnListen != nil {
		s.cfg.OnListen(fmt.Sprintf("%s://%s", scheme, l.Addr()))
	}
	s.cfg.Logger.Info("listening", "url", fmt.Sprintf("%s://%s", scheme, l.Addr()))
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	<-errc
	return nil
}

// Handler returns the websocket listener's HTTP handler; connections end
// when ctx does.
func (s *Server) Handler(ctx context.Context) http.Handler {
	return transport.NewHandler(transport.HandlerOptions{
		MaxMessageBytes: s.cfg.MaxMessageBytes,
		MaxConnections:  s.cfg.MaxConnections,
		MessageBudget:   s.incoming,
		StallTimeout:    s.cfg.MessageStallTimeout,
		Authenticate:    s.cfg.Authenticate,
		Logger:          s.cfg.Logger,
		Serve: func(rctx context.Context, ws *transport.WebSocket) {
			cctx, cancel := context.WithCancel(rctx)
			defer cancel()
			stop := context.AfterFunc(ctx, cancel)
			defer stop()
			s.serve(cctx, ws, false)
		},
	})
}

// ServeStream serves one connection until it ends. A *transport.Stdio
// stream's session ends with it (its processes are killed); any other
// stream's session is detached and survives for SessionTTL, resumable with
// resumeSessionId.
func (s *Server) ServeStream(ctx context.Context, st jsonrpc.Stream) {
	_, isStdio := st.(*transport.Stdio)
	s.serve(ctx, st, isStdio)
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
	cs := &connState{srv: s, conn: conn, endSessionOnClose: endSessionOnClose}
	cs.handles = s.fs.newHandles()
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
}

var errServerClosed = errors.New("server is shutting down")

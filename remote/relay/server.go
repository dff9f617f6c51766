package relay

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/execgo/exec-server/remote/internal/envreg"
)

// Options configure a Server. Zero limits take the defaults below.
type Options struct {
	// ExecutorTokens are accepted as bearer tokens on register and
	// validate, HarnessTokens on connect. Both are required unless
	// InsecureNoAuth (then any request is accepted; cmd/exec-relay allows
	// that on a loopback listener only).
	ExecutorTokens, HarnessTokens *Tokens
	InsecureNoAuth                bool
	// DirectKeys, when set, serves the direct transport (direct.go): the
	// SigV4 secret of each AWS access key id allowed to register.
	DirectKeys func(accessKeyID string) (secret string, ok bool)

	// PublicURL is the base (http://host:port or https://…) the minted
	// rendezvous URLs point at; empty: the scheme and Host of each request.
	PublicURL string
	// URLSecret signs rendezvous URLs (≥ 32 bytes); empty: random per
	// process. Nodes that share a Store must share it.
	URLSecret []byte

	ExecutorURLTTL time.Duration // default 1 h; an expired URL is a 4xx, the executor re-registers
	// RegistrationTTL is how long a registration stays without an
	// executor holding a socket for it (default 1 h): the node holding an
	// executor touches its registration every RegistrationTTL/4, so only
	// abandoned environment ids expire.
	RegistrationTTL  time.Duration
	HarnessURLTTL    time.Duration // default 5 min
	AuthorizationTTL time.Duration // harness_key_authorization lifetime, default 60 s

	MaxEnvironments          int           // executor registrations and sockets, default 1024
	MaxHarnessSockets        int           // default 4096
	MaxHarnessPerEnvironment int           // default 256: one environment cannot take every harness slot
	MaxStreamsPerHarness     int           // default 16 (the reference harness uses 1)
	MaxStreamsPerEnvironment int           // default 1024 (the executor itself stops at 128)
	MaxPendingAuthorizations int           // default 4096
	MaxFrameBytes            int           // websocket message limit, default 256 KiB
	QueueFrames              int           // per-socket outbound queue, default 64 frames...
	QueueBytes               int           // ...and 4 MiB (one frame always fits)
	SlowHarness              time.Duration // a harness socket whose queue stays full this long is cut, default 5 s
	FleetNodeBytes           int           // fleet: a node's buffers for frames from other nodes, shared among them; the same on every node, default 64 MiB
	FleetNodeDeadAfter       time.Duration // fleet: a node silent (no heartbeat) this long is suspected and probed, dead if the probe confirms it (membership.go); default 3s
	// ResumeGrace is how long a stream whose ends both run the
	// reliability extension waits, after its harness socket or its
	// executor socket went, for a new socket to take it up (default 30 s,
	// the harness's redial limit).
	ResumeGrace  time.Duration
	PingInterval time.Duration // default 30 s
	PongTimeout  time.Duration // default 60 s

	Store  Store  // default NewMemStore
	Router Router // default NewMemRouter

	// NATS makes the server a node of a fleet (fabric.go): frames reach
	// executor sockets held by other nodes over this connection, which the
	// caller owns. Store should then be shared (NewKVStore) and URLSecret
	// and PublicURL the same on every node.
	NATS *nats.Conn
	// NodeName names this node in the fleet ([A-Za-z0-9_]{1,64}, unique).
	NodeName string
	// PeerListen, with NATS, is the address this node listens on for
	// peer links (peerlink.go): legs' frames then cross between nodes on
	// direct, authenticated TCP links instead of through NATS. Empty:
	// NATS only. PeerAdvertise is the address peers dial (default the
	// listener's).
	PeerListen, PeerAdvertise string
	// TakeoverGrace: a node that became an environment's home does not
	// answer the executor's resume of a stream it does not know with a
	// reset for this long (default ResumeGrace, which the executor waits
	// for its held streams anyway), so harnesses whose node or home died
	// can redial and claim their streams.
	TakeoverGrace time.Duration
	Logger        *slog.Logger
	// OnEvent, if set, is called synchronously for every registry call and
	// socket change; tests assert on it.
	OnEvent func(Event)
}

// Event is one observable thing the relay did or saw.
type Event struct {
	Kind   string // register, connect, validate, upgrade, attach, detach, reset
	Role   string // for sockets: environment or harness
	Env    string
	Reg    string
	Stream string
	Status int // HTTP status answered
	Code   string
	Header http.Header // request headers (register, validate, connect, upgrade)
	Query  string
}

const (
	roleEnvironment = "environment"
	roleHarness     = "harness"
)

// Server is the registry and rendezvous. It is an http.Handler.
type Server struct {
	opts   Options
	log    *slog.Logger
	secret []byte
	store  Store
	router Router
	mux    *http.ServeMux
	faults faultState
	fab    *fabric       // nil: one node
	routed atomic.Uint64 // frames routed (by the node holding the executor socket)
	// carries: writes of frames gathered by a peer link's reader
	// (leg.writeGathered) the kernel took in part or not at all, the rest
	// left to a goroutine of the leg's.
	carries atomic.Uint64
	recov   recoveries

	readBufs     [3]sync.Pool // of *readBuf: frames being read (rendezvous.go)
	readBufsHeld atomic.Int64 // of readBufs, out of their pools

	direct *directState // direct.go

	mu     sync.Mutex
	legs   map[*leg]struct{}
	closed bool
	// Goroutines serving a socket (rendezvous and direct), owned by
	// Close: socks counts them, socksDone is closed when the last one
	// ends after Close.
	socks     int
	socksDone chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup
}

// New checks opts and returns a server.
func New(opts Options) (*Server, error) {
	if !opts.InsecureNoAuth && (opts.ExecutorTokens.Len() == 0 || opts.HarnessTokens.Len() == 0) {
		return nil, errors.New("relay: executor and harness tokens are required (or InsecureNoAuth)")
	}
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	defd := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&opts.MaxEnvironments, 1024)
	def(&opts.MaxHarnessSockets, 4096)
	def(&opts.MaxHarnessPerEnvironment, 256)
	def(&opts.MaxStreamsPerHarness, 16)
	def(&opts.MaxStreamsPerEnvironment, 1024)
	def(&opts.MaxPendingAuthorizations, 4096)
	def(&opts.MaxFrameBytes, 256<<10)
	def(&opts.QueueFrames, 64)
	def(&opts.QueueBytes, 4<<20)
	def(&opts.FleetNodeBytes, 64<<20)
	defd(&opts.ExecutorURLTTL, time.Hour)
	defd(&opts.RegistrationTTL, DefaultRegistrationTTL)
	defd(&opts.HarnessURLTTL, 5*time.Minute)
	defd(&opts.AuthorizationTTL, time.Minute)
	defd(&opts.SlowHarness, 5*time.Second)
	defd(&opts.ResumeGrace, 30*time.Second)
	defd(&opts.PingInterval, 30*time.Second)
	defd(&opts.PongTimeout, 60*time.Second)
	defd(&opts.TakeoverGrace, opts.ResumeGrace)
	defd(&opts.FleetNodeDeadAfter, hbDead)
	if opts.NATS != nil && !validNodeName(opts.NodeName) {
		return nil, fmt.Errorf("relay: node name %q must be 1-64 characters of [A-Za-z0-9_]", opts.NodeName)
	}
	if opts.PublicURL != "" {
		if !strings.HasPrefix(opts.PublicURL, "http://") && !strings.HasPrefix(opts.PublicURL, "https://") {
			return nil, fmt.Errorf("relay: PublicURL %q must be http:// or https://", opts.PublicURL)
		}
		opts.PublicURL = strings.TrimRight(opts.PublicURL, "/")
	}
	s := &Server{
		opts:   opts,
		log:    opts.Logger,
		secret: opts.URLSecret,
		store:  opts.Store,
		router: opts.Router,
		legs:   make(map[*leg]struct{}),
		stop:   make(chan struct{}),
	}
	s.initReadBufs()
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if len(s.secret) == 0 {
		s.secret = make([]byte, 32)
		rand.Read(s.secret)
	} else if len(s.secret) < 32 {
		return nil, errNoSecret
	}
	if s.store == nil {
		ms := NewMemStore(opts.MaxEnvironments, opts.MaxPendingAuthorizations)
		ms.SetRegistrationTTL(opts.RegistrationTTL)
		s.store = ms
	}
	if s.router == nil {
		mr := NewMemRouter(opts.MaxEnvironments, opts.MaxHarnessSockets, opts.MaxStreamsPerHarness, opts.MaxStreamsPerEnvironment)
		mr.MaxHarnessPerEnv = opts.MaxHarnessPerEnvironment
		s.router = mr
	}
	s.faults.set(Faults{})
	if opts.NATS != nil {
		fab, err := newFabric(s, opts.NATS, opts.NodeName)
		if err != nil {
			return nil, fmt.Errorf("relay: fleet: %w", err)
		}
		s.fab = fab
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /cloud/environment/{env}/register", s.register)
	s.mux.HandleFunc("POST /cloud/environment/{env}/connect", s.connect)
	s.mux.HandleFunc("POST /cloud/environment/{env}/validate", s.validate)
	s.mux.HandleFunc("GET /rendezvous/environment/{env}", func(w http.ResponseWriter, r *http.Request) { s.rendezvous(w, r, roleEnvironment) })
	s.mux.HandleFunc("GET /rendezvous/harness/{env}", func(w http.ResponseWriter, r *http.Request) { s.rendezvous(w, r, roleHarness) })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /metrics", s.metrics)
	s.directRoutes()
	s.wg.Add(2)
	go s.flushLoop()
	go s.touchLoop()
	return s, nil
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// closeGrace bounds each of Close's two waits for the goroutines serving
// sockets: first for them to end after a close of each socket (queued
// frames written, a close handshake of at most a second), then, after
// every socket left is cut, for them to notice.
const closeGrace = 10 * time.Second

// Close cuts every socket and waits (bounded by twice closeGrace) for the
// goroutines serving them to end, and for the server's own; the server
// answers 503 afterwards.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stop)
	legs := s.legsLocked()
	done := make(chan struct{})
	if s.socks == 0 {
		close(done)
	} else {
		s.socksDone = done
	}
	s.mu.Unlock()
	if s.fab != nil {
		s.fab.close()
	}
	for _, l := range legs {
		l.Close("relay_shutdown")
	}
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		// A socket whose serving is stuck (a peer that never reads, a
		// send waiting for space): cut what is left.
		s.mu.Lock()
		legs := s.legsLocked()
		n := s.socks
		s.mu.Unlock()
		s.log.Warn("relay close: sockets still serving; cutting them", "sockets", n, "waited", closeGrace)
		for _, l := range legs {
			l.cut()
		}
		t.Reset(closeGrace)
		select {
		case <-done:
		case <-t.C:
			s.mu.Lock()
			n := s.socks
			s.mu.Unlock()
			s.log.Error("relay close: sockets still serving after being cut", "sockets", n)
		}
	}
	s.wg.Wait()
}

func (s *Server) legsLocked() []*leg {
	legs := make([]*leg, 0, len(s.legs))
	for l := range s.legs {
		legs = append(legs, l)
	}
	return legs
}

// ownSocketLocked counts one more goroutine serving a socket, unless the
// server is closed. s.mu is held.
func (s *Server) ownSocketLocked() bool {
	if s.closed {
		return false
	}
	s.socks++
	return true
}

// socketDoneLocked: a goroutine serving a socket ends. s.mu is held.
func (s *Server) socketDoneLocked() {
	s.socks--
	if s.socks == 0 && s.socksDone != nil {
		close(s.socksDone)
		s.socksDone = nil
	}
}

// ownSocket counts a goroutine serving a socket that has no leg (direct
// transport); false once the server is closed. socketDone ends it.
func (s *Server) ownSocket() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ownSocketLocked()
}

func (s *Server) socketDone() {
	s.mu.Lock()
	s.socketDoneLocked()
	s.mu.Unlock()
}

// FleetStats returns the node's fleet counters (zero without NATS).
func (s *Server) FleetStats() FleetStats {
	if s.fab == nil {
		return FleetStats{}
	}
	return s.fab.stats()
}

// CutExecutor drops env's executor socket at once, as a network cut would.
func (s *Server) CutExecutor(env string) bool {
	l, _, ok := s.router.Executor(env)
	if !ok || l == nil {
		return false
	}
	l.Cut()
	return true
}

// InjectToExecutor sends msg (binary, or text) on env's executor socket,
// for tests of malformed input.
func (s *Server) InjectToExecutor(env string, msg []byte, text bool) bool {
	l, _, ok := s.router.Executor(env)
	if !ok || l == nil {
		return false
	}
	return l.deliver(outFrame{b: msg, text: text})
}

func (s *Server) event(e Event) {
	if s.opts.OnEvent != nil {
		s.opts.OnEvent(e)
	}
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	if s.fab != nil {
		if st := s.fab.nc.Status(); st != nats.CONNECTED {
			http.Error(w, "nats: "+st.String(), http.StatusServiceUnavailable)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

// touchLoop keeps the registrations of the executors this node holds from
// expiring.
func (s *Server) touchLoop() {
	defer s.wg.Done()
	t, ok := s.store.(Toucher)
	if !ok {
		return
	}
	tk := time.NewTicker(s.opts.RegistrationTTL / 4)
	defer tk.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tk.C:
			s.mu.Lock()
			var held []*leg
			for l := range s.legs {
				if l.role == roleEnvironment {
					held = append(held, l)
				}
			}
			s.mu.Unlock()
			for _, l := range held {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := t.TouchRegistration(ctx, l.env, l.reg); err != nil {
					s.log.Warn("registry: touch", "env", l.env, "err", err)
				}
				cancel()
			}
		}
	}
}

// flushLoop releases reordered frames whose stream went quiet.
func (s *Server) flushLoop() {
	defer s.wg.Done()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			for k, f := range s.faults.flushStale(50 * time.Millisecond) {
				k.to.Send(f)
			}
		}
	}
}

// --- registry ---------------------------------------------------------------

const maxBody = 64 << 10

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, envreg.ErrorBody{Error: envreg.Error{Code: code, Message: msg}})
}

// authorized checks the bearer token against set, for env.
func (s *Server) authorized(r *http.Request, set *Tokens, env string) bool {
	if s.opts.InsecureNoAuth {
		return true
	}
	return set.MatchEnv(bearer(r.Header.Get("Authorization")), env)
}

// validEnv bounds what becomes a map key and a URL path segment.
func validEnv(env string) bool {
	if env == "" || len(env) > 256 {
		return false
	}
	for i := 0; i < len(env); i++ {
		c := env[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:@~", c) >= 0) {
			return false
		}
	}
	return true
}

func readBody(w http.ResponseWriter, r *http.Request, v any) error {
	// A slow body must not hold a connection: registry bodies are small.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func randomID(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// wsBase is the ws:// or wss:// base of minted URLs.
func (s *Server) wsBase(r *http.Request) string {
	base := s.opts.PublicURL
	if base == "" {
		scheme := "http://"
		if r.TLS != nil {
			scheme = "https://"
		}
		base = scheme + r.Host
	}
	if rest, ok := strings.CutPrefix(base, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(base, "http://")
}

func (s *Server) mintURL(r *http.Request, role, env, reg string, ttl time.Duration) string {
	// Whole seconds on the wire: round up so that a short TTL is not
	// already over when minted.
	exp := time.Now().Add(ttl + time.Second - 1).Truncate(time.Second)
	c := urlClaims{role: role, env: env, reg: reg, expiry: exp}
	return s.wsBase(r) + "/rendezvous/" + role + "/" + env + "?" + signedQuery(s.secret, c)
}

// call is one registry request: the event it records (when the handler
// returns) and its response writer.
type call struct {
	w  http.ResponseWriter
	ev Event
}

// fail answers the request with an error and records it.
func (c *call) fail(status int, code, msg string) {
	c.ev.Status, c.ev.Code = status, code
	writeError(c.w, status, code, msg)
}

// begin starts a registry request: ev gets its environment and headers.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, ev Event) *call {
	ev.Env, ev.Header = r.PathValue("env"), r.Header.Clone()
	return &call{w: w, ev: ev}
}

// admit checks the request's bearer token against tokens (who names their
// holders in the refusal); a refused request is answered.
func (s *Server) admit(c *call, r *http.Request, tokens *Tokens, who string) bool {
	if s.authorized(r, tokens, c.ev.Env) {
		return true
	}
	c.fail(http.StatusUnauthorized, envreg.CodeUnauthorized, "missing or unknown "+who+" token")
	return false
}

// injected answers the request with a failure the tests injected for this
// endpoint (which picks it), if any.
func (s *Server) injected(c *call, which func(*Faults) *Failure) bool {
	f, ok := s.faults.take(which)
	if ok {
		c.fail(f.Status, f.Code, "injected failure")
	}
	return ok
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	c := s.begin(w, r, Event{Kind: "register"})
	defer func() { s.event(c.ev) }()
	env, fail := c.ev.Env, c.fail
	if !s.admit(c, r, s.opts.ExecutorTokens, "executor") || s.injected(c, func(f *Faults) *Failure { return &f.Register }) {
		return
	}
	if !validEnv(env) {
		fail(http.StatusBadRequest, envreg.CodeInvalidEnvironmentID, "environment id must be 1-256 characters of [A-Za-z0-9._:@~-]")
		return
	}
	var req envreg.RegisterRequest
	if err := readBody(w, r, &req); err != nil {
		fail(http.StatusBadRequest, envreg.CodeInvalidRequest, err.Error())
		return
	}
	if req.SecurityProfile != SecurityProfile {
		fail(http.StatusBadRequest, envreg.CodeUnsupportedSecurityProfile, "security_profile must be "+SecurityProfile)
		return
	}
	if req.ExecutorPublicKey == nil {
		fail(http.StatusBadRequest, envreg.CodeInvalidRequest, "executor_public_key is required")
		return
	}
	reg := Registration{ID: randomID("reg_", 18), Key: *req.ExecutorPublicKey, At: time.Now()}
	if err := s.store.PutRegistration(r.Context(), env, reg); err != nil {
		s.log.Warn("register: store", "env", env, "err", err)
		code := envreg.CodeStoreUnavailable
		if errors.Is(err, ErrStoreFull) {
			code = envreg.CodeRegistryFull
		}
		fail(http.StatusServiceUnavailable, code, err.Error())
		return
	}
	f := s.faults.get()
	resp := envreg.Registration{
		EnvironmentID:          env,
		ExecutorRegistrationID: reg.ID,
		SecurityProfile:        SecurityProfile,
		URL:                    s.mintURL(r, roleEnvironment, env, reg.ID, s.opts.ExecutorURLTTL),
	}
	if f.WrongEnvironmentID {
		resp.EnvironmentID = env + "-other"
	}
	if f.WrongSecurityProfile {
		resp.SecurityProfile = "noise_hybrid_ik_v0"
	}
	c.ev.Reg, c.ev.Status = reg.ID, http.StatusOK
	s.log.Info("executor registered", "env", env, "registration", reg.ID)
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	c := s.begin(w, r, Event{Kind: "connect"})
	defer func() { s.event(c.ev) }()
	env, fail := c.ev.Env, c.fail
	if !s.admit(c, r, s.opts.HarnessTokens, "harness") || s.injected(c, func(f *Faults) *Failure { return &f.Connect }) {
		return
	}
	var req envreg.ConnectRequest
	if err := readBody(w, r, &req); err != nil {
		fail(http.StatusBadRequest, envreg.CodeInvalidRequest, err.Error())
		return
	}
	if req.HarnessPublicKey == nil {
		fail(http.StatusBadRequest, envreg.CodeInvalidRequest, "harness_public_key is required")
		return
	}
	reg, ok, err := s.store.Registration(r.Context(), env)
	if err != nil {
		fail(http.StatusServiceUnavailable, envreg.CodeStoreUnavailable, err.Error())
		return
	}
	// Registered is not enough: the executor must hold its socket, here
	// or (in a fleet) on the environment's home node.
	l, attached, up := s.router.Executor(env)
	live := up && l != nil
	if !up && ok && s.fab != nil {
		attached, live, _ = s.fab.ping(r.Context(), env)
	}
	if !ok || !live || attached != reg.ID {
		fail(http.StatusConflict, envreg.CodeEnvironmentOffline, "no executor is connected for this environment")
		return
	}
	authz := randomID("hka_", 32)
	a := Authorization{Env: env, RegID: reg.ID, HarnessKey: *req.HarnessPublicKey, Expires: time.Now().Add(s.opts.AuthorizationTTL)}
	if err := s.store.PutAuthorization(r.Context(), authz, a); err != nil {
		if errors.Is(err, ErrStoreFull) {
			fail(http.StatusTooManyRequests, envreg.CodeTooManyPendingAuthorizations, err.Error())
		} else {
			// The store failing (a fleet's KV without a leader for a
			// moment) is not too many authorizations.
			fail(http.StatusServiceUnavailable, envreg.CodeStoreUnavailable, err.Error())
		}
		return
	}
	c.ev.Reg, c.ev.Status = reg.ID, http.StatusOK
	writeJSON(w, http.StatusOK, envreg.Bundle{
		EnvironmentID:           env,
		ExecutorPublicKey:       reg.Key,
		ExecutorRegistrationID:  reg.ID,
		HarnessKeyAuthorization: authz,
		SecurityProfile:         SecurityProfile,
		URL:                     s.mintURL(r, roleHarness, env, reg.ID, s.opts.HarnessURLTTL),
	})
}

func (s *Server) validate(w http.ResponseWriter, r *http.Request) {
	c := s.begin(w, r, Event{Kind: "validate", Stream: r.Header.Get(envreg.StreamIDHeader)})
	defer func() { s.event(c.ev) }()
	env, fail := c.ev.Env, c.fail
	if !s.admit(c, r, s.opts.ExecutorTokens, "executor") {
		return
	}
	if d := s.faults.get().SlowValidate; d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	if s.injected(c, func(f *Faults) *Failure { return &f.Validate }) {
		return
	}
	var req envreg.ValidateRequest
	if err := readBody(w, r, &req); err != nil || req.HarnessPublicKey == nil || req.ExecutorRegistrationID == "" || req.HarnessKeyAuthorization == "" {
		fail(http.StatusBadRequest, envreg.CodeInvalidRequest, "executor_registration_id, harness_public_key and harness_key_authorization are required")
		return
	}
	c.ev.Reg = req.ExecutorRegistrationID
	valid := s.checkAuthorization(r.Context(), env, req.ExecutorRegistrationID, *req.HarnessPublicKey, req.HarnessKeyAuthorization)
	if s.faults.get().Invalid {
		valid = false
	}
	c.ev.Status = http.StatusOK
	if !valid {
		c.ev.Code = "invalid"
	}
	writeJSON(w, http.StatusOK, envreg.ValidateResponse{Valid: valid})
}

// checkAuthorization consumes authz (whatever the outcome: a guessed or
// replayed token gets exactly one try) and checks its binding.
func (s *Server) checkAuthorization(ctx context.Context, env, regID string, key PublicKey, authz string) bool {
	if len(authz) > 4096 {
		return false
	}
	a, ok, err := s.store.TakeAuthorization(ctx, authz)
	if err != nil || !ok || !time.Now().Before(a.Expires) {
		return false
	}
	cur, ok, err := s.store.Registration(ctx, env)
	if err != nil || !ok {
		return false
	}
	return a.Env == env && a.RegID == regID && cur.ID == regID && a.HarnessKey.Equal(key)
}

// metrics serves the node's counters in the Prometheus text format.
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.mu.Lock()
	var execs, harness int
	for l := range s.legs {
		if l.role == roleEnvironment {
			execs++
		} else {
			harness++
		}
	}
	s.mu.Unlock()
	fmt.Fprintf(w, "# TYPE exec_relay_sockets gauge\nexec_relay_sockets{role=\"environment\"} %d\nexec_relay_sockets{role=\"harness\"} %d\n", execs, harness)
	fmt.Fprintf(w, "# HELP exec_relay_frames_routed_total frames routed by this node (the home of their environment)\n# TYPE exec_relay_frames_routed_total counter\nexec_relay_frames_routed_total %d\n", s.routed.Load())
	fmt.Fprintf(w, "# HELP exec_relay_write_carries_total writes of a peer link's reader to a socket that the kernel took in part or not at all (the rest written by the socket's own goroutine)\n# TYPE exec_relay_write_carries_total counter\nexec_relay_write_carries_total %d\n", s.carries.Load())
	fmt.Fprintf(w, "# HELP exec_relay_read_buffers_held pooled frame read buffers out of their pools (one per socket in the middle of a frame; one that stays up on an idle node is a leak)\n# TYPE exec_relay_read_buffers_held gauge\nexec_relay_read_buffers_held %d\n", s.readBufsHeld.Load())
	s.recov.hist.write(w, "exec_relay_stream_recovery_seconds", "how long a reliable stream was stalled by a lost socket or node until it resumed (docs/remote.md)")
	writeMemMetrics(w)
	if s.fab == nil {
		return
	}
	st := s.fab.stats()
	up := 0
	if st.NATSConnected {
		up = 1
	}
	for _, m := range []struct {
		name, typ, help string
		v               any
	}{
		{"exec_relay_fleet_frames_out_total", "counter", "frames published to other nodes", st.FramesOut},
		{"exec_relay_fleet_bytes_out_total", "counter", "bytes of frames published to other nodes", st.BytesOut},
		{"exec_relay_fleet_frames_in_total", "counter", "frames received from other nodes", st.FramesIn},
		{"exec_relay_fleet_bytes_in_total", "counter", "bytes of frames received from other nodes", st.BytesIn},
		{"exec_relay_fleet_credit_waits_total", "counter", "times a cross-node sender waited for credit", st.CreditWaits},
		{"exec_relay_fleet_peer_budget_waits_total", "counter", "times a cross-node sender waited for its budget toward a peer node", st.PeerWaits},
		{"exec_relay_fleet_homes_total", "counter", "times this node became an environment's home", st.Homes},
		{"exec_relay_fleet_abandoned_total", "counter", "routes dropped because another node became the home (takeovers)", st.Abandoned},
		{"exec_relay_fleet_rehomed_total", "counter", "forwarded sockets closed because their home moved or died", st.Rehomed},
		{"exec_relay_fleet_remote_legs", "gauge", "harness legs on other nodes routed here", st.RemoteLegs},
		{"exec_relay_fleet_forwarder_legs", "gauge", "harness sockets here forwarded to another node", st.ForwarderLegs},
		{"exec_relay_fleet_takeovers_total", "counter", "times this node became the home of an environment another node was the home of (its executor redialled here)", st.Takeovers},
		{"exec_relay_fleet_nodes_lost_total", "counter", "nodes this node declared dead (silent for FleetNodeDeadAfter, then confirmed by a probe)", st.NodesLost},
		{"exec_relay_fleet_suspicions_refuted_total", "counter", "silent nodes that answered a probe and were not declared dead", st.SuspicionsRefuted},
		{"exec_relay_nats_disconnects_total", "counter", "NATS connection losses", st.NATSDisconnects},
		{"exec_relay_nats_reconnects_total", "counter", "NATS reconnects", st.NATSReconnects},
		{"exec_relay_nats_dropped_total", "counter", "NATS messages dropped by slow subscriptions", st.NATSDropped},
		{"exec_relay_nats_slow_consumers_total", "counter", "NATS slow consumer errors", st.NATSSlowConsumers},
		{"exec_relay_nats_connected", "gauge", "1 while the NATS connection is up", up},
		{"exec_relay_fleet_link_frames_out_total", "counter", "frames sent to other nodes on peer links (part of exec_relay_fleet_frames_out_total; the rest went through NATS)", st.LinkFramesOut},
		{"exec_relay_fleet_link_bytes_out_total", "counter", "bytes of frames sent to other nodes on peer links", st.LinkBytesOut},
		{"exec_relay_fleet_link_frames_in_total", "counter", "frames received from other nodes on peer links", st.LinkFramesIn},
		{"exec_relay_fleet_link_bytes_in_total", "counter", "bytes of frames received from other nodes on peer links", st.LinkBytesIn},
		{"exec_relay_fleet_links", "gauge", "peer links up", st.Links},
		{"exec_relay_fleet_link_legs", "gauge", "harness legs riding a peer link", st.LinkLegs},
		{"exec_relay_fleet_link_ups_total", "counter", "peer links established", st.LinkUps},
		{"exec_relay_fleet_link_downs_total", "counter", "peer links lost (their legs ended as with a lost node)", st.LinkDowns},
		{"exec_relay_fleet_link_writes_total", "counter", "writes on peer links (each carries every message queued meanwhile)", st.LinkBatches},
		{"exec_relay_fleet_link_messages_total", "counter", "messages (frames, closes, credits) written on peer links", st.LinkMessages},
		{"exec_relay_fleet_link_sender_writes_total", "counter", "messages written on an idle peer link by their sender (no hand-off to the link's writer)", st.LinkSenderWrites},
		{"exec_relay_fleet_link_carries_total", "counter", "of those, writes the kernel took in part or not at all (the rest written by the link's writer first)", st.LinkCarries},
		{"exec_relay_fleet_link_frames_inline_total", "counter", "frames from peer links written to their socket by the link's reader (no hand-off to the leg's goroutine)", st.LinkInline},
		{"exec_relay_fleet_link_refused_total", "counter", "peer link handshakes refused by this node (bad proof or not a peer)", st.LinkRefused},
		{"exec_relay_fleet_link_dial_failures_total", "counter", "peer link dials that failed (legs to that node use NATS)", st.LinkDialFails},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", m.name, m.help, m.name, m.typ, m.name, m.v)
	}
}

// memSamples: where a node's memory goes (docs/remote.md "Memory"): live
// heap, heap kept but unused (the collector's headroom, and freed memory
// not yet returned to the system), goroutine stacks, goroutines.
var memSamples = []struct{ metric, name, help string }{
	{"/memory/classes/heap/objects:bytes", "exec_relay_memory_heap_objects_bytes", "bytes of live and not yet collected heap objects"},
	{"/memory/classes/heap/unused:bytes", "exec_relay_memory_heap_unused_bytes", "heap bytes reserved for objects but unused"},
	{"/memory/classes/heap/free:bytes", "exec_relay_memory_heap_free_bytes", "free heap bytes not yet returned to the system"},
	{"/memory/classes/heap/stacks:bytes", "exec_relay_memory_stacks_bytes", "bytes of goroutine stacks"},
	{"/memory/classes/total:bytes", "exec_relay_memory_mapped_bytes", "bytes mapped by the Go runtime, released ones included"},
	{"/memory/classes/heap/released:bytes", "exec_relay_memory_heap_released_bytes", "free heap bytes returned to the system"},
	{"/sched/goroutines:goroutines", "exec_relay_goroutines", "goroutines"},
}

func writeMemMetrics(w io.Writer) {
	samples := make([]metrics.Sample, len(memSamples))
	for i, m := range memSamples {
		samples[i].Name = m.metric
	}
	metrics.Read(samples)
	for i, m := range memSamples {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			continue
		}
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", m.name, m.help, m.name, m.name, samples[i].Value.Uint64())
	}
}

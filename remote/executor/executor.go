// Package executor is the executor side of exec-server remote mode
// (`exec-server --remote URL --environment-id ID`, docs/remote.md): it
// registers a fresh Noise key with the environment registry, holds one
// outbound websocket to the rendezvous, and for each relay stream runs the
// responder handshake, asks the registry to validate the harness, then
// serves an independent JSON-RPC connection over the stream's secure
// channel. The executor accepts no inbound connection.
package executor

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/internal/coalesce"
	"github.com/execgo/exec-server/remote/noise"
)

// StreamServer serves one JSON-RPC connection; *server.Server does.
type StreamServer interface {
	ServeStream(ctx context.Context, st jsonrpc.Stream)
}

// Config configures Run. Zero durations and limits take the reference's
// values.
type Config struct {
	RegistryURL   string // --remote
	EnvironmentID string // --environment-id
	Name          string // --name: accepted, not sent (as the reference)
	Token         string // the registry bearer: CODEX_API_KEY, or what Auth names
	// Auth is where Token came from, which decides the registry URLs it
	// may go to (checkAuthURL); the zero value is CODEX_API_KEY's rule.
	Auth AuthMode
	// AccountID is sent as ChatGPT-Account-ID on registry requests when
	// not empty (the ChatGPT modes).
	AccountID string
	// Authorize, when not nil, gives the Authorization header of each
	// registry request instead of "Bearer "+Token (AuthAgentIdentity:
	// AgentIdentity.Authorization).
	Authorize  func() string
	Server     StreamServer
	Logger     *slog.Logger
	HTTPClient *http.Client // default: no redirects, TCP_NODELAY

	MaxStreams            int           // 128
	MaxPendingValidations int           // 32
	FailureBudget         int           // 8 failed handshakes...
	Cooldown              time.Duration // ...refuse new ones for 10 s
	ValidateTimeout       time.Duration // 10 s
	DialTimeout           time.Duration // 10 s
	PingInterval          time.Duration // 30 s
	PongTimeout           time.Duration // 60 s
	ReconnectMin          time.Duration // 1 s
	ReconnectMax          time.Duration // 30 s
	StableAfter           time.Duration // a connection up this long resets the backoff, 120 s
	MaxFrameBytes         int           // 256 KiB
	// Plain turns off the reliability extension (acknowledgements,
	// retransmission, resume) that runs with harnesses that advertise it.
	Plain bool
	// ResumeGrace is how long a stream running the extension waits for
	// the next socket after its socket went (30 s).
	ResumeGrace time.Duration
}

// ResetReason is the only reason the executor puts in a Reset, as the reference.
const ResetReason = "noise_relay_protocol_error"

func (c *Config) defaults() {
	d := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	i := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	i(&c.MaxStreams, 128)
	i(&c.MaxPendingValidations, 32)
	i(&c.FailureBudget, 8)
	i(&c.MaxFrameBytes, 256<<10)
	d(&c.Cooldown, 10*time.Second)
	d(&c.ValidateTimeout, 10*time.Second)
	d(&c.DialTimeout, 10*time.Second)
	d(&c.PingInterval, 30*time.Second)
	d(&c.PongTimeout, 60*time.Second)
	d(&c.ReconnectMin, time.Second)
	d(&c.ReconnectMax, 30*time.Second)
	d(&c.StableAfter, 120*time.Second)
	d(&c.ResumeGrace, 30*time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.HTTPClient == nil {
		c.HTTPClient = DefaultHTTPClient(nil)
	}
}

// DefaultHTTPClient is the registry and rendezvous client: redirects are
// not followed (a bearer token must not travel to wherever a
// redirect points); roots, when not nil, replace the system's trusted CAs.
func DefaultHTTPClient(roots *x509.CertPool) *http.Client {
	c := &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if roots != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: roots}
		c.Transport = t
	}
	return c
}

// Run registers and serves until ctx ends (nil) or a fatal error: the
// first registration fails (other than the retried answers:
// RegistryError.retryable), the
// registry answers for another environment or profile, or a
// re-registration is refused for good.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if cfg.Server == nil {
		return errors.New("executor: no Server")
	}
	if cfg.EnvironmentID == "" {
		return errors.New("executor: --environment-id is required with --remote")
	}
	if cfg.Token == "" && cfg.Authorize == nil {
		if cfg.Auth == AuthAPIKey {
			return errors.New("executor: CODEX_API_KEY is required for --remote (the registry bearer token)")
		}
		return fmt.Errorf("executor: no registry credential (%s)", cfg.Auth)
	}
	base, err := checkAuthURL(cfg.RegistryURL, cfg.Auth)
	if err != nil {
		return err
	}
	// One identity per process, never persisted (as the reference).
	kp, err := noise.GenerateKeypair()
	if err != nil {
		return err
	}
	e := &executor{
		cfg: cfg,
		log: cfg.Logger.With("environment_id", cfg.EnvironmentID),
		reg: &registry{base: base, env: cfg.EnvironmentID, token: cfg.Token, account: cfg.AccountID, client: cfg.HTTPClient, authorize: cfg.Authorize},
		key: kp,
		ws:  coalesce.Client(cfg.HTTPClient),
	}
	return e.run(ctx)
}

type executor struct {
	cfg Config
	log *slog.Logger
	reg *registry
	key *noise.Keypair
	ws  *http.Client // cfg.HTTPClient for the rendezvous sockets (coalesce.Client)

	streams sync.WaitGroup // ServeStream goroutines

	// Streams running the reliability extension whose socket went: they
	// wait ResumeGrace for the next socket of the same registration.
	hmu     sync.Mutex
	held    map[string]*relayStream
	heldReg string
}

// keep holds a resumable stream whose socket went.
func (e *executor) keep(st *relayStream, regID string) {
	e.hmu.Lock()
	if e.heldReg != regID {
		for _, old := range e.held {
			go old.ch.Fail(errSocketGone)
		}
		e.held = nil
	}
	if e.held == nil {
		e.held = make(map[string]*relayStream)
	}
	e.heldReg = regID
	e.held[st.sid] = st
	e.hmu.Unlock()
	time.AfterFunc(e.cfg.ResumeGrace, func() {
		if e.unkeep(st) {
			st.ch.Fail(errSocketGone)
		}
	})
}

// unkeep removes st from the held streams; false if it was not held.
func (e *executor) unkeep(st *relayStream) bool {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	if e.held[st.sid] != st {
		return false
	}
	delete(e.held, st.sid)
	return true
}

// adopt moves the held streams of c's registration to c and resumes them
// there; held streams of another registration end (the relay dropped
// their routes when the executor registered again).
func (e *executor) adopt(c *conn) {
	e.hmu.Lock()
	held := e.held
	same := e.heldReg == c.reg.ExecutorRegistrationID
	e.held = nil
	e.hmu.Unlock()
	for _, st := range held {
		if !same {
			st.ch.Fail(errSocketGone)
			continue
		}
		c.mu.Lock()
		st.owner.Store(c)
		c.active[st.sid] = st
		c.mu.Unlock()
		if err := st.ch.Rebind(c.ctx, channel.SenderFunc(st.send)); err != nil {
			st.ch.Fail(err)
			continue
		}
		e.log.Debug("stream resumed on the new socket", "stream_id", st.sid)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func requestID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return "req_" + hex.EncodeToString(b)
}

// backoff is the rendezvous reconnect delay: uniform in [d/2, d], d
// doubling from ReconnectMin to ReconnectMax.
type backoff struct {
	min, max, d time.Duration
}

func (b *backoff) next() time.Duration {
	if b.d == 0 {
		b.d = b.min
	}
	d := b.d
	b.d = min(2*b.d, b.max)
	return d/2 + mrand.N(d/2+1)
}

func (b *backoff) reset() { b.d = 0 }

func (e *executor) run(ctx context.Context) error {
	defer func() {
		e.hmu.Lock()
		held := e.held
		e.held = nil
		e.hmu.Unlock()
		for _, st := range held {
			st.ch.Fail(errSocketGone)
		}
	}()
	reg, err := e.reg.register(ctx, e.key.Public(), sleep)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	e.log.Info("registered with the environment registry", "registration", reg.ExecutorRegistrationID)
	bo := backoff{min: e.cfg.ReconnectMin, max: e.cfg.ReconnectMax}
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			return nil
		}
		id := requestID()
		hdr := http.Header{"X-Request-Id": {id}}
		// As the reference: routing hints for a hosted rendezvous.
		if v := os.Getenv("OPENAI_CLUSTER"); v != "" {
			hdr.Set("X-Cluster-Name", v)
		}
		if v := os.Getenv("DD_SERVICE"); v != "" {
			hdr.Set("X-Openai-Internal-Caller", v)
		}
		dctx, cancel := context.WithTimeout(ctx, e.cfg.DialTimeout)
		c, resp, err := websocket.Dial(dctx, reg.URL, &websocket.DialOptions{
			HTTPClient:      e.ws,
			HTTPHeader:      hdr,
			CompressionMode: websocket.CompressionDisabled,
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			e.log.Warn("rendezvous connection failed", "request_id", id, "attempt", attempt, "status", status,
				"rejection_reason", rejectionReason(resp), "err", err)
			if status >= 400 && status < 500 {
				// The URL is no good any more: register again at once,
				// then wait as for any failure (as the reference).
				if reg, err = e.reregister(ctx, reg); err != nil {
					return err
				}
			}
			if sleep(ctx, bo.next()) != nil {
				return nil
			}
			continue
		}
		e.log.Info("connected to rendezvous", "request_id", id, "attempt", attempt)
		start := time.Now()
		reason := e.serveConn(ctx, c, reg)
		e.log.Info("disconnected from rendezvous", "request_id", id, "reason", reason)
		if time.Since(start) >= e.cfg.StableAfter {
			bo.reset()
		}
		if sleep(ctx, bo.next()) != nil {
			return nil
		}
	}
}

func rejectionReason(resp *http.Response) string {
	if resp == nil {
		return ""
	}
	return resp.Header.Get("x-codex-rendezvous-rejection-reason")
}

// reregister obtains a new registration after a refused upgrade. Transient
// failures are retried with backoff (the executor is long-running); a
// refusal for good (4xx other than 408/429, a wrong answer) is fatal.
func (e *executor) reregister(ctx context.Context, old registration) (registration, error) {
	bo := backoff{min: e.cfg.ReconnectMin, max: e.cfg.ReconnectMax}
	for {
		reg, err := e.reg.register(ctx, e.key.Public(), sleep)
		if err == nil {
			e.log.Info("registered again", "registration", reg.ExecutorRegistrationID)
			return reg, nil
		}
		if ctx.Err() != nil {
			return old, nil
		}
		var re *RegistryError
		var fe *fatalError
		if errors.As(err, &fe) || errors.As(err, &re) && re.Status >= 400 && re.Status < 500 && re.Status != 408 && re.Status != 429 {
			return old, fmt.Errorf("re-registration: %w", err)
		}
		e.log.Warn("re-registration failed; retrying", "err", err)
		if sleep(ctx, bo.next()) != nil {
			return old, nil
		}
	}
}

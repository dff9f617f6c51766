package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/transport"
)

// Error is a JSON-RPC error from the server, carrying the wire code. Get it
// with errors.As:
//
//	var e *client.Error
//	if errors.As(err, &e) && e.Code == protocol.CodeNotFound { ... }
type Error = protocol.Error

var (
	// ErrClosed is returned by calls on a Client after Close.
	ErrClosed = errors.New("exec-server client: closed")
	// ErrConnectionLost is returned when the connection ended and could not
	// be (or, for stdio, cannot be) re-established, and by requests that are
	// not safe to repeat when the connection dropped while they were in
	// flight (the server may or may not have acted on them).
	ErrConnectionLost = errors.New("exec-server client: connection lost")
	// ErrSessionLost is returned when a reconnect found that the server no
	// longer knows the session (it expired or the server restarted); the
	// session's processes are gone.
	ErrSessionLost = errors.New("exec-server client: session lost")
	// ErrFreshSession accompanies Reconnected (Options.OnStateChange) when
	// the server no longer knew the session and the Client, which had no
	// processes, started a new one (see Options.RefusedTimeout).
	ErrFreshSession = errors.New("exec-server client: the server no longer knew the session; a new one was started")
)

// Options configure a Client. The zero value is usable.
type Options struct {
	// ClientName is sent in initialize. Default "exec-server-go".
	ClientName string
	// Token, when set, is sent as "Authorization: Bearer <token>" on the
	// websocket upgrade (and on every reconnect).
	Token string
	// Header holds extra HTTP headers for the websocket upgrade.
	Header http.Header
	// HTTPClient dials websocket connections (custom TLS roots for wss://,
	// proxies). Default http.DefaultClient.
	HTTPClient *http.Client
	// ChatGPTAccountID, with DialRemote, is sent as ChatGPT-Account-ID on
	// the registry's /connect (a ChatGPT sign-in's account; see
	// LoadCodexCredential).
	ChatGPTAccountID string
	// ReconnectTimeout bounds how long a dropped websocket connection is
	// retried (with exponential back-off) before the Client gives up with
	// ErrConnectionLost. Default 60s, below the server's default 90s session
	// TTL. Negative disables reconnecting.
	ReconnectTimeout time.Duration
	// RefusedTimeout, when positive and shorter than ReconnectTimeout, ends
	// reconnecting sooner while every redial is refused outright (nothing
	// listens on the server's port: it is down, not briefly unreachable).
	// A server that answers again within it and no longer knows the session
	// ends the Client at once with ErrSessionLost, unless the Client has no
	// processes: then it starts a fresh session (its watches are set again).
	// Default 0: ReconnectTimeout alone.
	RefusedTimeout time.Duration
	// KeepAlive is the interval of websocket pings that detect a dead
	// connection (a failed ping triggers a reconnect). Default 20s; negative
	// disables them.
	KeepAlive time.Duration
	// IdleProbe is how long Process.Wait waits without hearing from its
	// process before it checks the process's state with one process/read,
	// in case a final event was lost. Default 10s; negative disables it.
	IdleProbe time.Duration
	// Logger receives debug logs about reconnects and recovery. Default
	// discards.
	Logger *slog.Logger
	// OnStateChange, when set, is told of the connection's transitions:
	// Connected (the first connection's handshake succeeded; reported
	// once, before the constructor returns), Reconnecting (the connection dropped; err says why), Reconnected
	// (the session resumed on a new connection), Lost (the Client gave
	// up: err wraps ErrConnectionLost or ErrSessionLost). Close and Detach
	// report nothing. Calls come from one goroutine at a time, in order;
	// a slow callback delays the reconnect, so it should return quickly.
	OnStateChange func(State, error)
	// ResumeSession, when set, resumes that session (a detached websocket
	// session's SessionID, within the server's session TTL) instead of
	// starting a new one: its processes are the session's, for
	// ListProcesses. Processes it started before are not Process values
	// of this Client.
	ResumeSession string
}

// State is a connection state reported to Options.OnStateChange.
type State int

const (
	// Connected: the first connection is up.
	Connected State = iota + 1
	// Reconnecting: the connection dropped and the Client is redialling.
	Reconnecting
	// Reconnected: the session resumed on a new connection; processes
	// recover what they missed by themselves.
	Reconnected
	// Lost: the Client gave up (the server could not be reached within
	// ReconnectTimeout, no longer knows the session, or the connection
	// cannot be redialled); every call now fails.
	Lost
)

func (s State) String() string {
	switch s {
	case Connected:
		return "connected"
	case Reconnecting:
		return "reconnecting"
	case Reconnected:
		return "reconnected"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

func (o Options) withDefaults() Options {
	if o.ClientName == "" {
		o.ClientName = "exec-server-go"
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.ReconnectTimeout == 0 {
		o.ReconnectTimeout = 60 * time.Second
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = 20 * time.Second
	}
	if o.IdleProbe == 0 {
		o.IdleProbe = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Client is a connection to an exec-server with one session. It is safe for
// concurrent use. Over websocket it reconnects transparently when the
// connection drops and resumes its session; over stdio a lost connection
// is final.
type Client struct {
	opts   Options
	dialer Dialer    // nil: cannot reconnect
	cmd    *exec.Cmd // DialStdio's server, waited for by Close

	ctx    context.Context // ends at Close; parent of background work
	cancel context.CancelFunc
	wg     sync.WaitGroup // background goroutines: connection watchers, recoveries, stdin pumps

	idPrefix string
	nextProc atomic.Uint64
	nextWID  atomic.Uint64
	reads    atomic.Uint64 // process/read requests sent, for tests

	mu        sync.Mutex
	conn      *rpcConn      // nil while reconnecting
	gen       uint64        // incremented per installed connection
	ready     chan struct{} // closed when conn is installed or err is set
	readyDone bool          // ready is closed
	err       error         // terminal: ErrClosed, ErrConnectionLost, ErrSessionLost
	sessionID string
	info      protocol.EnvironmentInfo
	procs     map[string]*Process
	unsupport map[string]bool // extension methods the server answered -32601
}

// Dialer opens a new stream to an exec-server: the first connection, and
// each reconnect (the Client then resumes its session on the new stream).
type Dialer func(ctx context.Context) (jsonrpc.Stream, error)

// NewClient connects through dial, performs the initialize handshake and
// returns the Client. When the connection drops, the Client calls dial
// again and resumes its session (for ReconnectTimeout; negative: never).
// ctx bounds the first dial and the handshake only.
func NewClient(ctx context.Context, dial Dialer, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	s, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	c := newClient(opts)
	if opts.ReconnectTimeout > 0 {
		c.dialer = dial
	}
	if err := c.start(ctx, s); err != nil {
		return nil, err
	}
	return c, nil
}

// Dial connects to a websocket exec-server ("ws://host:port" or
// "wss://..."), performs the initialize handshake and returns the Client.
// ctx bounds the dial and the handshake only.
func Dial(ctx context.Context, url string, opts Options) (*Client, error) {
	if !strings.HasPrefix(url, "ws://") && !strings.HasPrefix(url, "wss://") {
		return nil, fmt.Errorf("exec-server client: url %q: want ws://HOST:PORT or wss://HOST:PORT", url)
	}
	opts = opts.withDefaults()
	header := opts.Header.Clone()
	if header == nil {
		header = http.Header{}
	}
	if opts.Token != "" {
		header.Set("Authorization", "Bearer "+opts.Token)
	}
	dopts := transport.DialOptions{HTTPClient: opts.HTTPClient, Header: header, MaxMessageBytes: maxMessageBytes}
	return NewClient(ctx, func(ctx context.Context) (jsonrpc.Stream, error) {
		ws, err := transport.DialWebSocket(ctx, url, dopts)
		if err != nil {
			var de *transport.DialError
			if errors.As(err, &de) && de.StatusCode == http.StatusUnauthorized {
				return nil, &AuthError{Status: de.StatusCode, Message: de.Body}
			}
			return nil, fmt.Errorf("exec-server client: %w", err)
		}
		return ws, nil
	}, opts)
}

// AuthError reports a websocket upgrade refused with 401.
type AuthError struct {
	Status  int
	Message string
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("exec-server client: authentication refused (HTTP %d): %s", e.Status, e.Message)
}

// DialStdio starts cmd (an exec-server listening on stdio, e.g.
// exec.Command("exec-server", "--listen", "stdio")) and connects to it
// through its stdin and stdout. cmd must not have Stdin or Stdout set. Close
// closes the server's stdin and waits for it to exit; the server then kills
// every process it started.
func DialStdio(ctx context.Context, cmd *exec.Cmd, opts Options) (*Client, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("exec-server client: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("exec-server client: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("exec-server client: starting %s: %w", cmd.Path, err)
	}
	c := newClient(opts.withDefaults())
	c.cmd = cmd
	if err := c.start(ctx, transport.NewStdio(out, in, in, maxMessageBytes)); err != nil {
		c.waitCmd()
		return nil, err
	}
	return c, nil
}

// NewConn runs the protocol over rwc with newline-delimited JSON (the stdio
// framing): use it for a server reached through a pipe, an SSH channel or a
// net.Conn. Close closes rwc. A lost connection is final.
//
// Deprecated: use NewClient with a Dialer returning
// transport.NewStdio(r, w, closer, 0) over a fresh connection on each
// call, which also lets the Client reconnect (or set ReconnectTimeout
// negative when the Dialer cannot dial again).
func NewConn(ctx context.Context, rwc io.ReadWriteCloser, opts Options) (*Client, error) {
	c := newClient(opts.withDefaults())
	if err := c.start(ctx, transport.NewStdio(rwc, rwc, rwc, maxMessageBytes)); err != nil {
		return nil, err
	}
	return c, nil
}

func newClient(opts Options) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Client{
		opts:      opts,
		ctx:       ctx,
		cancel:    cancel,
		idPrefix:  "go-" + hex.EncodeToString(b[:]),
		ready:     make(chan struct{}),
		procs:     make(map[string]*Process),
		unsupport: make(map[string]bool),
	}
}

// start performs the first handshake on s and installs the connection.
func (c *Client) start(ctx context.Context, s jsonrpc.Stream) error {
	var resume *string
	if c.opts.ResumeSession != "" {
		resume = &c.opts.ResumeSession
	}
	rc, res, err := c.handshake(ctx, s, resume)
	if err != nil {
		c.cancel()
		return err
	}
	c.mu.Lock()
	c.sessionID = res.SessionID
	c.info = res.EnvironmentInfo
	c.mu.Unlock()
	// Before the watcher starts: Connected comes before any other state.
	c.notifyState(Connected, nil)
	c.install(rc)
	return nil
}

// handshake runs initialize (resuming resume when not nil) and initialized
// on a new connection over s. On failure s is closed.
func (c *Client) handshake(ctx context.Context, s jsonrpc.Stream, resume *string) (*rpcConn, *protocol.InitializeResult, error) {
	rc := newRPCConn(s, c.onNotify)
	var res protocol.InitializeResult
	err := rc.call(ctx, protocol.MethodInitialize, protocol.InitializeParams{ClientName: c.opts.ClientName, ResumeSessionID: resume}, &res)
	if err == nil {
		err = rc.notifyServer(ctx, protocol.MethodInitialized, struct{}{})
	}
	if err != nil {
		rc.close()
		<-rc.done
		if errors.Is(err, errConnLost) {
			err = fmt.Errorf("%w during initialize: %v", ErrConnectionLost, err)
		}
		return nil, nil, err
	}
	return rc, &res, nil
}

// install makes rc the current connection and starts its watcher.
func (c *Client) install(rc *rpcConn) {
	c.mu.Lock()
	c.conn = rc
	c.gen++
	c.signalReady()
	c.mu.Unlock()
	c.wg.Add(1)
	go c.watch(rc)
	c.rewatch()
}

// pinger is a stream that can check its peer is there (a websocket).
type pinger interface {
	Ping(ctx context.Context) error
}

// watch owns one connection's lifetime: it pings it, and when it ends,
// either reconnects or fails the client.
func (c *Client) watch(rc *rpcConn) {
	defer c.wg.Done()
	var tick <-chan time.Time
	ws, canPing := rc.s.(pinger)
	if canPing && c.opts.KeepAlive > 0 {
		t := time.NewTicker(c.opts.KeepAlive)
		defer t.Stop()
		tick = t.C
	}
loop:
	for {
		select {
		case <-rc.done:
			break loop
		case <-c.ctx.Done():
			// Not waiting for the read loop: over stdio it ends only when
			// the server exits, which Close awaits (and enforces) itself.
			rc.close()
			return
		case <-tick:
			ctx, cancel := context.WithTimeout(c.ctx, c.opts.KeepAlive)
			err := ws.Ping(ctx)
			cancel()
			if err != nil && c.ctx.Err() == nil {
				c.opts.Logger.Debug("exec-server client: ping failed; reconnecting", "err", err)
				rc.close()
			}
		}
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.conn = nil
	c.ready, c.readyDone = make(chan struct{}), false
	c.mu.Unlock()
	lost := rc.loopErr()
	if c.dialer == nil {
		c.lose(fmt.Errorf("%w: %v", ErrConnectionLost, lost))
		return
	}
	c.opts.Logger.Debug("exec-server client: connection lost; reconnecting", "err", lost)
	c.notifyState(Reconnecting, lost)
	c.reconnect()
}

// reconnect redials with exponential back-off and resumes the session, then
// asks every unfinished process to recover what it missed.
func (c *Client) reconnect() {
	deadline := time.Now().Add(c.opts.ReconnectTimeout)
	backoff := 50 * time.Millisecond
	var lastErr error
	var refusedSince time.Time
	fresh := false // the session is gone and the Client had no processes: start anew
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-c.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 2*time.Second)
		}
		if c.ctx.Err() != nil {
			return
		}
		if time.Now().After(deadline) {
			c.lose(fmt.Errorf("%w: reconnecting for %v failed: %v", ErrConnectionLost, c.opts.ReconnectTimeout, lastErr))
			return
		}
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		s, err := c.dialer(ctx)
		if err != nil {
			cancel()
			lastErr = err
			if !errors.Is(err, syscall.ECONNREFUSED) {
				refusedSince = time.Time{}
			} else if refusedSince.IsZero() {
				refusedSince = time.Now()
			} else if rt := c.opts.RefusedTimeout; rt > 0 && time.Since(refusedSince) >= rt {
				c.lose(fmt.Errorf("%w: the server refused connections for %v: %v", ErrConnectionLost, rt.Round(time.Second), err))
				return
			}
			continue
		}
		refusedSince = time.Time{}
		c.mu.Lock()
		sid := c.sessionID
		c.mu.Unlock()
		resume := &sid
		if fresh {
			resume = nil
		}
		rc, res, err := c.handshake(ctx, s, resume)
		cancel()
		if err != nil {
			lastErr = err
			var pe *protocol.Error
			if errors.As(err, &pe) && isUnknownSession(err) {
				// "unknown session id": expired or the server restarted.
				if c.canStartOver() {
					fresh = true
					continue
				}
				c.lose(fmt.Errorf("%w: %s", ErrSessionLost, pe.Message))
				return
			}
			// -32010 (the server has not noticed the old connection's end
			// yet) and transport errors are worth another try.
			continue
		}
		c.opts.Logger.Debug("exec-server client: session resumed", "session", sid, "fresh", fresh, "attempts", attempt+1)
		if fresh {
			c.mu.Lock()
			c.sessionID = res.SessionID
			c.info = res.EnvironmentInfo
			c.mu.Unlock()
		}
		c.install(rc)
		c.mu.Lock()
		procs := make([]*Process, 0, len(c.procs))
		for _, p := range c.procs {
			procs = append(procs, p)
		}
		c.mu.Unlock()
		for _, p := range procs {
			p.resync()
		}
		var note error
		if fresh {
			note = ErrFreshSession
		}
		c.notifyState(Reconnected, note)
		return
	}
}

// canStartOver reports whether losing the session loses nothing: the
// Client has no processes and was not asked to resume a given session.
func (c *Client) canStartOver() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.procs) == 0 && c.opts.ResumeSession == ""
}

// notifyState calls Options.OnStateChange. Only the connection watcher
// calls it (one at a time), and not once the Client is closed.
func (c *Client) notifyState(s State, err error) {
	if c.opts.OnStateChange != nil && c.ctx.Err() == nil {
		c.opts.OnStateChange(s, err)
	}
}

// lose fails the client with err (ErrConnectionLost or ErrSessionLost)
// and reports Lost, unless the client was closed meanwhile.
func (c *Client) lose(err error) {
	if c.fail(err) {
		c.notifyState(Lost, err)
	}
}

// signalReady wakes those waiting for a connection. Called with c.mu held.
func (c *Client) signalReady() {
	if !c.readyDone {
		c.readyDone = true
		close(c.ready)
	}
}

// fail makes err the client's terminal error and fails every process. It
// reports false when the client had already failed (or was closed).
func (c *Client) fail(err error) bool {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return false
	}
	c.err = err
	c.signalReady()
	procs := c.procs
	c.procs = map[string]*Process{}
	c.mu.Unlock()
	for _, p := range procs {
		p.fail(err)
	}
	c.endWatches(err)
	return true
}

// conn returns the current connection, waiting while a reconnect is in
// progress.
func (c *Client) current(ctx context.Context) (*rpcConn, uint64, error) {
	for {
		c.mu.Lock()
		rc, gen, ready, err := c.conn, c.gen, c.ready, c.err
		c.mu.Unlock()
		if err != nil {
			return nil, 0, err
		}
		if rc != nil {
			return rc, gen, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// call sends a request, repeating it on the next connection if the
// connection drops before the answer and retry is set (the request is
// idempotent). A non-retried request lost that way fails with
// ErrConnectionLost.
func (c *Client) call(ctx context.Context, method string, params, result any, retry bool) error {
	params, err := c.sandboxed(ctx, method, params)
	if err != nil {
		return err
	}
	for {
		rc, _, err := c.current(ctx)
		if err != nil {
			return err
		}
		err = rc.call(ctx, method, params, result)
		if !errors.Is(err, errConnLost) {
			return err
		}
		if !retry || c.dialer == nil {
			// Wait for the watcher to settle the client's state so the
			// error says whether a reconnect is under way.
			return fmt.Errorf("%w: %s: %v", ErrConnectionLost, method, err)
		}
	}
}

// callGen is call pinned to one connection generation, gen (0: the
// current one): it fails with errConnLost instead of retrying, also without
// sending anything when the current connection is a later one, and reports
// the generation used. File handles use it because handles do not survive
// a reconnect.
func (c *Client) callGen(ctx context.Context, gen uint64, method string, params, result any) (uint64, error) {
	params, err := c.sandboxed(ctx, method, params)
	if err != nil {
		return 0, err
	}
	rc, cur, err := c.current(ctx)
	if err != nil {
		return 0, err
	}
	if gen != 0 && cur != gen {
		return cur, fmt.Errorf("%w: connection %d, which the request belongs to, was replaced by connection %d", errConnLost, gen, cur)
	}
	return cur, rc.call(ctx, method, params, result)
}

// extension calls a method this project's server adds to the protocol. A
// server without it (-32601) makes it fail with errors.ErrUnsupported from
// then on, without asking again.
func (c *Client) extension(ctx context.Context, method string, params, result any, retry bool) error {
	c.mu.Lock()
	no := c.unsupport[method]
	c.mu.Unlock()
	if no {
		return fmt.Errorf("exec-server client: %s: %w by this server", method, errors.ErrUnsupported)
	}
	err := c.call(ctx, method, params, result, retry)
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Code == protocol.CodeMethodNotFound {
		c.mu.Lock()
		c.unsupport[method] = true
		c.mu.Unlock()
		return fmt.Errorf("exec-server client: %s: %w by this server (%v)", method, errors.ErrUnsupported, pe)
	}
	return err
}

// ListProcesses lists the session's processes, the finished ones the
// server still retains included (process/list, an extension of this
// project's server; others make it fail with errors.ErrUnsupported).
func (c *Client) ListProcesses(ctx context.Context) ([]protocol.ProcessInfo, error) {
	var res protocol.ListResult
	if err := c.extension(ctx, protocol.MethodProcessList, nil, &res, true); err != nil {
		return nil, err
	}
	return res.Processes, nil
}

// SessionID returns the server's session id (stable across reconnects).
func (c *Client) SessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID
}

// Info returns the environment the server described in initialize.
func (c *Client) Info() protocol.EnvironmentInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// EnvironmentInfo asks the server for its environment (environment/info).
func (c *Client) EnvironmentInfo(ctx context.Context) (*protocol.EnvironmentInfo, error) {
	var res protocol.EnvironmentInfo
	if err := c.call(ctx, protocol.MethodEnvironmentInfo, nil, &res, true); err != nil {
		return nil, err
	}
	return &res, nil
}

// EnvironmentStatus asks for the server's status (environment/status),
// "ready" when it serves requests.
func (c *Client) EnvironmentStatus(ctx context.Context) (string, error) {
	var res protocol.EnvironmentStatus
	if err := c.call(ctx, protocol.MethodEnvironmentStatus, nil, &res, true); err != nil {
		return "", err
	}
	return res.Status, nil
}

// Close ends the client. Processes it started that are still running are
// terminated first (best effort, bounded by a few seconds): a program that
// is done with the server is done with its processes. Over stdio the server
// then exits; its exit is awaited.
func (c *Client) Close() error { return c.close(true) }

// Detach ends the client as Close does but leaves its processes running:
// over websocket the server keeps the session, processes and their
// retained output for its session TTL, and a Client with
// Options.ResumeSession set to SessionID() takes it up again. Over stdio
// the server exits when its stdin closes, and kills every process as it
// does.
func (c *Client) Detach() error { return c.close(false) }

func (c *Client) close(terminate bool) error {
	c.mu.Lock()
	if c.err == ErrClosed {
		c.mu.Unlock()
		return nil
	}
	var live []*Process
	for _, p := range c.procs {
		live = append(live, p)
	}
	c.mu.Unlock()
	if terminate && len(live) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var wg sync.WaitGroup
		for _, p := range live {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !p.finished() {
					_, _ = p.Terminate(ctx)
				}
			}()
		}
		wg.Wait()
		cancel()
	}
	c.fail(ErrClosed)
	c.mu.Lock()
	if c.err != ErrClosed {
		// The client had already failed; Close still releases it.
		c.err = ErrClosed
	}
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	if c.cmd != nil {
		return c.waitCmd()
	}
	return nil
}

// waitCmd waits for DialStdio's server, which exits when its stdin closes;
// it is killed if it does not within 5 s.
func (c *Client) waitCmd() error {
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		return <-done
	}
}

// onNotify routes a server notification; it runs on the read loop.
func (c *Client) onNotify(method string, params json.RawMessage) {
	var kind eventKind
	switch method {
	case protocol.NotifyProcessOutput:
		kind = evOutput
	case protocol.NotifyProcessExited:
		kind = evExited
	case protocol.NotifyProcessClosed:
		kind = evClosed
	default:
		c.extNotify(method, params)
		return
	}
	var ev event
	if err := decodeEvent(params, &ev); err != nil {
		c.opts.Logger.Debug("exec-server client: undecodable notification", "method", method, "err", err)
		return
	}
	ev.kind = kind
	c.mu.Lock()
	p := c.procs[ev.ProcessID]
	c.mu.Unlock()
	if p != nil {
		p.push(&ev)
	}
}

// newProcessID returns a process id unique within this client's session.
func (c *Client) newProcessID() string {
	return fmt.Sprintf("%s-%d", c.idPrefix, c.nextProc.Add(1))
}

// newWriteID returns a process/write id unique within this client.
func (c *Client) newWriteID() string {
	return fmt.Sprintf("%s-w%d", c.idPrefix, c.nextWID.Add(1))
}

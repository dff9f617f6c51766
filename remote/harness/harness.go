// Package harness is the initiator side of codex's remote mode: it asks
// the environment registry for a connect bundle (POST …/connect), pins the
// executor's static key from the answer, dials the harness-role rendezvous
// websocket, claims a fresh stream id, runs the Noise hybridIK handshake
// as initiator and returns the stream's secure channel, a jsonrpc.Stream
// for the SDK client.
//
// One websocket carries one stream, as with codex's own harness. With an
// executor that runs remote/channel's reliability extension too, a lost
// socket is redialled and the stream resumed on it (the relay must let
// the stream id move); with codex 0.169 a lost socket ends the stream. The
// identity (a Keypair) belongs to the Dialer and is reused for every
// stream it opens; /connect is called again for each, since its
// authorization is single-use.
package harness

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/internal/coalesce"
	"github.com/execgo/exec-server/remote/internal/envreg"
	"github.com/execgo/exec-server/remote/internal/wsread"
	"github.com/execgo/exec-server/remote/noise"
)

// SecurityProfile is the registry's name for the Noise transport.
const SecurityProfile = envreg.SecurityProfile

// Timeouts and limits of codex 0.169's harness.
const (
	ConnectTimeout  = 10 * time.Second // /connect, and the rendezvous dial
	PingInterval    = 30 * time.Second
	PongTimeout     = 60 * time.Second
	ReadLimit       = 256 << 10 // one websocket message
	maxConnectReply = 1 << 20
)

// Errors.
var (
	// ErrRegistryAuthRejected: message 2 carried codex's rejection marker
	// (the registry answered the executor's /validate with 401).
	ErrRegistryAuthRejected = errors.New("remote executor: registry authentication rejected")
	// ErrStreamReset: the rendezvous or the executor reset the stream
	// during the handshake. Its reason text is not trusted, so not shown.
	ErrStreamReset = errors.New("remote executor: stream reset")
	// ErrProtocol wraps a peer that broke the protocol.
	ErrProtocol = errors.New("remote executor: protocol error")
)

// RegistryError is a refused /connect.
type RegistryError struct {
	Status  int
	Code    string // error.code of the body, if any
	Message string
}

func (e *RegistryError) Error() string {
	s := fmt.Sprintf("environment registry: connect: HTTP %d", e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Retryable reports whether codex's harness treats the failure as
// transient (409 environment_offline, 408, 429, 5xx).
func (e *RegistryError) Retryable() bool {
	return e.Status == http.StatusConflict && e.Code == envreg.CodeEnvironmentOffline ||
		e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// IsAuth reports an authentication failure: the registry refused the
// token (401, 403) or the executor's credential was rejected.
func IsAuth(err error) bool {
	var re *RegistryError
	if errors.As(err, &re) {
		return re.Status == http.StatusUnauthorized || re.Status == http.StatusForbidden
	}
	return errors.Is(err, ErrRegistryAuthRejected)
}

// Options configure a Dialer.
type Options struct {
	// HTTPClient posts to the registry and dials the rendezvous. Default:
	// a client that follows no redirects (the reference follows none).
	HTTPClient *http.Client
	// Identity is the harness's static key; a fresh one if nil.
	Identity *noise.Keypair
	// ChatGPTAccountID is sent as ChatGPT-Account-ID on /connect when set.
	ChatGPTAccountID string
	// Plain turns off the acknowledgement and retransmission extension
	// (remote/channel's Reliable), which otherwise runs with any peer that
	// supports it too; with codex 0.169 it never runs.
	Plain bool
	// PingInterval and PongTimeout tune the keepalive (defaults 30 s and
	// 60 s, as codex).
	PingInterval, PongTimeout time.Duration
	// ResumeTimeout bounds the redialling of a resumable stream whose
	// socket was lost (default 30 s).
	ResumeTimeout time.Duration
	Logger        *slog.Logger
}

// Dialer opens streams to one environment.
type Dialer struct {
	base, envID, token string
	opts               Options
	id                 *noise.Keypair
	log                *slog.Logger
	ws                 *http.Client // opts.HTTPClient for the rendezvous sockets (coalesce.Client)
}

// NewDialer prepares a dialer for the registry at registryURL (a trailing
// slash is dropped; a path prefix is kept) and the environment id. token
// is the harness bearer token for /connect.
func NewDialer(registryURL, environmentID, token string, opts Options) (*Dialer, error) {
	u, err := url.Parse(strings.TrimSpace(registryURL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("remote executor: registry URL %q: want http(s)://host[/prefix]", registryURL)
	}
	if strings.TrimSpace(environmentID) == "" {
		return nil, errors.New("remote executor: empty environment id")
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = PingInterval
	}
	if opts.PongTimeout <= 0 {
		opts.PongTimeout = PongTimeout
	}
	if opts.ResumeTimeout <= 0 {
		opts.ResumeTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	id := opts.Identity
	if id == nil {
		if id, err = noise.GenerateKeypair(); err != nil {
			return nil, err
		}
	}
	return &Dialer{
		base:  strings.TrimRight(strings.TrimSpace(registryURL), "/"),
		envID: environmentID,
		token: token,
		opts:  opts,
		id:    id,
		log:   opts.Logger,
		ws:    coalesce.Client(opts.HTTPClient),
	}, nil
}

// Identity is the dialer's static key.
func (d *Dialer) Identity() *noise.Keypair { return d.id }

// Bundle is the registry's answer to /connect: EnvironmentID,
// ExecutorPublicKey, ExecutorRegistrationID, HarnessKeyAuthorization,
// SecurityProfile and URL (the rendezvous websocket). Its home is
// remote/internal/envreg, shared with the relay that sends it.
type Bundle = envreg.Bundle

// Connect asks the registry for a connect bundle (single-use).
func (d *Dialer) Connect(ctx context.Context) (*Bundle, error) {
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	var hdr http.Header
	if d.opts.ChatGPTAccountID != "" {
		hdr = http.Header{}
		hdr.Set("ChatGPT-Account-ID", d.opts.ChatGPTAccountID)
	}
	pub := d.id.Public()
	status, data, err := envreg.Post(ctx, d.opts.HTTPClient, d.base, d.envID, "connect", d.token, hdr,
		envreg.ConnectRequest{HarnessPublicKey: &pub}, maxConnectReply)
	if err != nil {
		return nil, fmt.Errorf("environment registry: connect: %w", err)
	}
	if status != http.StatusOK {
		re := &RegistryError{Status: status}
		re.Code, re.Message = envreg.ParseError(data)
		return nil, re
	}
	return ParseBundle(data, d.envID)
}

// ParseBundle checks a /connect answer for environment envID.
func ParseBundle(data []byte, envID string) (*Bundle, error) {
	var b Bundle
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%w: connect answer: %v", ErrProtocol, err)
	}
	switch {
	case b.EnvironmentID != envID:
		return nil, fmt.Errorf("%w: registry returned a different environment id", ErrProtocol)
	case b.SecurityProfile != SecurityProfile:
		return nil, fmt.Errorf("%w: registry returned security profile %q", ErrProtocol, b.SecurityProfile)
	case strings.TrimSpace(b.URL) == "":
		return nil, fmt.Errorf("%w: registry returned no rendezvous url", ErrProtocol)
	case strings.TrimSpace(b.ExecutorRegistrationID) == "":
		return nil, fmt.Errorf("%w: registry returned no executor registration id", ErrProtocol)
	case strings.TrimSpace(b.HarnessKeyAuthorization) == "":
		return nil, fmt.Errorf("%w: registry returned no harness key authorization", ErrProtocol)
	case len(b.HarnessKeyAuthorization) > noise.MaxAuthorization || !utf8.ValidString(b.HarnessKeyAuthorization):
		return nil, fmt.Errorf("%w: harness key authorization of %d bytes", ErrProtocol, len(b.HarnessKeyAuthorization))
	case b.ExecutorPublicKey.X25519 == nil:
		return nil, fmt.Errorf("%w: registry returned no executor public key", ErrProtocol)
	}
	return &b, nil
}

// Dial opens one stream: /connect, the rendezvous websocket, the
// handshake. ctx bounds the dial only. The channel's Close closes the
// websocket (codex's harness sends no Reset either).
func (d *Dialer) Dial(ctx context.Context) (*channel.Channel, error) {
	b, err := d.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return d.DialBundle(ctx, b)
}

// DialBundle opens a stream with a bundle from Connect.
func (d *Dialer) DialBundle(ctx context.Context, b *Bundle) (*channel.Channel, error) {
	dctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, b.URL, &websocket.DialOptions{HTTPClient: d.ws})
	if err != nil {
		return nil, fmt.Errorf("remote executor: rendezvous: %w", err)
	}
	ws.SetReadLimit(ReadLimit)
	ch, err := d.handshake(dctx, ws, b)
	if err != nil {
		ws.CloseNow()
		return nil, err
	}
	return ch, nil
}

func (d *Dialer) handshake(ctx context.Context, ws *websocket.Conn, b *Bundle) (*channel.Channel, error) {
	sid, err := newStreamID()
	if err != nil {
		return nil, err
	}
	in, err := noise.NewInitiator(d.id, b.ExecutorPublicKey, noise.Prologue(d.envID, b.ExecutorRegistrationID, sid))
	if err != nil {
		return nil, err
	}
	msg1, err := in.WriteMessage1([]byte(b.HarnessKeyAuthorization))
	if err != nil {
		return nil, err
	}
	// Resume{next_seq:0} claims the stream id at the rendezvous.
	if err := send(ctx, ws, frame.Resume(sid, 0)); err != nil {
		return nil, err
	}
	if err := send(ctx, ws, frame.Handshake(sid, msg1)); err != nil {
		return nil, err
	}
	for {
		f, err := recv(ctx, ws)
		if err != nil {
			return nil, fmt.Errorf("remote executor: waiting for the handshake: %w", err)
		}
		if f == nil || f.StreamID != sid {
			continue // malformed, or another stream's: ignored
		}
		switch f.Kind {
		case frame.KindReset:
			return nil, ErrStreamReset
		case frame.KindData:
			return nil, fmt.Errorf("%w: data before the handshake", ErrProtocol)
		case frame.KindHandshake:
		default:
			continue
		}
		payload, sendCS, recvCS, err := in.ReadMessage2(f.Payload)
		if err != nil {
			return nil, fmt.Errorf("remote executor: %w", err)
		}
		switch {
		case string(payload) == noise.RejectionMarker:
			sendCS.Destroy()
			recvCS.Destroy()
			return nil, ErrRegistryAuthRejected
		case len(payload) != 0:
			sendCS.Destroy()
			recvCS.Destroy()
			return nil, fmt.Errorf("%w: unexpected handshake payload", ErrProtocol)
		}
		return d.start(ws, b, sid, sendCS, recvCS), nil
	}
}

// link is the stream's current relay socket (it changes on resume).
type link struct {
	mu sync.Mutex
	ws *websocket.Conn
}

func (l *link) get() *websocket.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ws
}

func (l *link) set(ws *websocket.Conn) *websocket.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.ws
	l.ws = ws
	return old
}

// start runs the established stream: a read loop feeding the channel and
// a keepalive. When the socket is lost and the stream is resumable (the
// executor runs the reliability extension too), the read loop dials a new
// socket and moves the stream to it.
func (d *Dialer) start(ws *websocket.Conn, b *Bundle, sid string, sendCS, recvCS *noise.CipherState) *channel.Channel {
	ctx, cancel := context.WithCancel(context.Background())
	l := &link{ws: ws}
	// The channel calls its Sender one call at a time: one encoding
	// buffer serves every frame (an allocation per 60 KiB record before).
	var buf []byte
	sender := channel.SenderFunc(func(ctx context.Context, f *frame.Frame) error {
		buf = f.Append(buf[:0])
		return l.get().Write(ctx, websocket.MessageBinary, buf)
	})
	ch := channel.New(sid, sender, sendCS, recvCS, channel.Options{
		Name:         "exec-server remote stream " + sid,
		WaitWhenFull: true, // this socket is ours alone: back-pressure
		Reliable:     !d.opts.Plain,
		// The client parses every message and answers bad JSON itself.
		SkipJSONCheck: true,
		OnClose: func(error) {
			cancel()
			l.get().CloseNow()
		},
	})
	go func() {
		ws := l.get()
		resumed := false
		var rd reader
		for {
			var f *frame.Frame
			var err error
			if resumed {
				// The executor answers a resume at once (records, an
				// ack, or a Reset if it no longer has the stream).
				rctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
				f, err = rd.recv(rctx, ws)
				timedOut := rctx.Err() != nil && ctx.Err() == nil
				cancel()
				if err != nil && timedOut {
					ch.Fail(fmt.Errorf("remote executor: resumed stream not answered: %w", err))
					return
				}
				resumed = err == nil && f == nil
			} else {
				f, err = rd.recv(ctx, ws)
			}
			if err != nil {
				if ctx.Err() == nil && ch.Resumable() {
					nws, rerr := d.resume(ctx, b, l, ch, sender)
					if rerr == nil {
						d.log.Debug("remote stream resumed on a new socket", "stream", sid)
						ws.CloseNow()
						ws = nws
						resumed = true
						continue
					}
					err = rerr
				}
				ch.Fail(fmt.Errorf("remote executor: relay connection: %w", err))
				return
			}
			if f == nil || f.StreamID != sid || f.Kind == frame.KindHandshake {
				continue
			}
			if err := ch.Deliver(ctx, f); err != nil {
				if !errors.Is(err, channel.ErrPeerReset) {
					d.log.Debug("remote stream failed", "stream", sid, "err", err)
				}
				return
			}
		}
	}()
	go d.keepalive(ctx, l, ch)
	return ch
}

// resume moves the stream to a new socket: it redials and sends the
// resume frame, and does both again when the new socket is lost before
// the resume went out (a relay that drops sockets may drop the new one
// too), all within ResumeTimeout.
func (d *Dialer) resume(ctx context.Context, b *Bundle, l *link, ch *channel.Channel, sender channel.Sender) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.ResumeTimeout)
	defer cancel()
	for {
		nws, err := d.redial(ctx, b)
		if err != nil {
			return nil, err
		}
		l.set(nws).CloseNow()
		err = ch.Rebind(ctx, sender)
		if err == nil {
			return nws, nil
		}
		nws.CloseNow()
		if ctx.Err() != nil || ch.Err() != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
		d.log.Debug("remote stream: new socket lost before the resume went out; redialing", "stream", ch.StreamID(), "err", err)
	}
}

// redial dials a new socket for a resumed stream: the same rendezvous URL
// first, then a fresh one from /connect, retrying with a backoff until
// ctx ends (resume bounds it by ResumeTimeout).
func (d *Dialer) redial(ctx context.Context, b *Bundle) (*websocket.Conn, error) {
	url := b.URL
	delay := 100 * time.Millisecond
	for {
		dctx, dcancel := context.WithTimeout(ctx, ConnectTimeout)
		ws, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: d.ws})
		dcancel()
		if err == nil {
			ws.SetReadLimit(ReadLimit)
			return ws, nil
		}
		// The URL may have expired: ask the registry for another.
		if nb, cerr := d.Connect(ctx); cerr == nil {
			url = nb.URL
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("resume: %w (last: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 4*time.Second)
	}
}

// keepalive pings every PingInterval, never with a pong outstanding. A
// pong PongTimeout late ends the stream, or, if it is resumable, drops the
// socket for the read loop to replace.
func (d *Dialer) keepalive(ctx context.Context, l *link, ch *channel.Channel) {
	t := time.NewTimer(d.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ws := l.get()
		pctx, cancel := context.WithTimeout(ctx, d.opts.PongTimeout)
		err := ws.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			if ch.Resumable() {
				ws.CloseNow()
			} else {
				ch.Fail(fmt.Errorf("remote executor: relay connection: pong timeout: %w", err))
				return
			}
		}
		t.Reset(d.opts.PingInterval)
	}
}

func send(ctx context.Context, ws *websocket.Conn, f *frame.Frame) error {
	return ws.Write(ctx, websocket.MessageBinary, f.Marshal())
}

// recv reads the next websocket message: nil (and no error) for a text
// message or a frame that fails decoding or validation, which codex drops.
func recv(ctx context.Context, ws *websocket.Conn) (*frame.Frame, error) {
	return decode(ws.Read(ctx))
}

// reader is recv for a stream's read loop: its messages are read through
// one scratch buffer.
type reader struct{ wsread.Reader }

func (r *reader) recv(ctx context.Context, ws *websocket.Conn) (*frame.Frame, error) {
	return decode(r.Read(ctx, ws))
}

func decode(typ websocket.MessageType, data []byte, err error) (*frame.Frame, error) {
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageBinary {
		return nil, nil
	}
	f, err := frame.Unmarshal(data)
	if err != nil || frame.Validate(f) != nil {
		return nil, nil
	}
	return f, nil
}

// newStreamID is a random UUIDv4, lowercase and hyphenated.
func newStreamID() (string, error) {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return "", err
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

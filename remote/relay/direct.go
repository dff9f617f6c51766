package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/remote/awssig"
	"github.com/execgo/exec-server/remote/internal/envreg"
)

// The direct transport (codex's `--remote-transport direct --aws-sigv4`,
// remote/executor/direct.go) served by exec-relay, so that a self-hosted
// deployment needs no cloud:
//
//   - POST /cloud/environment/{env}/direct/register, SigV4-signed with a
//     key of Options.DirectKeys: answers a signed URL of this relay;
//   - GET /direct/environment/{env}?… (that URL), SigV4-signed too: the
//     executor's websocket, which then waits for one harness;
//   - GET /direct/harness/{env}, with a harness bearer token: a plain
//     exec-server JSON-RPC websocket, bridged message by message to the
//     waiting executor socket (the executor dials a fresh one for the next
//     harness as soon as this one ends).
//
// There is no end-to-end encryption in this transport: the relay sees the
// JSON-RPC messages (use the Noise transport where it must not).

const roleDirect = "direct"

// directWait is how long a harness waits for an executor socket (the
// executor redials 0.5–0.75 s after its previous connection ends).
const directWait = 10 * time.Second

// directMaxMessage bounds one bridged message, as the exec-server's
// JSON-RPC limit.
const directMaxMessage = 64 << 20

// directIdle is an executor socket waiting for a harness.
type directIdle struct {
	c    *websocket.Conn
	take chan struct{} // closed by the harness that takes it
	done chan struct{} // closed when the bridge ends
	gone chan struct{} // closed when replaced
}

type directState struct {
	mu   sync.Mutex
	idle map[string]*directIdle
	// bridges bounds the harness sockets of this transport.
	bridges chan struct{}
}

func (s *Server) directRoutes() {
	s.direct = &directState{idle: map[string]*directIdle{}, bridges: make(chan struct{}, s.opts.MaxHarnessSockets)}
	s.mux.HandleFunc("POST /cloud/environment/{env}/direct/register", s.directRegister)
	s.mux.HandleFunc("GET /direct/environment/{env}", s.directExecutor)
	s.mux.HandleFunc("GET /direct/harness/{env}", s.directHarness)
}

// directAuth checks a request's SigV4 signature (nothing when
// InsecureNoAuth).
func (s *Server) directAuth(r *http.Request, body []byte) error {
	if s.opts.InsecureNoAuth {
		return nil
	}
	if s.opts.DirectKeys == nil {
		return errors.New("the direct transport is not configured on this relay")
	}
	_, err := awssig.Verify(r, body, s.opts.DirectKeys, time.Now())
	return err
}

func (s *Server) directRegister(w http.ResponseWriter, r *http.Request) {
	env := r.PathValue("env")
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		writeError(w, http.StatusBadRequest, envreg.CodeBadRequest, "unreadable body")
		return
	}
	if err := s.directAuth(r, body); err != nil {
		s.log.Info("direct/register refused", "environment_id", env, "err", err)
		writeError(w, http.StatusUnauthorized, envreg.CodeUnauthorized, "SigV4 authentication failed")
		return
	}
	var req envreg.DirectRegisterRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(&req) != nil || req.Transport != envreg.DirectTransport {
		writeError(w, http.StatusBadRequest, envreg.CodeBadRequest, `expected {"transport":"`+envreg.DirectTransport+`"}`)
		return
	}
	b := make([]byte, 16)
	rand.Read(b)
	reg := "direct_" + hex.EncodeToString(b)
	u := s.wsBase(r) + "/direct/environment/" + env + "?" + signedQuery(s.secret, urlClaims{role: roleDirect, env: env, reg: reg, expiry: time.Now().Add(s.opts.ExecutorURLTTL)})
	s.event(Event{Kind: "register", Role: roleDirect, Env: env, Reg: reg, Status: http.StatusOK, Header: r.Header})
	writeJSON(w, http.StatusOK, envreg.DirectRegistration{EnvironmentID: env, RegistrationID: reg, Transport: envreg.DirectTransport, URL: u})
}

// directExecutor holds an executor socket until a harness takes it, a
// newer socket of the environment replaces it, or the relay closes.
func (s *Server) directExecutor(w http.ResponseWriter, r *http.Request) {
	env := r.PathValue("env")
	if _, err := checkURL(s.secret, r.URL.RawQuery, roleDirect, env, time.Now()); err != nil {
		var rej *rejection
		errors.As(err, &rej)
		w.Header().Set("x-codex-rendezvous-rejection-reason", rej.reason)
		// 409 makes the executor register again; 403 would end it.
		status := rej.status
		if rej.reason == "expired" {
			status = http.StatusConflict
		}
		http.Error(w, rej.reason, status)
		return
	}
	if err := s.directAuth(r, nil); err != nil {
		http.Error(w, "SigV4 authentication failed", http.StatusForbidden)
		return
	}
	// The socket outlives the HTTP server's interest (it is hijacked):
	// Close owns this goroutine.
	if !s.ownSocket() {
		http.Error(w, "relay shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.socketDone()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	c.SetReadLimit(directMaxMessage)
	d := &directIdle{c: c, take: make(chan struct{}), done: make(chan struct{}), gone: make(chan struct{})}
	s.direct.mu.Lock()
	if old := s.direct.idle[env]; old != nil {
		close(old.gone)
	} else if len(s.direct.idle) >= s.opts.MaxEnvironments {
		s.direct.mu.Unlock()
		c.Close(websocket.StatusTryAgainLater, "too many environments")
		return
	}
	s.direct.idle[env] = d
	s.direct.mu.Unlock()
	s.event(Event{Kind: "attach", Role: roleDirect, Env: env})
	select {
	case <-d.take:
		<-d.done
		return
	case <-d.gone:
		c.Close(websocket.StatusGoingAway, "replaced by a newer executor socket")
	case <-s.stop:
		c.Close(websocket.StatusGoingAway, "relay shutting down")
	}
	s.direct.mu.Lock()
	if s.direct.idle[env] == d {
		delete(s.direct.idle, env)
	}
	s.direct.mu.Unlock()
}

// takeDirect takes env's waiting executor socket, waiting up to
// directWait for one.
func (s *Server) takeDirect(ctx context.Context, env string) *directIdle {
	deadline := time.Now().Add(directWait)
	for {
		s.direct.mu.Lock()
		d := s.direct.idle[env]
		if d != nil {
			delete(s.direct.idle, env)
			close(d.take)
		}
		s.direct.mu.Unlock()
		if d != nil || time.Now().After(deadline) {
			return d
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.stop:
			return nil
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (s *Server) directHarness(w http.ResponseWriter, r *http.Request) {
	env := r.PathValue("env")
	if !s.opts.InsecureNoAuth && !s.opts.HarnessTokens.MatchEnv(bearer(r.Header.Get("Authorization")), env) {
		writeError(w, http.StatusUnauthorized, envreg.CodeUnauthorized, "invalid harness token")
		return
	}
	select {
	case s.direct.bridges <- struct{}{}:
		defer func() { <-s.direct.bridges }()
	default:
		writeError(w, http.StatusServiceUnavailable, envreg.CodeTooManyConnections, "too many direct harness connections")
		return
	}
	if !s.ownSocket() {
		http.Error(w, "relay shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.socketDone()
	d := s.takeDirect(r.Context(), env)
	if d == nil {
		writeError(w, http.StatusConflict, envreg.CodeEnvironmentOffline, "no executor socket for this environment")
		return
	}
	defer close(d.done)
	defer d.c.CloseNow()
	h, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	defer h.CloseNow()
	h.SetReadLimit(directMaxMessage)
	s.event(Event{Kind: "attach", Role: roleHarness, Env: env, Reg: roleDirect})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(from, to *websocket.Conn) {
		defer wg.Done()
		defer cancel()
		for {
			typ, rd, err := from.Reader(ctx)
			if err != nil {
				return
			}
			wr, err := to.Writer(ctx, typ)
			if err != nil {
				return
			}
			if _, err := io.Copy(wr, rd); err != nil {
				return
			}
			if wr.Close() != nil {
				return
			}
		}
	}
	go pipe(h, d.c)
	go pipe(d.c, h)
	wg.Wait()
	h.Close(websocket.StatusNormalClosure, "")
	d.c.Close(websocket.StatusNormalClosure, "")
}

// LoadDirectKeys reads the SigV4 keys of the direct transport from path:
// one "ACCESS_KEY_ID SECRET_ACCESS_KEY" per line, # comments and blank
// lines ignored. The file holds secrets: it must not be readable by group
// or others.
func LoadDirectKeys(path string) (func(string) (string, bool), error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by group or others (mode %o); chmod 600 it", path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%s:%d: want ACCESS_KEY_ID SECRET_ACCESS_KEY", path, i+1)
		}
		keys[f[0]] = f[1]
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no key", path)
	}
	return func(id string) (string, bool) { s, ok := keys[id]; return s, ok }, nil
}

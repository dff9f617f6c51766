package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
)

// double is a minimal registry + rendezvous for tests: one
// environment, one executor socket, one stream per harness socket, frames
// forwarded verbatim. The real one is package relay.
type double struct {
	t   testing.TB
	srv *httptest.Server
	env string

	mu            sync.Mutex
	execKey       *noise.PublicKey
	regID         string
	registrations int
	authz         map[string]authzEntry
	validateCode  int // non-zero: /validate answers this status
	validated     []string
	execWS        *websocket.Conn
	execUp        chan struct{} // closed when the executor's socket is up
	streams       map[string]*websocket.Conn
	// onHarnessFrame, if set, may rewrite or drop (nil) a frame on its
	// way to the executor.
	onHarnessFrame func(raw []byte) [][]byte
	// onExecFrame does the same toward the harness.
	onExecFrame func(raw []byte) [][]byte
	// resumeGrace: a harness socket that goes releases its streams for
	// another socket to claim, without a Reset to the executor.
	resumeGrace bool
	// harnessSockets counts the harness sockets accepted.
	harnessSockets int
	// execFrames records the kind and payload size of every frame the
	// executor sent.
	execFrames []sizeRecord
}

type sizeRecord struct {
	kind frame.Kind
	size int
}

type authzEntry struct {
	key  noise.PublicKey
	used bool
}

const harnessToken = "harness-token"

func newDouble(t testing.TB, env string) *double {
	d := &double{t: t, env: env, authz: map[string]authzEntry{}, streams: map[string]*websocket.Conn{}, execUp: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /cloud/environment/{id}/register", d.register)
	mux.HandleFunc("POST /cloud/environment/{id}/connect", d.connect)
	mux.HandleFunc("POST /cloud/environment/{id}/validate", d.validate)
	mux.HandleFunc("GET /rendezvous/environment/{id}", d.executorSocket)
	mux.HandleFunc("GET /rendezvous/harness/{id}", d.harnessSocket)
	d.srv = httptest.NewUnstartedServer(mux) // 127.0.0.1
	d.srv.Start()
	t.Cleanup(d.srv.Close)
	return d
}

func (d *double) wsURL(path string) string {
	return "ws" + strings.TrimPrefix(d.srv.URL, "http") + path
}

func apiError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":"test double"}}`, code)
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func randHex() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (d *double) register(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SecurityProfile   string          `json:"security_profile"`
		ExecutorPublicKey noise.PublicKey `json:"executor_public_key"`
	}
	if r.PathValue("id") != d.env || json.NewDecoder(r.Body).Decode(&req) != nil || req.SecurityProfile != SecurityProfile {
		apiError(w, 400, "bad_request")
		return
	}
	d.mu.Lock()
	d.execKey = &req.ExecutorPublicKey
	d.registrations++
	d.regID = "reg-" + randHex()
	regID := d.regID
	d.mu.Unlock()
	reply(w, map[string]string{
		"environment_id":           d.env,
		"url":                      d.wsURL("/rendezvous/environment/" + d.env + "?role=environment&sig=x"),
		"security_profile":         SecurityProfile,
		"executor_registration_id": regID,
	})
}

func (d *double) connect(w http.ResponseWriter, r *http.Request) {
	var req struct {
		HarnessPublicKey noise.PublicKey `json:"harness_public_key"`
	}
	if r.Header.Get("Authorization") != "Bearer "+harnessToken {
		apiError(w, 401, "unauthorized")
		return
	}
	if json.NewDecoder(r.Body).Decode(&req) != nil {
		apiError(w, 400, "bad_request")
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.execKey == nil || r.PathValue("id") != d.env {
		apiError(w, 409, "environment_offline")
		return
	}
	a := "authz-" + randHex()
	d.authz[a] = authzEntry{key: req.HarnessPublicKey}
	reply(w, map[string]any{
		"environment_id":            d.env,
		"url":                       d.wsURL("/rendezvous/harness/" + d.env + "?role=harness"),
		"security_profile":          SecurityProfile,
		"executor_registration_id":  d.regID,
		"executor_public_key":       d.execKey,
		"harness_key_authorization": a,
	})
}

func (d *double) validate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RegistrationID string          `json:"executor_registration_id"`
		Key            noise.PublicKey `json:"harness_public_key"`
		Authz          string          `json:"harness_key_authorization"`
	}
	if json.NewDecoder(r.Body).Decode(&req) != nil {
		apiError(w, 400, "bad_request")
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.validated = append(d.validated, r.Header.Get("X-Codex-Noise-Stream-Id"))
	if d.validateCode != 0 {
		apiError(w, d.validateCode, "test")
		return
	}
	e, ok := d.authz[req.Authz]
	valid := ok && !e.used && e.key.Equal(req.Key) && req.RegistrationID == d.regID
	if ok {
		e.used = true
		d.authz[req.Authz] = e
	}
	reply(w, map[string]bool{"valid": valid})
}

func (d *double) executorSocket(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(1 << 20)
	d.mu.Lock()
	d.execWS = c
	select {
	case <-d.execUp:
	default:
		close(d.execUp)
	}
	d.mu.Unlock()
	ctx := r.Context()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		f, err := frame.Unmarshal(data)
		if err != nil {
			continue
		}
		d.mu.Lock()
		d.execFrames = append(d.execFrames, sizeRecord{f.Kind, len(f.Payload)})
		h := d.streams[f.StreamID]
		if f.Kind == frame.KindReset {
			delete(d.streams, f.StreamID)
		}
		hook := d.onExecFrame
		d.mu.Unlock()
		out := [][]byte{data}
		if hook != nil {
			out = hook(data)
		}
		for _, m := range out {
			if h != nil {
				wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // not the request's: its end would close the other socket
				h.Write(wctx, websocket.MessageBinary, m)
				cancel()
			}
		}
	}
}

func (d *double) harnessSocket(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(1 << 20)
	d.mu.Lock()
	d.harnessSockets++
	d.mu.Unlock()
	ctx := r.Context()
	var mine []string
	defer func() {
		// A harness that goes away resets its streams at the executor.
		d.mu.Lock()
		ex := d.execWS
		for _, s := range mine {
			if d.streams[s] == c {
				delete(d.streams, s)
			} else {
				s = ""
			}
			if d.resumeGrace {
				s = ""
			}
			if s != "" && ex != nil {
				wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				ex.Write(wctx, websocket.MessageBinary, frame.Reset(s, "harness_disconnected").Marshal())
				cancel()
			}
		}
		d.mu.Unlock()
	}()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		f, err := frame.Unmarshal(data)
		if err != nil || strings.TrimSpace(f.StreamID) == "" {
			continue
		}
		d.mu.Lock()
		owner, ok := d.streams[f.StreamID]
		if !ok {
			d.streams[f.StreamID] = c
			mine = append(mine, f.StreamID)
		}
		ex := d.execWS
		hook := d.onHarnessFrame
		d.mu.Unlock()
		if ok && owner != c {
			continue // another socket's stream
		}
		out := [][]byte{data}
		if hook != nil {
			out = hook(data)
		}
		for _, m := range out {
			if ex != nil {
				wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // not the request's: its end would close the other socket
				ex.Write(wctx, websocket.MessageBinary, m)
				cancel()
			}
		}
	}
}

package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/internal/test/codexref"
	"github.com/execgo/exec-server/internal/test/syncbuf"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
	"github.com/execgo/exec-server/remote/relay"
	"github.com/execgo/exec-server/server"
)

const (
	execToken    = "exec-token"
	harnessToken = "harness-token"
)

// rig is an exec-relay and an executor serving a real server through it.
type rig struct {
	t      *testing.T
	relay  *relay.Server
	base   string
	env    string
	events *events
	runErr chan error
	cancel context.CancelFunc
}

type events struct {
	mu sync.Mutex
	ev []relay.Event
}

func (e *events) add(ev relay.Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

func (e *events) all() []relay.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]relay.Event(nil), e.ev...)
}

func (e *events) count(match func(relay.Event) bool) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.ev {
		if match(ev) {
			n++
		}
	}
	return n
}

func (e *events) waitCount(t *testing.T, n int, d time.Duration, match func(relay.Event) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for e.count(match) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d matching relay events after %s", n, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isAttach(ev relay.Event) bool { return ev.Kind == "attach" && ev.Role == "environment" }

func newRelayTB(t testing.TB) (*relay.Server, string, *events) { return newRelay(t, relay.Faults{}) }

func newRelay(t testing.TB, f relay.Faults) (*relay.Server, string, *events) {
	t.Helper()
	ev := &events{}
	rs, err := relay.New(relay.Options{
		ExecutorTokens: relay.NewTokens(execToken),
		HarnessTokens:  relay.NewTokens(harnessToken),
		OnEvent:        ev.add,
	})
	if err != nil {
		t.Fatal(err)
	}
	rs.ForTest().SetFaults(f)
	hs := httptest.NewServer(rs)
	t.Cleanup(func() {
		rs.Close()
		hs.Close()
	})
	return rs, hs.URL, ev
}

// impls are the executors under test: this package, and the reference
// (codex exec-server --remote) when EXEC_SERVER_REFERENCE names it.
func impls() []string {
	if os.Getenv("EXEC_SERVER_REFERENCE") != "" {
		return []string{"go", "reference"}
	}
	return []string{"go"}
}

// forEachImpl runs f as a subtest per executor implementation.
func forEachImpl(t *testing.T, f func(t *testing.T, impl string)) {
	for _, impl := range impls() {
		t.Run(impl, func(t *testing.T) { f(t, impl) })
	}
}

// startRig starts relay and executor; tweak adjusts this package's
// executor (the reference takes its own constants).
func startRig(t *testing.T, impl string, f relay.Faults, tweak func(*Config)) *rig {
	t.Helper()
	rs, base, ev := newRelay(t, f)
	r := &rig{t: t, relay: rs, base: base, events: ev, runErr: make(chan error, 1)}
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range ev.all() {
				t.Logf("relay event %s %s stream=%s status=%d code=%s", e.Kind, e.Role, e.Stream, e.Status, e.Code)
			}
		}
	})
	r.env = strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			return c
		}
		return '-'
	}, "env-"+t.Name())
	r.env = r.env[:min(len(r.env), 60)]
	if impl == "reference" {
		r.startReference(base)
		return r
	}
	srv := server.New(server.Config{})
	t.Cleanup(srv.Close)
	cfg := Config{Logger: testLogger(t), RegistryURL: base, EnvironmentID: r.env, Token: execToken, Server: srv, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.runErr <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.runErr:
		case <-time.After(10 * time.Second):
			t.Error("executor did not stop")
		}
	})
	return r
}

// startReference runs codex exec-server --remote against the relay, with
// a CODEX_HOME outside the temp dir (the reference wants it there).
func (r *rig) startReference(base string) {
	t := r.t
	home := codexref.Scratch(t, "exec-server-executor-test", "home-")
	cmd := exec.Command(codexref.Bin(t), "exec-server", "--remote", base, "--environment-id", r.env)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "CODEX_HOME=" + home, "CODEX_API_KEY=" + execToken, "RUST_LOG=warn"}
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	go func() {
		err := <-done
		r.runErr <- err
		done <- err
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("reference stderr:\n%s", stderr.String())
		}
	})
}

func (r *rig) waitAttached() {
	r.t.Helper()
	r.events.waitCount(r.t, 1, 10*time.Second, isAttach)
}

// bundle is a /connect answer.
type bundle struct {
	URL   string          `json:"url"`
	RegID string          `json:"executor_registration_id"`
	Key   noise.PublicKey `json:"executor_public_key"`
	Authz string          `json:"harness_key_authorization"`
}

func (r *rig) connect(id *noise.Keypair) bundle {
	r.t.Helper()
	body, _ := json.Marshal(map[string]any{"harness_public_key": id.Public()})
	req, _ := http.NewRequest("POST", r.base+"/cloud/environment/"+r.env+"/connect", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+harnessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		r.t.Fatalf("connect: %d %s", resp.StatusCode, data)
	}
	var b bundle
	if err := json.Unmarshal(data, &b); err != nil {
		r.t.Fatal(err)
	}
	return b
}

// stream is one harness-side relay stream.
type stream struct {
	ws  *websocket.Conn
	sid string
	ch  *channel.Channel
	// ignoreReset swallows the next Reset (to see that the executor kept
	// a stream it answered with a Reset).
	ignoreReset atomic.Bool
	resets      atomic.Int32
}

var errReset = errors.New("stream reset by executor")

func newStreamID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func dialHarness(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial harness leg: %v", err)
	}
	ws.SetReadLimit(256 << 10)
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

func sendFrame(ws *websocket.Conn, f *frame.Frame) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return ws.Write(ctx, websocket.MessageBinary, f.Marshal())
}

// readFrame returns the next frame for sid.
func readFrame(ws *websocket.Conn, sid string, d time.Duration) (*frame.Frame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return nil, err
		}
		f, err := frame.Unmarshal(b)
		if err != nil || f.StreamID != sid {
			continue
		}
		return f, nil
	}
}

// handshake runs the initiator over ws for a new stream id and returns
// message 2's payload and the channel (nil when the executor reset).
func handshake(t *testing.T, ws *websocket.Conn, env string, b bundle, id *noise.Keypair, sid string, authz []byte) ([]byte, *stream, error) {
	t.Helper()
	payload, send, recv, err := rawHandshake(t, ws, env, b, id, sid, authz)
	if err != nil {
		return nil, nil, err
	}
	return payload, newStream(ws, sid, send, recv), nil
}

// rawHandshake is handshake without the channel: the caller seals and
// opens records itself.
func rawHandshake(t *testing.T, ws *websocket.Conn, env string, b bundle, id *noise.Keypair, sid string, authz []byte) ([]byte, *noise.CipherState, *noise.CipherState, error) {
	t.Helper()
	ini, err := noise.NewInitiator(id, b.Key, noise.Prologue(env, b.RegID, sid))
	if err != nil {
		t.Fatal(err)
	}
	msg1, err := ini.WriteMessage1(authz)
	if err != nil {
		t.Fatal(err)
	}
	if err := sendFrame(ws, frame.Resume(sid, 0)); err != nil {
		t.Fatal(err)
	}
	if err := sendFrame(ws, frame.Handshake(sid, msg1)); err != nil {
		t.Fatal(err)
	}
	f, err := readFrame(ws, sid, 15*time.Second)
	if err != nil {
		return nil, nil, nil, err
	}
	if f.Kind == frame.KindReset {
		return nil, nil, nil, errReset
	}
	if f.Kind != frame.KindHandshake {
		t.Fatalf("answer to message 1: %v frame", f.Kind)
	}
	payload, send, recv, err := ini.ReadMessage2(f.Payload)
	if err != nil {
		t.Fatalf("message 2: %v", err)
	}
	return payload, send, recv, nil
}

func newStream(ws *websocket.Conn, sid string, send, recv *noise.CipherState) *stream {
	st := &stream{ws: ws, sid: sid}
	st.ch = channel.New(sid, channel.SenderFunc(func(ctx context.Context, f *frame.Frame) error {
		return ws.Write(ctx, websocket.MessageBinary, f.Marshal())
	}), send, recv, channel.Options{WaitWhenFull: true})
	go func() {
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				st.ch.Fail(err)
				return
			}
			f, err := frame.Unmarshal(b)
			if err != nil || frame.Validate(f) != nil || f.StreamID != sid {
				continue
			}
			if f.Kind == frame.KindReset && st.ignoreReset.CompareAndSwap(true, false) {
				st.resets.Add(1)
				continue
			}
			if err := st.ch.Deliver(context.Background(), f); err != nil {
				return
			}
		}
	}()
	return st
}

// open connects, dials and completes a handshake with a fresh identity.
func (r *rig) open() *stream {
	r.t.Helper()
	id, err := noise.GenerateKeypair()
	if err != nil {
		r.t.Fatal(err)
	}
	b := r.connect(id)
	ws := dialHarness(r.t, b.URL)
	payload, st, err := handshake(r.t, ws, r.env, b, id, newStreamID(), []byte(b.Authz))
	if err != nil {
		r.t.Fatalf("handshake: %v", err)
	}
	if len(payload) != 0 {
		r.t.Fatalf("message 2 payload %q", payload)
	}
	return st
}

// clientOver runs an SDK client over one secure channel (no redial: a
// dropped channel ends the client, as the tests want).
func clientOver(ctx context.Context, ch *channel.Channel, opts client.Options) (*client.Client, error) {
	opts.ReconnectTimeout = -1
	return client.NewClient(ctx, func(context.Context) (jsonrpc.Stream, error) { return ch, nil }, opts)
}

type nopServer struct{}

func (nopServer) ServeStream(context.Context, jsonrpc.Stream) {}

// testLogger logs to the test's output (shown on failure or with -v).
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

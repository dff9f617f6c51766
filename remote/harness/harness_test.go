package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
)

// echoExecutor is a test executor: it registers with the double, answers
// handshakes as the responder (with /validate), and echoes every JSON
// message back on its stream. misbehave, if set, replaces the answer to
// message 1 for a stream (frames to send instead of message 2).
type echoExecutor struct {
	t         testing.TB
	d         *double
	key       *noise.Keypair
	regID     string
	ws        *websocket.Conn
	wmu       sync.Mutex
	mu        sync.Mutex
	streams   map[string]*channel.Channel
	misbehave func(sid string) []*frame.Frame
	// entropy, if set, gives each handshake's message 2 randomness;
	// onHandshake and onData see the handshake messages and the inbound
	// data frames; serve replaces the echo loop.
	entropy     func() io.Reader
	onHandshake func(sid string, msg1, msg2 []byte)
	onData      func(f *frame.Frame)
	serve       func(ch *channel.Channel)
	plain       bool // no reliability extension
}

func startEchoExecutor(t testing.TB, d *double) *echoExecutor {
	t.Helper()
	key, err := noise.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return startEchoExecutorWith(t, d, &echoExecutor{key: key})
}

func startEchoExecutorWith(t testing.TB, d *double, e *echoExecutor) *echoExecutor {
	t.Helper()
	e.t, e.d, e.streams = t, d, map[string]*channel.Channel{}
	key := e.key
	body, _ := json.Marshal(map[string]any{"security_profile": SecurityProfile, "executor_public_key": key.Public()})
	resp, err := http.Post(d.srv.URL+"/cloud/environment/"+d.env+"/register", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		URL   string `json:"url"`
		RegID string `json:"executor_registration_id"`
	}
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	e.regID = reg.RegID
	ctx, cancel := context.WithCancel(context.Background())
	ws, _, err := websocket.Dial(ctx, reg.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(ReadLimit)
	e.ws = ws
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); ws.CloseNow(); <-done })
	<-d.execUp
	go func() {
		defer close(done)
		e.loop(ctx)
	}()
	return e
}

// send writes to the shared socket. Not with the caller's context: a
// websocket write whose context ends closes the connection, and one
// stream's end must not close every stream's socket.
func (e *echoExecutor) send(ctx context.Context, f *frame.Frame) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.ws.Write(wctx, websocket.MessageBinary, f.Marshal())
}

func (e *echoExecutor) loop(ctx context.Context) {
	for {
		f, err := recv(ctx, e.ws)
		if err != nil {
			return
		}
		if f == nil {
			continue
		}
		e.mu.Lock()
		ch := e.streams[f.StreamID]
		e.mu.Unlock()
		switch {
		case f.Kind == frame.KindHandshake && ch == nil:
			e.handshake(ctx, f)
		case ch != nil:
			if e.onData != nil && f.Kind == frame.KindData {
				e.onData(f)
			}
			if err := ch.Deliver(ctx, f); err != nil && !errors.Is(err, channel.ErrPeerReset) {
				e.send(ctx, frame.Reset(f.StreamID, "noise_relay_protocol_error"))
			}
		case f.Kind == frame.KindData, f.Kind == frame.KindResume && f.Ack > 0:
			// Data, or a resumption (a resume with the extension's ack
			// stamp, unlike the harness's first claim), for a stream
			// we do not have.
			e.send(ctx, frame.Reset(f.StreamID, "noise_relay_protocol_error"))
		}
	}
}

func (e *echoExecutor) handshake(ctx context.Context, f *frame.Frame) {
	sid := f.StreamID
	if e.misbehave != nil {
		if fs := e.misbehave(sid); fs != nil {
			for _, g := range fs {
				e.send(ctx, g)
			}
			return
		}
	}
	r := noise.NewResponder(e.key, noise.Prologue(e.d.env, e.regID, sid))
	if e.entropy != nil {
		r = noise.NewResponderWithEntropy(e.key, noise.Prologue(e.d.env, e.regID, sid), e.entropy())
	}
	authz, err := r.ReadMessage1(f.Payload)
	if err != nil {
		e.send(ctx, frame.Reset(sid, "noise_relay_protocol_error"))
		return
	}
	body, _ := json.Marshal(map[string]any{"executor_registration_id": e.regID, "harness_public_key": r.RemoteStatic(), "harness_key_authorization": string(authz)})
	req, _ := http.NewRequest("POST", e.d.srv.URL+"/cloud/environment/"+e.d.env+"/validate", bytes.NewReader(body))
	req.Header.Set("X-Codex-Noise-Stream-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.send(ctx, frame.Reset(sid, "noise_relay_protocol_error"))
		return
	}
	var v struct{ Valid bool }
	json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	var payload []byte
	switch {
	case resp.StatusCode == 401:
		payload = []byte(noise.RejectionMarker)
	case resp.StatusCode != 200 || !v.Valid:
		r.Destroy()
		e.send(ctx, frame.Reset(sid, "noise_relay_protocol_error"))
		return
	}
	msg2, sendCS, recvCS, err := r.WriteMessage2(payload)
	if err != nil {
		e.t.Error(err)
		return
	}
	if e.onHandshake != nil {
		e.onHandshake(sid, f.Payload, msg2)
	}
	e.send(ctx, frame.Handshake(sid, msg2))
	if payload != nil {
		return
	}
	ch := channel.New(sid, channel.SenderFunc(e.send), sendCS, recvCS, channel.Options{Reliable: !e.plain, OnClose: func(err error) {
		e.mu.Lock()
		delete(e.streams, sid)
		e.mu.Unlock()
	}})
	e.mu.Lock()
	e.streams[sid] = ch
	e.mu.Unlock()
	if e.serve != nil {
		go e.serve(ch)
		return
	}
	go func() {
		defer ch.Close()
		for {
			m, err := ch.Read(ctx)
			if err != nil {
				return
			}
			if err := ch.Write(ctx, m, false); err != nil {
				return
			}
		}
	}()
}

func TestDialEcho(t *testing.T) {
	d := newDouble(t, "env-go")
	startEchoExecutor(t, d)
	dl := dialer(t, d)
	ctx := context.Background()
	// Two streams from one dialer: one identity, two single-use
	// authorizations.
	var chans []*channel.Channel
	for range 2 {
		ch, err := dl.Dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		chans = append(chans, ch)
	}
	if chans[0].StreamID() == chans[1].StreamID() {
		t.Fatal("two streams share an id")
	}
	for i, ch := range chans {
		msgs := [][]byte{[]byte(`{"a":1}`), []byte(`"` + strings.Repeat("x", 200000) + `"`)}
		for _, m := range msgs {
			if err := ch.Write(ctx, m, false); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range msgs {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			got, err := ch.Read(rctx)
			cancel()
			if err != nil || !bytes.Equal(got, m) {
				t.Fatalf("stream %d: %d bytes, %v", i, len(got), err)
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.validated) != 2 || d.validated[0] != chans[0].StreamID() {
		t.Fatalf("validated stream ids %v", d.validated)
	}
}

func TestDialFailures(t *testing.T) {
	ctx := context.Background()
	t.Run("environment offline", func(t *testing.T) {
		d := newDouble(t, "env-off")
		_, err := dialer(t, d).Dial(ctx)
		var re *RegistryError
		if !errors.As(err, &re) || re.Status != 409 || re.Code != "environment_offline" || !re.Retryable() {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad token", func(t *testing.T) {
		d := newDouble(t, "env-tok")
		dl, _ := NewDialer(d.srv.URL, d.env, "wrong", Options{})
		if _, err := dl.Dial(ctx); !IsAuth(err) {
			t.Fatalf("err = %v", err)
		}
	})
	d := newDouble(t, "env-fail")
	e := startEchoExecutor(t, d)
	tests := []struct {
		name      string
		validate  int
		misbehave func(sid string) []*frame.Frame
		want      error
	}{
		{"validate 401 gives the marker", 401, nil, ErrRegistryAuthRejected},
		{"validate 403 gives a reset", 403, nil, ErrStreamReset},
		{"data before message 2", 0, func(sid string) []*frame.Frame {
			return []*frame.Frame{frame.Data(sid, 0, []byte("0123456789abcdef0"))}
		}, ErrProtocol},
		{"forged message 2", 0, func(sid string) []*frame.Frame {
			return []*frame.Frame{frame.Handshake(sid, make([]byte, noise.Message2Overhead))}
		}, noise.ErrHandshake},
		{"other streams' frames, garbage and a reset", 0, func(sid string) []*frame.Frame {
			return []*frame.Frame{
				frame.Handshake("other", []byte{1}),
				{Version: 2, StreamID: sid, Kind: frame.KindHandshake, Payload: []byte{1}},
				{Version: 1, StreamID: sid, Kind: frame.KindHeartbeat},
				frame.Reset(sid, "no"),
			}
		}, ErrStreamReset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d.mu.Lock()
			d.validateCode = tt.validate
			d.mu.Unlock()
			e.misbehave = tt.misbehave
			ch, err := dialer(t, d).Dial(ctx)
			if ch != nil {
				ch.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// The relay dropping the harness socket ends the stream: Read reports it.
func TestStreamEndsWithSocket(t *testing.T) {
	d := newDouble(t, "env-end")
	startEchoExecutor(t, d)
	ch, err := dialer(t, d).Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	d.mu.Lock()
	for _, c := range d.streams {
		c.CloseNow()
	}
	d.mu.Unlock()
	// The harness tries to resume first and gives up when the resumption
	// is not answered within 10 s: the test must wait longer than that
	// (with exactly 10 s it lost the race 3 runs in 40).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ch.Read(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("Read = %v", err)
	}
}

func TestKeepalive(t *testing.T) {
	d := newDouble(t, "env-ka")
	startEchoExecutor(t, d)
	dl, _ := NewDialer(d.srv.URL, d.env, harnessToken, Options{PingInterval: 20 * time.Millisecond, PongTimeout: 5 * time.Second})
	ch, err := dl.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	time.Sleep(200 * time.Millisecond) // several pings answered
	if err := ch.Err(); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	if err := ch.Write(context.Background(), []byte("1"), false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m, err := ch.Read(ctx); err != nil || string(m) != "1" {
		t.Fatalf("%q, %v", m, err)
	}
}

func TestParseBundle(t *testing.T) {
	key, _ := noise.GenerateKeypair()
	good := func() map[string]any {
		return map[string]any{"environment_id": "e", "url": "ws://x", "security_profile": SecurityProfile,
			"executor_registration_id": "r", "executor_public_key": key.Public(), "harness_key_authorization": "a", "extra": 1}
	}
	b, _ := json.Marshal(good())
	if _, err := ParseBundle(b, "e"); err != nil {
		t.Fatalf("good bundle: %v", err)
	}
	for name, mutate := range map[string]func(map[string]any){
		"other environment": func(m map[string]any) { m["environment_id"] = "f" },
		"other profile":     func(m map[string]any) { m["security_profile"] = "x" },
		"blank url":         func(m map[string]any) { m["url"] = " " },
		"no registration":   func(m map[string]any) { delete(m, "executor_registration_id") },
		"no authorization":  func(m map[string]any) { m["harness_key_authorization"] = "" },
		"long authorization": func(m map[string]any) {
			m["harness_key_authorization"] = strings.Repeat("a", noise.MaxAuthorization+1)
		},
		"no key":  func(m map[string]any) { delete(m, "executor_public_key") },
		"bad key": func(m map[string]any) { m["executor_public_key"] = map[string]string{"suite": "x"} },
	} {
		m := good()
		mutate(m)
		b, _ := json.Marshal(m)
		if _, err := ParseBundle(b, "e"); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func FuzzParseBundle(f *testing.F) {
	key, _ := noise.GenerateKeypair()
	b, _ := json.Marshal(map[string]any{"environment_id": "e", "url": "ws://x", "security_profile": SecurityProfile,
		"executor_registration_id": "r", "executor_public_key": key.Public(), "harness_key_authorization": "a"})
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		bun, err := ParseBundle(b, "e")
		if err != nil {
			return
		}
		if len(bun.ExecutorPublicKey.MLKEM) != noise.MLKEMKeySize || bun.HarnessKeyAuthorization == "" {
			t.Fatalf("accepted %+v", bun)
		}
	})
}

func TestStreamID(t *testing.T) {
	id, err := newStreamID()
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 36 || id[14] != '4' || !strings.ContainsAny(id[19:20], "89ab") || strings.ToLower(id) != id {
		t.Fatalf("stream id %q", id)
	}
}

// dropper returns a double hook that drops the given share of data frames
// (seeded), counting them.
func dropper(seed uint64, share float64, dropped *atomic.Int64) func([]byte) [][]byte {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 3))
	return func(raw []byte) [][]byte {
		f, err := frame.Unmarshal(raw)
		mu.Lock()
		drop := err == nil && f.Kind == frame.KindData && rng.Float64() < share
		mu.Unlock()
		if drop {
			dropped.Add(1)
			return nil
		}
		return [][]byte{raw}
	}
}

// With both ends reliable, a relay that loses 10 % of the data frames each
// way loses no message; with the extension off, the same loss stalls or
// resets the stream.
func TestReliableThroughLossyRelay(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprint("plain=", plain), func(t *testing.T) {
			d := newDouble(t, "env-lossy")
			var dropped atomic.Int64
			d.onHarnessFrame = dropper(1, 0.1, &dropped)
			d.onExecFrame = dropper(2, 0.1, &dropped)
			key, _ := noise.GenerateKeypair()
			startEchoExecutorWith(t, d, &echoExecutor{key: key, plain: plain})
			dl, _ := NewDialer(d.srv.URL, d.env, harnessToken, Options{Plain: plain})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if plain {
				ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
			}
			ch, err := dl.Dial(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			var msgs [][]byte
			for i := range 120 {
				msgs = append(msgs, fmt.Appendf(nil, `{"i":%d,"pad":"%s"}`, i, strings.Repeat("p", i*400)))
			}
			go func() {
				for _, m := range msgs {
					if ch.Write(ctx, m, false) != nil {
						return
					}
				}
			}()
			for i, m := range msgs {
				got, err := ch.Read(ctx)
				if err != nil {
					if plain {
						t.Logf("without the extension: the stream failed after %d of %d messages (%d frames dropped)", i, len(msgs), dropped.Load())
						return
					}
					t.Fatalf("message %d: %v", i, err)
				}
				if !bytes.Equal(got, m) {
					t.Fatalf("message %d differs", i)
				}
			}
			if plain {
				t.Fatal("every message came through a lossy relay without retransmission: the test proves nothing")
			}
			t.Logf("120 messages echoed, %d data frames dropped by the relay", dropped.Load())
		})
	}
}

// cutHarnessSockets closes the double's side of every harness socket.
func (d *double) cutHarnessSockets() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.streams {
		c.CloseNow()
	}
}

// With both ends reliable and a relay that lets a stream move to a new
// socket, cutting the harness's socket mid-stream loses nothing: the
// harness redials, sends resume, and both ends resend what was not
// acknowledged. Without the extension the cut ends the stream.
func TestResumeAfterSocketCut(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprint("plain=", plain), func(t *testing.T) {
			d := newDouble(t, "env-resume")
			d.resumeGrace = true
			key, _ := noise.GenerateKeypair()
			startEchoExecutorWith(t, d, &echoExecutor{key: key, plain: plain})
			dl, _ := NewDialer(d.srv.URL, d.env, harnessToken, Options{Plain: plain})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ch, err := dl.Dial(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			var msgs [][]byte
			for i := range 100 {
				msgs = append(msgs, fmt.Appendf(nil, `{"i":%d,"pad":"%s"}`, i, strings.Repeat("p", i*300)))
			}
			// The first cut waits for the first echo: until a frame of the
			// executor's arrives, the harness cannot know that it runs the
			// extension, and a socket lost then ends the stream.
			echoed := make(chan struct{})
			go func() {
				for i, m := range msgs {
					if i%25 == 10 {
						select {
						case <-echoed:
						case <-ctx.Done():
							return
						}
						d.cutHarnessSockets()
					}
					if ch.Write(ctx, m, false) != nil {
						return
					}
				}
			}()
			for i, m := range msgs {
				got, err := ch.Read(ctx)
				if err != nil {
					if plain {
						t.Logf("without the extension the cut ended the stream after %d messages: %v", i, err)
						return
					}
					t.Fatalf("message %d: %v", i, err)
				}
				if !bytes.Equal(got, m) {
					t.Fatalf("message %d differs: %.30s", i, got)
				}
				if i == 0 {
					close(echoed)
				}
			}
			if plain {
				t.Fatal("the stream survived socket cuts without the extension: the test proves nothing")
			}
			d.mu.Lock()
			n := d.harnessSockets
			d.mu.Unlock()
			if n < 3 {
				t.Fatalf("%d harness sockets: the cuts did not happen", n)
			}
			t.Logf("100 messages echoed over %d successive harness sockets", n)
		})
	}
}

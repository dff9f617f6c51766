package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
	"github.com/execgo/exec-server/remote/relay"
)

func TestCheckRegistryURL(t *testing.T) {
	cases := []struct {
		in, out string
		ok      bool
	}{
		{"https://registry.example.com", "https://registry.example.com", true},
		{"https://registry.example.com/some/prefix/", "https://registry.example.com/some/prefix", true},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080", true},
		{"http://[::1]:8080", "http://[::1]:8080", true},
		{"http://localhost:1", "http://localhost:1", true},
		{"http://registry.example.com", "", false},
		{"http://10.0.0.1", "", false},
		{"ws://127.0.0.1:1", "", false},
		{"https://user:pw@registry.example.com", "", false},
		{"https://registry.example.com/#frag", "", false},
		{"https://registry.example.com/?q=1", "", false},
		{"127.0.0.1:80", "", false},
		{"", "", false},
	}
	for _, c := range cases {
		got, err := checkRegistryURL(c.in)
		if (err == nil) != c.ok || got != c.out {
			t.Errorf("checkRegistryURL(%q) = %q, %v; want %q ok=%v", c.in, got, err, c.out, c.ok)
		}
	}
}

func TestRegisterDelay(t *testing.T) {
	for n, base := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		for range 50 {
			if d := registerDelay(n); d < base || d > base+base/2 {
				t.Fatalf("attempt %d: %s outside [%s, %s]", n, d, base, base+base/2)
			}
		}
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{min: time.Second, max: 30 * time.Second}
	for _, d := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		d *= time.Second
		if got := b.next(); got < d/2 || got > d {
			t.Fatalf("delay %s outside [%s, %s]", got, d/2, d)
		}
	}
	b.reset()
	if got := b.next(); got > time.Second {
		t.Fatalf("after reset: %s", got)
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	cases := []Config{
		{RegistryURL: "http://127.0.0.1:1", EnvironmentID: "E", Token: "t"},                      // no server
		{RegistryURL: "http://127.0.0.1:1", Token: "t", Server: nopServer{}},                     // no env
		{RegistryURL: "http://127.0.0.1:1", EnvironmentID: "E", Server: nopServer{}},             // no token
		{RegistryURL: "http://example.com", EnvironmentID: "E", Token: "t", Server: nopServer{}}, // token over http
	}
	for i, c := range cases {
		if err := Run(context.Background(), c); err == nil {
			t.Errorf("case %d: Run succeeded", i)
		}
	}
}

// End to end: the SDK client over a relay stream runs commands and moves
// files on the executor; the output is compared byte for byte, with and
// without the relay duplicating, reordering and delaying frames.
func TestEndToEnd(t *testing.T) {
	cases := []struct {
		name   string
		faults relay.Faults
	}{
		{"clean", relay.Faults{}},
		{"duplicate reorder delay", relay.Faults{Duplicate: 0.2, Reorder: 0.2, ReorderDepth: 32, Delay: time.Millisecond, Seed: 7}},
	}
	forEachImpl(t, func(t *testing.T, impl string) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				endToEnd(t, impl, c.faults)
			})
		}
	})
}

func endToEnd(t *testing.T, impl string, faults relay.Faults) {
	r := startRig(t, impl, faults, nil)
	r.waitAttached()
	st := r.open()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := clientOver(ctx, st.ch, client.Options{ClientName: "relay-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// 300 KB of varied bytes: several 60 KiB records per message.
	script := `i=0; while [ $i -lt 3000 ]; do printf 'line %05d %s\n' $i abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789; i=$((i+1)); done`
	var want bytes.Buffer
	for i := range 3000 {
		fmt.Fprintf(&want, "line %05d %s\n", i, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
	}
	out, code, err := cl.Output(ctx, client.Cmd{Argv: []string{"/bin/sh", "-c", script}})
	if err != nil || code != 0 {
		t.Fatalf("Output: %v, exit %d", err, code)
	}
	if !bytes.Equal(out, want.Bytes()) {
		t.Fatalf("output differs: %d bytes (sha %x), want %d (sha %x)", len(out), sha256.Sum256(out), want.Len(), sha256.Sum256(want.Bytes()))
	}

	dir := t.TempDir()
	data := make([]byte, 200<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	name := filepath.Join(dir, "blob")
	if err := cl.WriteFile(ctx, name, data); err != nil {
		t.Fatal(err)
	}
	if disk, err := os.ReadFile(name); err != nil || !bytes.Equal(disk, data) {
		t.Fatalf("file on disk differs: %v", err)
	}
	back, err := cl.ReadFile(ctx, name)
	if err != nil || !bytes.Equal(back, data) {
		t.Fatalf("ReadFile: %v (%d bytes)", err, len(back))
	}
}

// Two streams are two independent sessions.
func TestStreamsAreIndependent(t *testing.T) { forEachImpl(t, streamsAreIndependent) }

func streamsAreIndependent(t *testing.T, impl string) {
	r := startRig(t, impl, relay.Faults{}, nil)
	r.waitAttached()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var clients []*client.Client
	for range 2 {
		cl, err := clientOver(ctx, r.open().ch, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients = append(clients, cl)
	}
	if clients[0].SessionID() == clients[1].SessionID() || clients[0].SessionID() == "" {
		t.Fatalf("session ids %q %q", clients[0].SessionID(), clients[1].SessionID())
	}
	for i, cl := range clients {
		out, _, err := cl.Output(ctx, client.Cmd{Argv: []string{"/bin/echo", fmt.Sprint("stream ", i)}})
		if err != nil || string(out) != fmt.Sprintf("stream %d\n", i) {
			t.Fatalf("stream %d: %q %v", i, out, err)
		}
	}
}

// A stream whose harness goes away leaves a detached session that a new
// stream resumes (the relay turns the harness disconnect into a Reset).
func TestResumeAcrossStreams(t *testing.T) { forEachImpl(t, resumeAcrossStreams) }

func resumeAcrossStreams(t *testing.T, impl string) {
	r := startRig(t, impl, relay.Faults{}, nil)
	r.waitAttached()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := r.open()
	cl, err := clientOver(ctx, st.ch, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.Start(ctx, client.Cmd{Argv: []string{"/bin/sh", "-c", "echo before; exec sleep 30"}})
	if err != nil {
		t.Fatal(err)
	}
	waitMs := uint64(5000)
	if res, err := cl.ReadProcess(ctx, protocol.ReadParams{ProcessID: p.ID(), WaitMs: &waitMs}); err != nil || len(res.Chunks) == 0 {
		t.Fatalf("first read: %v", err)
	}
	session := cl.SessionID()
	st.ws.CloseNow()
	r.events.waitCount(t, 1, 5*time.Second, func(e relay.Event) bool { return e.Kind == "reset" && e.Code == "harness_disconnected" })
	cl.Close()
	var cl2 *client.Client
	deadline := time.Now().Add(10 * time.Second)
	for {
		cl2, err = clientOver(ctx, r.open().ch, client.Options{ResumeSession: session})
		if err == nil || time.Now().After(deadline) {
			break
		}
		// The executor may not have seen the reset yet.
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	defer cl2.Close()
	// The resumed session still has the process and its output.
	res, err := cl2.ReadProcess(ctx, protocol.ReadParams{ProcessID: p.ID()})
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, c := range res.Chunks {
		out = append(out, c.Chunk...)
	}
	if string(out) != "before\n" || res.Exited {
		t.Fatalf("resumed read: %q exited=%v", out, res.Exited)
	}
}

func TestValidateOutcomes(t *testing.T) {
	cases := []struct {
		name   string
		faults relay.Faults
		marker bool
	}{
		{"401 gives the marker", relay.Faults{Validate: relay.Failure{Status: 401, Code: "unauthorized"}}, true},
		{"403 resets", relay.Faults{Validate: relay.Failure{Status: 403, Code: "forbidden"}}, false},
		{"500 resets", relay.Faults{Validate: relay.Failure{Status: 500, Code: "internal"}}, false},
		{"valid false resets", relay.Faults{Invalid: true}, false},
		{"timeout resets", relay.Faults{SlowValidate: time.Second}, false},
	}
	forEachImpl(t, func(t *testing.T, impl string) {
		for _, c := range cases {
			if impl == "reference" && c.faults.SlowValidate > 0 {
				if testing.Short() {
					continue
				}
				c.faults.SlowValidate = 11 * time.Second // its timeout is 10 s
			}
			validateOutcome(t, impl, c.name, c.faults, c.marker)
		}
	})
}

func validateOutcome(t *testing.T, impl, name string, faults relay.Faults, marker bool) {
	t.Run(name, func(t *testing.T) {
		r := startRig(t, impl, relay.Faults{}, func(cfg *Config) { cfg.ValidateTimeout = 300 * time.Millisecond })
		r.waitAttached()
		id, _ := noise.GenerateKeypair()
		b := r.connect(id)
		r.relay.ForTest().SetFaults(faults)
		ws := dialHarness(t, b.URL)
		payload, _, err := handshake(t, ws, r.env, b, id, newStreamID(), []byte(b.Authz))
		if marker {
			if err != nil || string(payload) != noise.RejectionMarker {
				t.Fatalf("payload %q, err %v; want the rejection marker", payload, err)
			}
			return
		}
		if err != errReset {
			t.Fatalf("handshake: %v, payload %q; want a reset", err, payload)
		}
	})
}

func TestHandshakeRules(t *testing.T) { forEachImpl(t, handshakeRules) }

func handshakeRules(t *testing.T, impl string) {
	cooldown := 3 * time.Second // long enough for a loaded machine to reach the check
	if impl == "reference" {
		cooldown = 10 * time.Second
	}
	r := startRig(t, impl, relay.Faults{}, func(cfg *Config) { cfg.Cooldown = cooldown })
	r.waitAttached()
	st := r.open()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := clientOver(ctx, st.ch, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	alive := func() {
		t.Helper()
		if out, _, err := cl.Output(ctx, client.Cmd{Argv: []string{"/bin/echo", "alive"}}); err != nil || string(out) != "alive\n" {
			t.Fatalf("active stream broken: %q %v", out, err)
		}
	}
	validates := func() int { return r.events.count(func(e relay.Event) bool { return e.Kind == "validate" }) }

	id, _ := noise.GenerateKeypair()
	b := r.connect(id)
	ws := dialHarness(t, b.URL)
	expectReset := func(what string, sid string, f *frame.Frame) {
		t.Helper()
		if err := sendFrame(ws, f); err != nil {
			t.Fatal(err)
		}
		got, err := readFrame(ws, sid, 5*time.Second)
		if err != nil || got.Kind != frame.KindReset || got.Reason != ResetReason {
			t.Fatalf("%s: %v %+v", what, err, got)
		}
	}

	// Duplicate handshake on the active stream: Reset, the stream lives,
	// and it is not a failure.
	before := validates()
	// (Sent on st's own socket: the relay refuses another socket's frames
	// for st's id.)
	st.ignoreReset.Store(true)
	if err := sendFrame(st.ws, frame.Handshake(st.sid, make([]byte, noise.Message1Overhead))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for st.resets.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st.resets.Load() != 1 {
		t.Fatal("no Reset for a handshake on an active stream")
	}
	alive()

	// Data on an unknown stream.
	expectReset("data on an unknown stream", "nobody", frame.Data("nobody", 0, []byte("x")))
	// A garbage message 1 and an oversized authorization: Reset, no
	// /validate. Seven failures so far after this loop and the next.
	for i := range 6 {
		sid := fmt.Sprint("garbage-", i)
		expectReset("garbage handshake", sid, frame.Handshake(sid, bytes.Repeat([]byte{byte(i)}, noise.Message1Overhead+10)))
	}
	ini, _ := noise.NewInitiator(id, b.Key, noise.Prologue(r.env, b.RegID, "big-authz"))
	msg1, _ := ini.WriteMessage1([]byte(strings.Repeat("a", 4097)))
	expectReset("4097-byte authorization", "big-authz", frame.Handshake("big-authz", msg1))
	ini, _ = noise.NewInitiator(id, b.Key, noise.Prologue(r.env, b.RegID, "bad-utf8"))
	msg1, _ = ini.WriteMessage1([]byte{0xff, 0xfe})
	expectReset("non-UTF-8 authorization", "bad-utf8", frame.Handshake("bad-utf8", msg1))
	if n := validates(); n != before {
		t.Fatalf("%d /validate calls for handshakes that should never reach it", n-before)
	}
	// Eight failures: a good handshake is now refused without /validate.
	b2 := r.connect(id)
	_, _, err = handshake(t, ws, r.env, b2, id, newStreamID(), []byte(b2.Authz))
	if err != errReset {
		t.Fatalf("handshake during cooldown: %v", err)
	}
	if n := validates(); n != before {
		t.Fatal("/validate called during the cooldown")
	}
	alive()
	time.Sleep(cooldown + 300*time.Millisecond)
	b3 := r.connect(id)
	if _, _, err := handshake(t, ws, r.env, b3, id, newStreamID(), []byte(b3.Authz)); err != nil {
		t.Fatalf("handshake after the cooldown: %v", err)
	}
	alive()
}

func TestRegistrationRetryAndFailures(t *testing.T) {
	// Retried at the first registration: the reference's two, and a
	// fleet relay's store without a leader for a moment, and a 429.
	for _, f := range []relay.Failure{
		{Status: 503, Code: "registration_conflict", Times: 2},
		{Status: 502, Code: "authentication_service_unavailable", Times: 2},
		{Status: 503, Code: "store_unavailable", Times: 2},
		{Status: 429, Code: "too_many_requests", Times: 2},
	} {
		t.Run(fmt.Sprint("retried ", f.Status, " ", f.Code), func(t *testing.T) {
			r := startRig(t, "go", relay.Faults{Register: f}, nil)
			r.events.waitCount(t, 1, 30*time.Second, isAttach)
			if n := r.events.count(func(e relay.Event) bool { return e.Kind == "register" }); n != 3 {
				t.Fatalf("%d register calls, want 3", n)
			}
		})
	}
	for _, c := range []struct {
		name string
		f    relay.Faults
	}{
		{"500", relay.Faults{Register: relay.Failure{Status: 500, Code: "internal"}}},
		{"plain 503", relay.Faults{Register: relay.Failure{Status: 503, Code: "unavailable"}}},
		{"400", relay.Faults{Register: relay.Failure{Status: 400, Code: "invalid_request"}}},
		{"403", relay.Faults{Register: relay.Failure{Status: 403, Code: "unauthorized"}}},
		{"503 registry_full", relay.Faults{Register: relay.Failure{Status: 503, Code: "registry_full"}}},
		{"other environment", relay.Faults{WrongEnvironmentID: true}},
		{"other profile", relay.Faults{WrongSecurityProfile: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := startRig(t, "go", c.f, nil)
			select {
			case err := <-r.runErr:
				r.runErr <- err
				if err == nil {
					t.Fatal("Run returned nil")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not fail")
			}
		})
	}
}

func TestReconnects(t *testing.T) {
	r := startRig(t, "go", relay.Faults{}, nil)
	r.waitAttached()
	registers := func() int { return r.events.count(func(e relay.Event) bool { return e.Kind == "register" }) }
	// A cut: same URL again, no registration.
	r.relay.CutExecutor(r.env)
	r.events.waitCount(t, 2, 10*time.Second, isAttach)
	if registers() != 1 {
		t.Fatal("registered again after a cut")
	}
	// 502 on the upgrade: same URL after the backoff.
	r.relay.ForTest().SetFaults(relay.Faults{Upgrade: relay.Failure{Status: 502, Code: "route_unavailable", Times: 1}})
	r.relay.CutExecutor(r.env)
	r.events.waitCount(t, 3, 10*time.Second, isAttach)
	if registers() != 1 {
		t.Fatal("registered again after a 502")
	}
	// 403: register again, then dial the new URL.
	r.relay.ForTest().SetFaults(relay.Faults{Upgrade: relay.Failure{Status: 403, Code: "expired", Times: 1}})
	r.relay.CutExecutor(r.env)
	r.events.waitCount(t, 4, 10*time.Second, isAttach)
	if registers() != 2 {
		t.Fatalf("%d registrations after a 403, want 2", registers())
	}
	// The new registration serves streams.
	st := r.open()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := clientOver(ctx, st.ch, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
}

func TestPongTimeout(t *testing.T) {
	r := startRig(t, "go", relay.Faults{NoPong: true}, func(cfg *Config) {
		cfg.PingInterval = 100 * time.Millisecond
		cfg.PongTimeout = 200 * time.Millisecond
	})
	r.events.waitCount(t, 2, 10*time.Second, isAttach)
	if n := r.events.count(func(e relay.Event) bool { return e.Kind == "register" }); n != 1 {
		t.Fatalf("%d registrations; a pong timeout must not re-register", n)
	}
}

// New streams open while another stream pours output: the handshakes do
// not wait behind its data, and the socket stays up.
func TestHandshakesDuringBulkOutput(t *testing.T) {
	r := startRig(t, "go", relay.Faults{}, nil)
	r.waitAttached()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bulk, err := clientOver(ctx, r.open().ch, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bulk.Close()
	done := make(chan error, 1)
	go func() {
		out, _, err := bulk.Output(ctx, client.Cmd{Argv: []string{"/bin/sh", "-c", "head -c 4000000 /dev/zero"}})
		if err == nil && len(out) != 4000000 {
			err = fmt.Errorf("%d bytes of output", len(out))
		}
		done <- err
	}()
	for i := range 5 {
		cl, err := clientOver(ctx, r.open().ch, client.Options{})
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if out, _, err := cl.Output(ctx, client.Cmd{Argv: []string{"/bin/echo", "ok"}}); err != nil || string(out) != "ok\n" {
			t.Fatalf("stream %d: %q %v", i, out, err)
		}
		cl.Close()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := r.events.count(isAttach); n != 1 {
		t.Fatalf("the executor socket was dropped (%d attachments)", n)
	}
}

func TestStreamLimits(t *testing.T) {
	t.Run("active streams", func(t *testing.T) {
		r := startRig(t, "go", relay.Faults{}, func(cfg *Config) { cfg.MaxStreams = 2 })
		r.waitAttached()
		r.open()
		r.open()
		id, _ := noise.GenerateKeypair()
		b := r.connect(id)
		if _, _, err := handshake(t, dialHarness(t, b.URL), r.env, b, id, newStreamID(), []byte(b.Authz)); err != errReset {
			t.Fatalf("third stream: %v", err)
		}
	})
	t.Run("pending validations", func(t *testing.T) {
		r := startRig(t, "go", relay.Faults{}, func(cfg *Config) { cfg.MaxPendingValidations = 1 })
		r.waitAttached()
		id, _ := noise.GenerateKeypair()
		b1, b2 := r.connect(id), r.connect(id)
		r.relay.ForTest().SetFaults(relay.Faults{SlowValidate: 3 * time.Second})
		ws := dialHarness(t, b1.URL)
		ini, _ := noise.NewInitiator(id, b1.Key, noise.Prologue(r.env, b1.RegID, "first"))
		msg1, _ := ini.WriteMessage1([]byte(b1.Authz))
		if err := sendFrame(ws, frame.Handshake("first", msg1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // the first validation is in flight (for 3 s)
		if _, _, err := handshake(t, dialHarness(t, b2.URL), r.env, b2, id, newStreamID(), []byte(b2.Authz)); err != errReset {
			t.Fatalf("second handshake while one validation is pending: %v", err)
		}
	})
}

// The upgrade carries what the reference's does: a fresh X-Request-Id,
// the routing hints from the environment, no Authorization.
func TestUpgradeHeaders(t *testing.T) {
	t.Setenv("OPENAI_CLUSTER", "cluster-7")
	t.Setenv("DD_SERVICE", "svc-x")
	r := startRig(t, "go", relay.Faults{}, nil)
	r.waitAttached()
	r.relay.CutExecutor(r.env)
	r.events.waitCount(t, 2, 10*time.Second, isAttach)
	var ids []string
	for _, e := range r.events.all() {
		if e.Kind != "upgrade" || e.Status != 101 {
			continue
		}
		if e.Header.Get("X-Cluster-Name") != "cluster-7" || e.Header.Get("X-Openai-Internal-Caller") != "svc-x" || e.Header.Get("Authorization") != "" {
			t.Fatalf("upgrade headers %v", e.Header)
		}
		ids = append(ids, e.Header.Get("X-Request-Id"))
	}
	if len(ids) != 2 || ids[0] == ids[1] || !strings.HasPrefix(ids[0], "req_") || len(ids[0]) != 36 {
		t.Fatalf("request ids %q", ids)
	}
}

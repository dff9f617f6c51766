package relay

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/frame"
)

// pair is an executor socket and the connect bundle for a harness.
type pair struct {
	r      *testRelay
	exec   *websocket.Conn
	reg    map[string]any
	bundle map[string]any
}

func newPair(t *testing.T, opts Options) *pair {
	r := startRelay(t, opts)
	reg, _ := r.attach(t, "E")
	execConn := dialExisting(t, r, "E")
	_ = execConn
	return &pair{r: r, exec: execConn, reg: reg, bundle: r.connect(t, "E", randomKey())}
}

// dialExisting replaces env's executor socket with a fresh one and returns
// it (attach's own connection is not exported to tests).
func dialExisting(t *testing.T, r *testRelay, env string) *websocket.Conn {
	t.Helper()
	reg := r.register(t, env, randomKey())
	n := len(r.rec.all())
	c := dial(t, reg["url"].(string))
	r.rec.wait(t, n, 5*time.Second, func(e Event) bool { return e.Kind == "attach" && e.Env == env })
	return c
}

func (p *pair) harness(t *testing.T) *websocket.Conn {
	t.Helper()
	n := len(p.r.rec.all())
	c := dial(t, p.bundle["url"].(string))
	p.r.rec.wait(t, n, 5*time.Second, func(e Event) bool { return e.Kind == "attach" && e.Role == roleHarness })
	return c
}

// expectNothing checks that no message arrives on c within d. The read's
// timeout closes c: use it last.
func expectNothing(t *testing.T, c *websocket.Conn, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if _, b, err := c.Read(ctx); err == nil {
		t.Fatalf("unexpected message % x", b)
	}
}

func TestRoutesVerbatimBothWays(t *testing.T) {
	p := newPair(t, Options{})
	h := p.harness(t)
	const sid = "0f8b1d2e-aaaa-4bbb-8ccc-123456789abc"
	up := [][]byte{resumeFrame(sid), handshakeFrame(sid, bytes.Repeat([]byte{7}, 3595))}
	for i := range 20 {
		up = append(up, dataFrame(sid, uint32(i), bytes.Repeat([]byte{byte(i)}, 100+i)))
	}
	for _, f := range up {
		write(t, h, f)
	}
	for i, want := range up {
		if got := read(t, p.exec); !bytes.Equal(got, want) {
			t.Fatalf("frame %d to executor differs", i)
		}
	}
	down := [][]byte{handshakeFrame(sid, make([]byte, 3424)), dataFrame(sid, 0, make([]byte, 61456))}
	for _, f := range down {
		write(t, p.exec, f)
	}
	for i, want := range down {
		if got := read(t, h); !bytes.Equal(got, want) {
			t.Fatalf("frame %d to harness differs", i)
		}
	}
}

func TestHarnessGoneResetsExecutorStreams(t *testing.T) {
	p := newPair(t, Options{})
	h := p.harness(t)
	for _, s := range []string{"s-1", "s-2"} {
		write(t, h, resumeFrame(s))
		read(t, p.exec)
	}
	h.CloseNow()
	got := map[string]string{}
	for range 2 {
		b := read(t, p.exec)
		s, _, _ := peek(b)
		got[s] = resetReason(b)
	}
	if got["s-1"] != "harness_disconnected" || got["s-2"] != "harness_disconnected" {
		t.Fatalf("resets to executor: %v", got)
	}
}

func TestExecutorGoneResetsAndClosesHarness(t *testing.T) {
	p := newPair(t, Options{})
	h := p.harness(t)
	write(t, h, resumeFrame("s-1"))
	read(t, p.exec)
	p.exec.CloseNow()
	if reason := resetReason(read(t, h)); reason != "executor_disconnected" {
		t.Fatalf("reset reason %q", reason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := h.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("harness socket after executor left: %v", err)
	}
}

func TestStreamOwnershipAndUnknownStreams(t *testing.T) {
	p := newPair(t, Options{})
	h1 := p.harness(t)
	h2 := p.harness(t)
	write(t, h1, resumeFrame("s-1"))
	read(t, p.exec)
	// h2 cannot speak for h1's stream: dropped.
	write(t, h2, dataFrame("s-1", 0, []byte("hijack")))
	// Malformed and text frames are dropped too.
	write(t, h2, []byte("garbage"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	h2.Write(ctx, websocket.MessageText, []byte("text"))
	cancel()
	write(t, h2, resumeFrame("s-2"))
	if s, _, _ := peek(read(t, p.exec)); s != "s-2" {
		t.Fatalf("executor got a frame for %q, want only s-2's", s)
	}
	// Executor frames for unknown streams are dropped; known ones arrive.
	write(t, p.exec, dataFrame("nobody", 0, []byte("x")))
	want := dataFrame("s-1", 0, []byte("y"))
	write(t, p.exec, want)
	if got := read(t, h1); !bytes.Equal(got, want) {
		t.Fatalf("h1 got % x", got)
	}
	// A reset from the executor releases the id: another socket may take it.
	write(t, p.exec, resetFrame("s-1", "noise_relay_protocol_error"))
	if resetReason(read(t, h1)) != "noise_relay_protocol_error" {
		t.Fatal("reset not forwarded")
	}
	write(t, h2, resumeFrame("s-1"))
	if s, _, _ := peek(read(t, p.exec)); s != "s-1" {
		t.Fatalf("s-1 not rebound to h2: %q", s)
	}
	expectNothing(t, h2, 100*time.Millisecond)
}

func TestStreamLimitPerHarness(t *testing.T) {
	p := newPair(t, Options{MaxStreamsPerHarness: 2})
	h := p.harness(t)
	for i := range 3 {
		write(t, h, resumeFrame(fmt.Sprint("s-", i)))
	}
	read(t, p.exec)
	read(t, p.exec)
	if b := read(t, h); resetReason(b) != "too_many_streams" {
		t.Fatalf("third stream: % x", b)
	}
	expectNothing(t, p.exec, 100*time.Millisecond)
}

func TestFrameSizeLimit(t *testing.T) {
	p := newPair(t, Options{MaxFrameBytes: 4096})
	h := p.harness(t)
	write(t, h, dataFrame("s-1", 0, make([]byte, 5000)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := h.Read(ctx); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("oversized frame: %v", err)
	}
}

func TestUpgradeRejections(t *testing.T) {
	r := startRelay(t, Options{})
	reg := r.register(t, "E", randomKey())
	good := reg["url"].(string)
	u, _ := url.Parse(good)
	with := func(edit func(q url.Values)) string {
		q := u.Query()
		edit(q)
		v := *u
		v.RawQuery = q.Encode()
		return v.String()
	}
	cases := []struct {
		name, url string
		status    int
		reason    string
	}{
		{"no role", with(func(q url.Values) { q.Del("role") }), 400, "missing_role"},
		{"no sig", with(func(q url.Values) { q.Del("sig") }), 400, "missing_signature"},
		{"no expiry", with(func(q url.Values) { q.Del("expiry") }), 400, "missing_expiry"},
		{"no version", with(func(q url.Values) { q.Del("version") }), 400, "missing_version"},
		{"no registration", with(func(q url.Values) { q.Del("executor_registration_id") }), 400, "missing_executor_registration_id"},
		{"extra param", with(func(q url.Values) { q.Set("x", "1") }), 400, "extra_query_param"},
		{"wrong role", with(func(q url.Values) { q.Set("role", "harness") }), 400, "invalid_role"},
		{"bad expiry", with(func(q url.Values) { q.Set("expiry", "soon") }), 400, "invalid_expiry"},
		{"later expiry", with(func(q url.Values) { q.Set("expiry", fmt.Sprint(time.Now().Add(time.Hour).Unix())) }), 403, "invalid_signature"},
		{"other registration", with(func(q url.Values) { q.Set("executor_registration_id", "reg_x") }), 403, "invalid_signature"},
		{"harness path", strings.Replace(good, "/environment/", "/harness/", 1), 400, "invalid_role"},
		{"other env", strings.Replace(good, "/environment/E", "/environment/F", 1), 403, "invalid_signature"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, reason := dialStatus(t, c.url)
			if st != c.status || reason != c.reason {
				t.Fatalf("got %d %q, want %d %q", st, reason, c.status, c.reason)
			}
		})
	}
	r.ForTest().SetFaults(Faults{Upgrade: Failure{Status: 429, Code: "route_unavailable", Times: 1}})
	if st, reason := dialStatus(t, good); st != 429 || reason != "route_unavailable" {
		t.Fatalf("injected: %d %q", st, reason)
	}
	// A newer registration makes the old URL stale (the executor's cue to
	// register again).
	r.register(t, "E", randomKey())
	if st, reason := dialStatus(t, good); st != 403 || reason != "unexpected_executor_registration_id" {
		t.Fatalf("stale: %d %q", st, reason)
	}
	reg = r.register(t, "E", randomKey())
	past := urlClaims{role: roleEnvironment, env: "E", reg: reg["executor_registration_id"].(string), expiry: time.Now().Add(-time.Second)}
	u.RawQuery = signedQuery(r.secret, past)
	if st, reason := dialStatus(t, u.String()); st != 403 || reason != "expired" {
		t.Fatalf("expired: %d %q", st, reason)
	}
}

func TestHarnessUpgradeNeedsExecutor(t *testing.T) {
	p := newPair(t, Options{})
	hurl := p.bundle["url"].(string)
	p.exec.CloseNow()
	p.r.rec.wait(t, 0, 5*time.Second, func(e Event) bool { return e.Kind == "detach" && e.Role == roleEnvironment })
	if st, reason := dialStatus(t, hurl); st != 503 || reason != "route_unavailable" {
		t.Fatalf("no executor: %d %q", st, reason)
	}
	// The executor re-registers: the old bundle points at a stale route.
	dialExisting(t, p.r, "E")
	if st, reason := dialStatus(t, hurl); st != 403 || reason != "unexpected_executor_registration_id" {
		t.Fatalf("stale bundle: %d %q", st, reason)
	}
}

func TestCutAndNoPong(t *testing.T) {
	p := newPair(t, Options{})
	if !p.r.CutExecutor("E") {
		t.Fatal("CutExecutor found no executor")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := p.exec.Read(ctx); err == nil {
		t.Fatal("executor socket survived the cut")
	}
	e := dialExisting(t, p.r, "E")
	go e.Read(context.Background()) // Ping needs a reader
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := e.Ping(pctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	pcancel()
	p.r.ForTest().SetFaults(Faults{NoPong: true})
	pctx, pcancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer pcancel()
	if err := e.Ping(pctx); err == nil {
		t.Fatal("pong answered with NoPong set")
	}
}

func TestInjectToExecutor(t *testing.T) {
	p := newPair(t, Options{})
	p.r.InjectToExecutor("E", []byte("hello"), true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, b, err := p.exec.Read(ctx)
	if err != nil || typ != websocket.MessageText || string(b) != "hello" {
		t.Fatalf("%v %q %v", typ, b, err)
	}
}

func TestRelayPings(t *testing.T) {
	r := startRelay(t, Options{PingInterval: 50 * time.Millisecond, PongTimeout: 200 * time.Millisecond})
	reg := r.register(t, "E", randomKey())
	pings := make(chan struct{}, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, reg["url"].(string), &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			select {
			case pings <- struct{}{}:
			default:
			}
			return false // never answer: the relay must drop us
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	go c.Read(context.Background())
	select {
	case <-pings:
	case <-ctx.Done():
		t.Fatal("relay never pinged")
	}
	r.rec.wait(t, 0, 5*time.Second, func(e Event) bool { return e.Kind == "detach" && e.Role == roleEnvironment })
}

// A harness that stops reading is cut once its queue (bytes or frames)
// stays full; the executor's other streams go on.
func TestSlowHarnessIsCut(t *testing.T) {
	p := newPair(t, Options{QueueBytes: 64 << 10, QueueFrames: 8, SlowHarness: 200 * time.Millisecond})
	slow := p.harness(t)
	fast := p.harness(t)
	write(t, slow, resumeFrame("slow"))
	write(t, fast, resumeFrame("fast"))
	read(t, p.exec)
	read(t, p.exec)
	// slow never reads: its TCP buffers, then the relay's queue fill up.
	big := make([]byte, 60<<10)
	for i := 0; ; i++ {
		if i > 2000 {
			t.Fatal("slow harness never cut")
		}
		write(t, p.exec, dataFrame("slow", uint32(i), big))
		if p.r.rec.count(func(e Event) bool { return e.Kind == "detach" && e.Role == roleHarness }) > 0 {
			break
		}
	}
	want := dataFrame("fast", 0, []byte("still here"))
	write(t, p.exec, want)
	for {
		got := read(t, fast)
		if bytes.Equal(got, want) {
			break
		}
	}
	if reason := resetReason(read(t, p.exec)); reason != "harness_disconnected" {
		t.Fatalf("executor got reset %q for the cut harness", reason)
	}
}

func TestHarnessSocketsPerEnvironment(t *testing.T) {
	p := newPair(t, Options{MaxHarnessPerEnvironment: 2})
	p.harness(t)
	p.harness(t)
	c := dial(t, p.bundle["url"].(string))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("third harness socket: %v", err)
	}
}

func advertFrame(stream string) []byte {
	return (&frame.Frame{Version: 1, StreamID: stream, Kind: frame.KindHeartbeat, AckBits: channel.AdvertiseMagic}).Marshal()
}

// A stream whose ends both run the reliability extension outlives its
// harness socket for ResumeGrace: a new socket's resume claims it; one
// nobody claims is reset then. A 0.169 stream is reset at once.
func TestHeldStreams(t *testing.T) {
	p := newPair(t, Options{ResumeGrace: 300 * time.Millisecond})
	h := p.harness(t)
	for _, s := range []string{"kept", "claimed", "plain"} {
		write(t, h, resumeFrame(s))
		read(t, p.exec)
	}
	for _, s := range []string{"kept", "claimed"} {
		write(t, h, advertFrame(s))
		read(t, p.exec)
		write(t, p.exec, (&frame.Frame{Version: 1, StreamID: s, Kind: frame.KindAck, Ack: 1}).Marshal())
		read(t, h)
	}
	h.CloseNow()
	// The plain stream goes at once.
	if b := read(t, p.exec); resetReason(b) != "harness_disconnected" {
		t.Fatalf("first frame after the cut: % x", b)
	} else if s, _, _ := peek(b); s != "plain" {
		t.Fatalf("reset for %q first, want plain", s)
	}
	// A new socket claims one held stream with its resume.
	h2 := p.harness(t)
	write(t, h2, frame.Resume("claimed", 3).Marshal())
	if s, k, _ := peek(read(t, p.exec)); s != "claimed" || k != KindResume {
		t.Fatalf("executor got %q %v, want claimed's resume", s, k)
	}
	want := dataFrame("claimed", 3, []byte("again"))
	write(t, p.exec, want)
	if got := read(t, h2); !bytes.Equal(got, want) {
		t.Fatal("the claimed stream's data did not reach the new socket")
	}
	// The other one is reset once the grace is over.
	b := read(t, p.exec)
	if s, _, _ := peek(b); s != "kept" || resetReason(b) != "harness_disconnected" {
		t.Fatalf("after the grace: %q %q", s, resetReason(b))
	}
}

// A resume from another socket takes a stream over even before the relay
// saw the old socket go (the harness redials faster than that).
func TestResumeClaimsFromLiveSocket(t *testing.T) {
	p := newPair(t, Options{})
	h1 := p.harness(t)
	h2 := p.harness(t)
	write(t, h1, resumeFrame("s"))
	read(t, p.exec)
	write(t, h2, dataFrame("s", 0, []byte("x"))) // not a claim: dropped
	write(t, h2, frame.Resume("s", 0).Marshal())
	if _, k, _ := peek(read(t, p.exec)); k != KindResume {
		t.Fatalf("got %v, want the claiming resume", k)
	}
	want := dataFrame("s", 0, []byte("to h2"))
	write(t, p.exec, want)
	if got := read(t, h2); !bytes.Equal(got, want) {
		t.Fatal("data went elsewhere")
	}
	expectNothing(t, h1, 100*time.Millisecond)
}

// Streams both ends run the reliability extension on wait for their
// executor to redial (same registration); others are reset at once; if
// it does not come back in time, the waiting ones are reset too.
func TestExecutorAway(t *testing.T) {
	r := startRelay(t, Options{ResumeGrace: 500 * time.Millisecond})
	reg := r.register(t, "E", randomKey())
	n := len(r.rec.all())
	e1 := dial(t, reg["url"].(string))
	r.rec.wait(t, n, 5*time.Second, func(e Event) bool { return e.Kind == "attach" })
	b := r.connect(t, "E", randomKey())
	h := dial(t, b["url"].(string))
	hp := dial(t, b["url"].(string))
	write(t, h, resumeFrame("kept"))
	read(t, e1)
	write(t, hp, resumeFrame("plain"))
	read(t, e1)
	write(t, h, advertFrame("kept"))
	read(t, e1)
	write(t, e1, advertFrame("kept"))
	read(t, h)

	e1.CloseNow()
	if b := read(t, hp); resetReason(b) != "executor_disconnected" {
		t.Fatalf("plain stream: % x", b)
	}
	// (Held: no reset and the socket stays open, as the exchange below
	// shows: a reset would be read first.)
	n = len(r.rec.all())
	e2 := dial(t, reg["url"].(string))
	r.rec.wait(t, n, 5*time.Second, func(e Event) bool { return e.Kind == "attach" })
	want := dataFrame("kept", 5, []byte("after the redial"))
	write(t, h, want)
	if got := read(t, e2); !bytes.Equal(got, want) {
		t.Fatal("the held stream's frame did not reach the new executor socket")
	}
	write(t, e2, want)
	if got := read(t, h); !bytes.Equal(got, want) {
		t.Fatal("the new executor socket's frame did not reach the harness")
	}

	// A stream the relay no longer knows (its harness went meanwhile):
	// the executor's resume is answered with a reset.
	write(t, e2, frame.Resume("forgotten", 0).Marshal())
	if b := read(t, e2); resetReason(b) != "harness_disconnected" {
		t.Fatalf("resume of a forgotten stream: % x", b)
	}

	// Away for longer than the grace: reset and closed.
	e2.CloseNow()
	if b := read(t, h); resetReason(b) != "executor_disconnected" {
		t.Fatalf("after the grace: % x", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := h.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("harness socket after the grace: %v", err)
	}
}

package relay

import (
	"bytes"
	"context"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// relayGoroutines returns the stacks of the goroutines running this
// package's code (the test's own, the first of the dump, left out), by
// goroutine id.
func relayGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for i, g := range bytes.Split(buf, []byte("\n\n")) {
		// The test's own goroutines (readers of the client sockets) run
		// code of _test.go files; the relay's do not.
		if i == 0 || !bytes.Contains(g, []byte("/remote/relay.")) || bytes.Contains(g, []byte("_test.go")) {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(string(g), "goroutine "), " ")
		out[id] = string(g)
	}
	return out
}

// Close owns the goroutines serving sockets: when it returns, none of
// those it started (executor and harness sockets, their writers and
// pings) is still running. They used to end on their own, after Close
// had returned (the close handshake), with nothing waiting for them.
func TestCloseEndsSocketGoroutines(t *testing.T) {
	before := relayGoroutines()
	rec := newRecorder()
	s, err := New(Options{ExecutorTokens: NewTokens(execToken), HarnessTokens: NewTokens(harnessToken), OnEvent: rec.add})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	r := &testRelay{Server: s, base: hs.URL, rec: rec}
	defer s.Close()
	const envs = 3
	for i := range envs {
		env := string(rune('A' + i))
		reg := r.register(t, env, randomKey())
		e := dial(t, reg["url"].(string))
		drain(e)
		waitFor(t, "executor attached", func() bool { l, _, ok := r.router.Executor(env); return ok && l != nil })
		b := r.connect(t, env, randomKey())
		h := dial(t, b["url"].(string))
		// A frame in flight keeps a writer goroutine per leg.
		write(t, h, handshakeFrame("s-1", make([]byte, 100)))
		drain(h)
	}
	waitFor(t, "sockets tracked", func() bool { return s.sockets() == 2*envs })
	s.Close()
	// A goroutine Close waited for may still be in its last instant: it
	// signalled its end (a deferred close or Done) and has not returned
	// yet (a CI run under load caught a writer's wrapper there). Such a
	// one is given time to go; one still doing the relay's work is a
	// failure at once.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		ending := true
		for id, g := range relayGoroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, g)
				ending = ending && finishing(g)
			}
		}
		if len(left) == 0 {
			return
		}
		if !ending || time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the relay still running after Close:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// finishing reports whether the goroutine stack g is in nothing of the
// relay's but the function literal it was started with: what it ran has
// returned, and only that literal's deferred calls (a close, a Done) and
// its return are left.
func finishing(g string) bool {
	var frames []string
	for _, line := range strings.Split(g, "\n")[1:] {
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "created by ") {
			continue
		}
		if strings.Contains(line, "/remote/relay.") {
			frames = append(frames, line)
		}
	}
	return len(frames) == 1 && strings.Contains(frames[0], ".func")
}

// drain reads c until it fails (the relay's close answered at once).
func drain(c *websocket.Conn) {
	go func() {
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				return
			}
		}
	}()
}

// A forwarder whose home stopped returning credit (its executor reads
// nothing) waits in its socket's reader for up to writeTimeout; Close
// wakes it. It used to stay there past Close's two grace periods, still
// running when Close returned.
func TestCloseWakesForwarderWaitingForCredit(t *testing.T) {
	url := startNATS(t)
	a := startNode(t, url, "a", "", nil)
	b := startNode(t, url, "b", "", nil)
	reg := a.register(t, "E", randomKey())
	dial(t, reg["url"].(string)) // the executor never reads
	a.executorOn(t, "E", 10*time.Second)
	h := dial(t, b.connect(t, "E", randomKey())["url"].(string))
	drain(h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const sid = "0f8b1d2e-aaaa-4bbb-8ccc-123456789abd"
	go func() {
		frames := [][]byte{resumeFrame(sid), handshakeFrame(sid, make([]byte, 100))}
		for i := range 1000 {
			frames = append(frames, dataFrame(sid, uint32(i), make([]byte, 200<<10)))
		}
		for _, f := range frames {
			if h.Write(ctx, websocket.MessageBinary, f) != nil {
				return
			}
		}
	}()
	waiting := func() bool {
		for _, g := range relayGoroutines() {
			if strings.Contains(g, "(*fwdLeg).serve") && strings.Contains(g, "(*credit).acquire") {
				return true
			}
		}
		return false
	}
	waitFor(t, "the forwarder waiting for credit", waiting)
	b.Server.Close()
	for _, g := range relayGoroutines() {
		if strings.Contains(g, "(*fwdLeg).serve") {
			t.Fatalf("a forwarder still serving after Close:\n%s", g)
		}
	}
}

func TestFinishing(t *testing.T) {
	tests := []struct {
		name string
		g    string
		want bool
	}{
		{"wrapper at its end", `goroutine 91 [runnable]:
github.com/execgo/exec-server/remote/relay.(*leg).Close.(*leg).startWriter.func2.1()
	/x/remote/relay/rendezvous.go:477 +0x9b
created by github.com/execgo/exec-server/remote/relay.(*leg).Close.(*leg).startWriter.func2 in goroutine 19
	/x/remote/relay/rendezvous.go:474 +0x11a`, true},
		{"writer still running", `goroutine 91 [select]:
github.com/execgo/exec-server/remote/relay.(*leg).writer(0xc000123)
	/x/remote/relay/rendezvous.go:540 +0x9b
github.com/execgo/exec-server/remote/relay.(*leg).Close.(*leg).startWriter.func2.1()
	/x/remote/relay/rendezvous.go:476 +0x9b
created by github.com/execgo/exec-server/remote/relay.(*leg).Close.(*leg).startWriter.func2 in goroutine 19
	/x/remote/relay/rendezvous.go:474 +0x11a`, false},
		{"a method, not a literal", `goroutine 7 [chan receive]:
github.com/execgo/exec-server/remote/relay.(*fabric).heartbeats(0xc0001)
	/x/remote/relay/membership.go:72 +0x9b
created by github.com/execgo/exec-server/remote/relay.newFabric in goroutine 1
	/x/remote/relay/fabric.go:260 +0x11a`, false},
	}
	for _, tt := range tests {
		if got := finishing(tt.g); got != tt.want {
			t.Errorf("%s: finishing = %v, want %v", tt.name, got, tt.want)
		}
	}
}

package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/executor"
	"github.com/execgo/exec-server/remote/harness"
)

// Multi-node tests: relay nodes in this process sharing an embedded NATS
// server (JetStream on, buckets in memory), no external binary.

func startNATS(t testing.TB) string {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(ns.Shutdown)
	return ns.ClientURL()
}

// natsConn starts a NATS server for the test and connects to it; both
// end with the test.
func natsConn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(startNATS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

var fleetSecret = []byte("0123456789abcdef0123456789abcdef-fleet")

type fleetNode struct {
	*testRelay
	name string
	nc   *nats.Conn
	ln   net.Listener
	hs   *http.Server
	dead atomic.Bool
}

// startNode starts relay node name on natsURL. publicURL "" mints URLs
// pointing at the node itself.
func startNode(t testing.TB, natsURL, name, publicURL string, tweak func(*Options)) *fleetNode {
	return startNodeOpts(t, natsURL, name, publicURL, tweak, KVStoreOptions{Memory: true})
}

func startNodeWith(t testing.TB, natsURL, name string, kv KVStoreOptions) *fleetNode {
	return startNodeOpts(t, natsURL, name, "", nil, kv)
}

func startNodeOpts(t testing.TB, natsURL, name, publicURL string, tweak func(*Options), kv KVStoreOptions) *fleetNode {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.DontRandomize())
	if err != nil {
		t.Fatal(err)
	}
	return startNodeConn(t, nc, name, publicURL, tweak, kv)
}

// startNodeConn starts relay node name on the NATS connection nc (closed
// with the node).
func startNodeConn(t testing.TB, nc *nats.Conn, name, publicURL string, tweak func(*Options), kv KVStoreOptions) *fleetNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := NewKVStore(ctx, nc, kv)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	if publicURL == "" {
		publicURL = base
	}
	rec := newRecorder()
	opts := Options{
		ExecutorTokens: NewTokens(execToken), HarnessTokens: NewTokens(harnessToken),
		PublicURL: publicURL, URLSecret: fleetSecret, Store: store,
		NATS: nc, NodeName: name, OnEvent: rec.add,
	}
	if tweak != nil {
		tweak(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s}
	go hs.Serve(ln)
	n := &fleetNode{testRelay: &testRelay{Server: s, base: base, rec: rec}, name: name, nc: nc, ln: ln, hs: hs}
	t.Cleanup(func() {
		if !n.dead.Load() {
			s.Close()
			hs.Close()
			nc.Close()
		}
	})
	return n
}

// crash stops the node as a SIGKILL would: nothing more goes out on NATS,
// every socket drops, the port refuses connections.
func (n *fleetNode) crash() {
	n.dead.Store(true)
	n.nc.Close()
	n.fab.closeLinks() // its peer links drop as its process's sockets would
	n.ln.Close()
	n.Server.mu.Lock()
	legs := make([]*leg, 0, len(n.Server.legs))
	for l := range n.Server.legs {
		legs = append(legs, l)
	}
	n.Server.mu.Unlock()
	for _, l := range legs {
		l.cut()
	}
	n.hs.Close()
	go n.Server.Close()
}

// executorOn waits until env's executor socket is attached to node n and
// n has reported the attachment, which it does once it answers for env on
// NATS (becomeHome flushed its subscription): before that, another
// node's /connect may find no home yet.
func (n *fleetNode) executorOn(t testing.TB, env string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		n.fab.mu.Lock()
		home := n.fab.homes[env] != nil
		n.fab.mu.Unlock()
		attached := n.rec.count(func(e Event) bool { return e.Kind == "attach" && e.Role == roleEnvironment && e.Env == env })
		detached := n.rec.count(func(e Event) bool { return e.Kind == "detach" && e.Role == roleEnvironment && e.Env == env })
		if l, _, ok := n.router.Executor(env); ok && l != nil && home && attached > detached {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no executor for %s attached to %s within %s", env, n.name, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Raw frames, executor socket on node A, harness socket on node B: every
// frame arrives byte for byte, in order, both ways, including bursts far
// beyond the credit window and frames of the largest size.
func TestFleetRoutesAcrossNodes(t *testing.T) {
	url := startNATS(t)
	routesAcrossNodes(t, startNode(t, url, "a", "", nil), startNode(t, url, "b", "", nil))
}

// routesAcrossNodes: byte-exact frames of every size both ways between an
// executor on a and a harness on b; a plain stream ends with its socket.
func routesAcrossNodes(t *testing.T, a, b *fleetNode) {

	reg := a.register(t, "E", randomKey())
	execConn := dial(t, reg["url"].(string))
	a.executorOn(t, "E", 10*time.Second)
	if !strings.HasPrefix(reg["url"].(string), "ws://"+a.ln.Addr().String()) {
		t.Fatalf("executor URL %s not on node a", reg["url"])
	}
	bundle := b.connect(t, "E", randomKey())
	if !strings.HasPrefix(bundle["url"].(string), "ws://"+b.ln.Addr().String()) {
		t.Fatalf("harness URL %s not on node b", bundle["url"])
	}
	h := dial(t, bundle["url"].(string))

	const sid = "0f8b1d2e-aaaa-4bbb-8ccc-123456789abc"
	var up, down [][]byte
	up = append(up, resumeFrame(sid), handshakeFrame(sid, bytes.Repeat([]byte{7}, 3595)))
	for i := range 300 {
		n := 1 + (i*7919)%2048
		if i%50 == 0 {
			n = 200 << 10
		}
		up = append(up, dataFrame(sid, uint32(i), bytes.Repeat([]byte{byte(i)}, n)))
		down = append(down, dataFrame(sid, uint32(i), bytes.Repeat([]byte{byte(255 - i)}, n)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 4)
	pump := func(c *websocket.Conn, frames [][]byte) {
		for _, f := range frames {
			if err := c.Write(ctx, websocket.MessageBinary, f); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}
	first := make(chan struct{})
	check := func(c *websocket.Conn, frames [][]byte, what string) {
		for i, want := range frames {
			if i == 1 && what == "to executor" {
				close(first)
			}
			_, got, err := c.Read(ctx)
			if err != nil {
				errc <- fmt.Errorf("%s frame %d: %w", what, i, err)
				return
			}
			if !bytes.Equal(got, want) {
				errc <- fmt.Errorf("%s frame %d differs (%d bytes, want %d)", what, i, len(got), len(want))
				return
			}
		}
		errc <- nil
	}
	// The harness speaks first (the executor learns the stream from it).
	go pump(h, up)
	go check(execConn, up, "to executor")
	// Executor frames once the stream is routed (the executor has seen
	// the harness's first frame).
	select {
	case <-first:
	case <-ctx.Done():
		t.Fatal("no frame reached the executor")
	}
	go pump(execConn, down)
	go check(h, down, "to harness")
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	sa, sb := a.FleetStats(), b.FleetStats()
	if sb.FramesOut != uint64(len(up)) || sa.FramesIn != uint64(len(up)) || sa.FramesOut != uint64(len(down)) || sb.FramesIn != uint64(len(down)) {
		t.Fatalf("cross-node counters a %+v b %+v", sa, sb)
	}
	if sa.NATSDropped+sb.NATSDropped+sa.NATSSlowConsumers+sb.NATSSlowConsumers != 0 {
		t.Fatalf("NATS dropped messages: a %+v b %+v", sa, sb)
	}

	// The harness socket goes: its plain stream is reset toward the
	// executor, at the home.
	h.CloseNow()
	got := read(t, execConn)
	if s, _, _ := peek(got); s != sid || resetReason(got) != "harness_disconnected" {
		t.Fatalf("after the harness went: %q %q", s, resetReason(got))
	}
}

// connect on a node that does not hold the executor asks its home; an
// environment whose executor is nowhere is offline.
func TestFleetConnectAndReadyz(t *testing.T) {
	url := startNATS(t)
	a := startNode(t, url, "a", "", nil)
	b := startNode(t, url, "b", "", nil)
	a.register(t, "E", randomKey())
	st, m := post(t, b.env("E")+"/connect", harnessToken, map[string]any{"harness_public_key": randomKey()})
	if st != http.StatusConflict || errCode(m) != "environment_offline" {
		t.Fatalf("connect without an executor: %d %v", st, m)
	}
	for _, n := range []*fleetNode{a, b} {
		resp, err := http.Get(n.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("readyz %d", resp.StatusCode)
		}
	}
	// Without NATS the node is not ready.
	b.nc.Close()
	resp, err := http.Get(b.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "nats") {
		t.Fatalf("readyz without NATS: %d %q", resp.StatusCode, body)
	}
}

// twoNodesExecutorOnA starts two nodes, a and b, on a NATS server of the
// test's, and attaches an executor for env to a (a's is env's home).
func twoNodesExecutorOnA(t *testing.T, env string) (a, b *fleetNode) {
	t.Helper()
	url := startNATS(t)
	a = startNode(t, url, "a", "", nil)
	b = startNode(t, url, "b", "", nil)
	reg := a.register(t, env, randomKey())
	dial(t, reg["url"].(string))
	a.executorOn(t, env, 10*time.Second)
	return a, b
}

// An authorization minted by one node is single-use across all of them:
// of many validations racing on two nodes exactly one wins.
func TestFleetAuthorizationSingleUse(t *testing.T) {
	a, b := twoNodesExecutorOnA(t, "E")
	for round := range 3 {
		hk := randomKey()
		bundle := b.connect(t, "E", hk)
		regID, authz := bundle["executor_registration_id"].(string), bundle["harness_key_authorization"].(string)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 16 {
			n := []*fleetNode{a, b}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, m := post(t, n.env("E")+"/validate", execToken,
					map[string]any{"executor_registration_id": regID, "harness_public_key": hk, "harness_key_authorization": authz})
				if st == 200 && m["valid"] == true {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if w := wins.Load(); w != 1 {
			t.Fatalf("round %d: %d validations won, want 1", round, w)
		}
	}
}

// echoServer answers every JSON-RPC message with itself.
type echoServer struct{}

func (echoServer) ServeStream(ctx context.Context, st jsonrpc.Stream) {
	defer st.Close()
	for {
		m, err := st.Read(ctx)
		if err != nil {
			return
		}
		if st.Write(ctx, m, false) != nil {
			return
		}
	}
}

func startExecutor(t *testing.T, registry, env string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		executor.Run(ctx, executor.Config{
			RegistryURL: registry, EnvironmentID: env, Token: execToken, Server: echoServer{},
			ReconnectMin: 200 * time.Millisecond, ReconnectMax: time.Second,
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// msg is the i-th test message: a JSON object with a payload derived from i.
func msg(i int) []byte {
	pad := strings.Repeat(string(rune('a'+i%26)), 100+(i*131)%4000)
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "echo", "params": map[string]any{"i": i, "pad": pad}})
	return b
}

// exchangeWindow bounds the messages exchange keeps unanswered. The
// executor holds at most 128 received messages its server has not read
// (the reference's bound, remote/channel's DefaultQueueLen) and resets a
// stream that overflows it, by design: a harness that writes without
// bound outruns an echo server whose replies are under way, on one node
// as across nodes. A real harness waits for its requests' answers.
const exchangeWindow = 64

// exchange writes n messages from 'from', at most exchangeWindow of them
// unanswered, and checks they come back in order, byte for byte.
func exchange(ctx context.Context, ch *channel.Channel, from, n int) error {
	return exchangeN(ctx, ch, from, n, exchangeWindow)
}

// exchangeN is exchange with window messages unanswered at most (0: no
// bound).
func exchangeN(ctx context.Context, ch *channel.Channel, from, n, window int) error {
	errc := make(chan error, 1)
	if window <= 0 {
		window = n
	}
	room := make(chan struct{}, window)
	go func() {
		for i := from; i < from+n; i++ {
			select {
			case room <- struct{}{}:
			case <-ctx.Done():
				errc <- ctx.Err()
				return
			}
			if err := ch.Write(ctx, msg(i), false); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := from; i < from+n; i++ {
		got, err := ch.Read(ctx)
		if err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		if !bytes.Equal(got, msg(i)) {
			return fmt.Errorf("message %d differs: %.60q", i, got)
		}
		<-room
	}
	return <-errc
}

// This project's executor (remote/executor) on node A, its harness
// (remote/harness) on node B: messages come back byte for byte, round
// after round, with nothing reset, on one node and across two.
func TestFleetReliableEndsAcrossNodes(t *testing.T) {
	url := startNATS(t)
	a := startNode(t, url, "a", "", nil)
	b := startNode(t, url, "b", "", nil)
	for _, tc := range []struct {
		env   string
		node  *fleetNode
		cross bool
	}{{"one-node", a, false}, {"across-nodes", b, true}} {
		t.Run(tc.env, func(t *testing.T) {
			startExecutor(t, a.base, tc.env)
			a.executorOn(t, tc.env, 15*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ch := dialStream(ctx, t, tc.node.base, tc.env, harness.Options{})
			forwarded := func(e Event) bool { return e.Kind == "attach" && e.Code == "forward" && e.Env == tc.env }
			if got := b.rec.count(forwarded); got != map[bool]int{false: 0, true: 1}[tc.cross] {
				t.Fatalf("%d sockets forwarded from node b", got)
			}
			// Rounds of messages from 100 B to 4 KiB: a reset anywhere
			// (relay or executor) fails the read.
			const rounds, per = 2, 500
			for r := 0; r < rounds; r++ {
				if err := exchange(ctx, ch, r*per, per); err != nil {
					t.Fatalf("round %d: %v", r, err)
				}
			}
			for _, n := range []*fleetNode{a, b} {
				if k := n.rec.count(func(e Event) bool { return e.Kind == "reset" && e.Env == tc.env }); k != 0 {
					t.Fatalf("node %s reset %d streams", n.name, k)
				}
			}
		})
	}
	if st := b.FleetStats(); st.FramesOut == 0 || st.FramesIn == 0 {
		t.Fatalf("no frame crossed: %+v", st)
	}
}

// lb is a TCP load balancer in front of the nodes: it sends each new
// connection to the node pick names, or the next one that accepts.
type lb struct {
	ln    net.Listener
	nodes []*fleetNode
	pick  atomic.Int32
}

func startLB(t *testing.T) *lb {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &lb{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.proxy(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return b
}

func (b *lb) url() string { return "http://" + b.ln.Addr().String() }

func (b *lb) proxy(c net.Conn) {
	defer c.Close()
	start := int(b.pick.Load())
	var up net.Conn
	for i := range b.nodes {
		n := b.nodes[(start+i)%len(b.nodes)]
		var err error
		if up, err = net.Dial("tcp", n.ln.Addr().String()); err == nil {
			break
		}
	}
	if up == nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// Three nodes behind a load balancer; the executor's socket is on node A,
// the harness's on node B, data flowing. A dies (a hard stop: no goodbye
// on NATS, every socket dropped): the executor redials to C within 5 s,
// the harness's stream resumes there, with no reset and every message
// byte for byte.
func TestFleetNodeLoss(t *testing.T) {
	t.Run("nats", func(t *testing.T) { fleetNodeLoss(t, false) })
	t.Run("links", func(t *testing.T) { fleetNodeLoss(t, true) })
}

// fleetNodeLoss: the home node dies under a reliable stream; with links,
// the legs' frames rode peer links (peerlink.go).
func fleetNodeLoss(t *testing.T, links bool) {
	front, nodes, ctx, ch := threeNodeStream(t, func(o *Options) {
		o.TakeoverGrace = 10 * time.Second
		if links {
			o.PeerListen = "127.0.0.1:0"
		}
	})
	if links {
		waitLinks(t, 10*time.Second, nodes...)
	}
	a, b, c := nodes[0], nodes[1], nodes[2]
	if b.rec.count(func(e Event) bool { return e.Kind == "attach" && e.Code == "forward" }) != 1 {
		t.Fatal("the harness socket is not on node b")
	}
	if err := exchange(ctx, ch, 0, 200); err != nil {
		t.Fatal(err)
	}

	// Messages in flight while A dies.
	front.pick.Store(2)
	errc := make(chan error, 1)
	go func() { errc <- exchange(ctx, ch, 200, 400) }()
	time.Sleep(20 * time.Millisecond)
	killed := time.Now()
	a.crash()
	c.executorOn(t, "E", 5*time.Second)
	t.Logf("executor re-attached to node c %s after the kill", time.Since(killed).Round(time.Millisecond))
	if err := <-errc; err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	drained := time.Since(killed)
	t.Logf("stream resumed and drained %s after the kill", drained.Round(time.Millisecond))
	// The new home measured the stream's recovery: from A's last
	// heartbeat (at most hbInterval before the kill) to the harness's
	// resume, which came before the stream drained.
	if n := c.recov.hist.n.Load(); n != 1 {
		t.Fatalf("node c observed %d stream recoveries, want 1", n)
	}
	if rec := time.Duration(c.recov.hist.sumNs.Load()); rec <= 0 || rec > drained+hbInterval {
		t.Fatalf("recovery %s, not within (0, %s]", rec, drained+hbInterval)
	} else {
		t.Logf("node c: stream recovery %s", rec.Round(time.Millisecond))
	}
	resp, err := http.Get(c.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), "exec_relay_stream_recovery_seconds_count 1\n") {
		t.Fatalf("metrics: %s", m)
	}
	// And the stream goes on.
	if err := exchange(ctx, ch, 600, 200); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*fleetNode{b, c} {
		if k := n.rec.count(func(e Event) bool { return e.Kind == "reset" }); k != 0 {
			t.Fatalf("node %s reset %d streams", n.name, k)
		}
	}
	if ch.Err() != nil {
		t.Fatal(ch.Err())
	}
}

// The node holding the harness's socket dies (the executor's stays up):
// the harness redials through the balancer to another node, which
// forwards its resume to the home; the home moves the stream to the new
// leg without a reset.
func TestFleetHarnessNodeLoss(t *testing.T) {
	t.Run("nats", func(t *testing.T) { fleetHarnessNodeLoss(t, nil) })
	t.Run("links", func(t *testing.T) { fleetHarnessNodeLoss(t, withLinks(nil)) })
}

func fleetHarnessNodeLoss(t *testing.T, opts func(*Options)) {
	front, nodes, ctx, ch := threeNodeStream(t, opts)
	a, b, c := nodes[0], nodes[1], nodes[2]
	if err := exchange(ctx, ch, 0, 100); err != nil {
		t.Fatal(err)
	}
	front.pick.Store(2)
	errc := make(chan error, 1)
	go func() { errc <- exchange(ctx, ch, 100, 300) }()
	time.Sleep(20 * time.Millisecond)
	b.crash()
	if err := <-errc; err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	// The exchange above can end before the kill lands (a quiet
	// machine moves 300 messages in under 20 ms), and then nothing has
	// made the harness come back yet: this round needs node b's socket.
	if err := exchange(ctx, ch, 400, 100); err != nil {
		t.Fatalf("after the kill, a later round: %v", err)
	}
	if c.rec.count(func(e Event) bool { return e.Kind == "attach" && e.Code == "forward" }) == 0 {
		t.Fatal("the harness did not come back through node c")
	}
	if k := a.rec.count(func(e Event) bool { return e.Kind == "reset" }); k != 0 {
		t.Fatalf("the home reset %d streams", k)
	}
}

// A node forwards at most MaxHarnessSockets harness sockets.
func TestFleetForwarderBound(t *testing.T) {
	url := startNATS(t)
	a := startNode(t, url, "a", "", nil)
	b := startNode(t, url, "b", "", func(o *Options) { o.MaxHarnessSockets = 2 })
	reg := a.register(t, "E", randomKey())
	dial(t, reg["url"].(string))
	a.executorOn(t, "E", 10*time.Second)
	for range 2 {
		dial(t, b.connect(t, "E", randomKey())["url"].(string))
	}
	if st, reason := dialStatus(t, b.connect(t, "E", randomKey())["url"].(string)); st != 503 || reason != "route_unavailable" {
		t.Fatalf("third forwarded socket: %d %q", st, reason)
	}
}

// threeNodeStream starts NATS, a test balancer and nodes a, b, c (with
// opts), an executor for environment E through node a and a harness
// stream through node b; all end with the test.
func threeNodeStream(t *testing.T, opts func(*Options)) (*lb, []*fleetNode, context.Context, *channel.Channel) {
	t.Helper()
	url := startNATS(t)
	front := startLB(t)
	nodes := []*fleetNode{}
	for _, name := range []string{"a", "b", "c"} {
		nodes = append(nodes, startNode(t, url, name, front.url(), opts))
	}
	front.nodes = nodes
	front.pick.Store(0)
	startExecutor(t, front.url(), "E")
	nodes[0].executorOn(t, "E", 15*time.Second)
	front.pick.Store(1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	ch := dialStream(ctx, t, front.url(), "E", harness.Options{})
	return front, nodes, ctx, ch
}

// dialStream opens a harness stream to env through the relay at base; it
// is closed when the test ends.
func dialStream(ctx context.Context, t *testing.T, base, env string, o harness.Options) *channel.Channel {
	t.Helper()
	d, err := harness.NewDialer(base, env, harnessToken, o)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := d.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	return ch
}

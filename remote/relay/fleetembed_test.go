package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/execgo/exec-server/remote/harness"
)

// embeddedFleet starts len(names) relay nodes, each with its own embedded
// NATS server (StartEmbeddedNATS) routed to the others, KV buckets with
// replicas R, behind a test balancer (publicURL).
func embeddedFleet(t *testing.T, names []string, replicas int, tweak func(*Options)) (*lb, []*fleetNode, []*EmbeddedNATS) {
	t.Helper()
	var addrs []string
	for range names {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	}
	front := startLB(t)
	var servers []*EmbeddedNATS
	for i, name := range names {
		e, err := StartEmbeddedNATS(EmbeddedNATSOptions{Name: name, StoreDir: t.TempDir(),
			ClusterListen: addrs[i], Routes: addrs, Secret: fleetSecret})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Shutdown)
		servers = append(servers, e)
	}
	// The servers form the cluster on their own; each node's bucket
	// binding waits for JetStream's quorum.
	var nodes []*fleetNode
	for i, name := range names {
		nc, err := servers[i].Connect(nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, startNodeConn(t, nc, name, front.url(), tweak, KVStoreOptions{Replicas: replicas}))
	}
	front.nodes = nodes
	return front, nodes, servers
}

// Three nodes each embedding a NATS server (routes between them, R3
// buckets), no NATS process: frames cross nodes over the routes, and the
// node holding the executor dies with its NATS server (which may lead the
// JetStream buckets). The executor redials to another node, the reliable
// stream resumes there with no reset and every message byte for byte, and
// new streams are admitted again once JetStream has a quorum leader
// (times logged: docs/remote.md reports them).
func TestFleetEmbeddedNATSNodeLoss(t *testing.T) {
	start := time.Now()
	front, nodes, servers := embeddedFleet(t, []string{"a", "b", "c"}, 3, func(o *Options) { o.TakeoverGrace = 10 * time.Second })
	a, b, c := nodes[0], nodes[1], nodes[2]
	t.Logf("three embedded nodes up in %s", time.Since(start).Round(time.Millisecond))
	for i, e := range servers {
		if e.Routes() == 0 {
			t.Fatalf("server %d has no routes", i)
		}
	}
	front.pick.Store(0)
	startExecutor(t, front.url(), "E")
	a.executorOn(t, "E", 15*time.Second)
	front.pick.Store(1)
	d, err := harness.NewDialer(front.url(), "E", harnessToken, harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch, err := d.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if b.rec.count(func(e Event) bool { return e.Kind == "attach" && e.Code == "forward" }) != 1 {
		t.Fatal("the harness socket is not on node b")
	}
	if err := exchange(ctx, ch, 0, 200); err != nil {
		t.Fatal(err)
	}
	if st := b.FleetStats(); st.FramesOut == 0 || st.FramesIn == 0 {
		t.Fatalf("nothing crossed nodes: %+v", st)
	}

	front.pick.Store(2)
	errc := make(chan error, 1)
	go func() { errc <- exchange(ctx, ch, 200, 400) }()
	time.Sleep(20 * time.Millisecond)
	killed := time.Now()
	a.crash()
	servers[0].Shutdown()
	c.executorOn(t, "E", 10*time.Second)
	t.Logf("executor re-attached to node c %s after the kill", time.Since(killed).Round(time.Millisecond))
	if err := <-errc; err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	t.Logf("stream resumed and drained %s after the kill", time.Since(killed).Round(time.Millisecond))
	if err := exchange(ctx, ch, 600, 100); err != nil {
		t.Fatal(err)
	}
	// A new stream (a /connect: an authorization put in the R3 bucket,
	// then taken) through the survivors.
	for {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		ch2, err := d.Dial(dctx)
		dcancel()
		if err == nil {
			err = exchange(ctx, ch2, 0, 10)
			ch2.Close()
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no new stream admitted after the node loss: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("new streams admitted %s after the kill", time.Since(killed).Round(time.Millisecond))
	for _, n := range []*fleetNode{b, c} {
		if k := n.rec.count(func(e Event) bool { return e.Kind == "reset" && e.Stream == ch.StreamID() }); k != 0 {
			t.Fatalf("node %s reset the stream", n.name)
		}
	}
	if ch.Err() != nil {
		t.Fatal(ch.Err())
	}
}

// Routes authenticate with the fleet secret: a server started with
// another secret is refused by the cluster.
func TestEmbeddedNATSRouteNeedsSecret(t *testing.T) {
	addrA := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	a, err := StartEmbeddedNATS(EmbeddedNATSOptions{Name: "a", StoreDir: t.TempDir(), ClusterListen: addrA, Routes: []string{addrA}, Secret: fleetSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	other := []byte("another-secret-another-secret-another-secret")
	addrX := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	x, err := StartEmbeddedNATS(EmbeddedNATSOptions{Name: "x", StoreDir: t.TempDir(),
		ClusterListen: addrX, Routes: []string{addrA, addrX}, Secret: other})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Shutdown()
	addrG := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	good, err := StartEmbeddedNATS(EmbeddedNATSOptions{Name: "g", StoreDir: t.TempDir(),
		ClusterListen: addrG, Routes: []string{addrA, addrG}, Secret: fleetSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Shutdown()
	deadline := time.Now().Add(20 * time.Second)
	for good.Routes() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a server with the fleet secret did not join")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// x has had as long as good to join, and dials again every second.
	time.Sleep(1500 * time.Millisecond)
	if n := x.Routes(); n != 0 {
		t.Fatalf("a server with another secret got %d routes", n)
	}
	if n, g := a.Routes(), good.Routes(); n != g {
		t.Fatalf("server a has %d route connections, the server with the secret %d: another server joined", n, g)
	}
}

// failingStore fails every write once down, with a store error that is
// not a bound.
type failingStore struct {
	*MemStore
	down atomic.Bool
}

var errStoreDown = errors.New("no response from stream")

func (f *failingStore) PutRegistration(ctx context.Context, env string, r Registration) error {
	if f.down.Load() {
		return errStoreDown
	}
	return f.MemStore.PutRegistration(ctx, env, r)
}

func (f *failingStore) PutAuthorization(ctx context.Context, token string, a Authorization) error {
	if f.down.Load() {
		return errStoreDown
	}
	return f.MemStore.PutAuthorization(ctx, token, a)
}

// A store that fails (a fleet's KV buckets without a leader while
// JetStream elects one after a node loss) answers 503 store_unavailable,
// which clients retry, not registry_full or 429
// too_many_pending_authorizations, which name a bound that was not hit.
func TestStoreFailureIsNotABound(t *testing.T) {
	fs := &failingStore{MemStore: NewMemStore(16, 16)}
	r := startRelay(t, Options{Store: fs})
	reg := r.register(t, "E", randomKey())
	dial(t, reg["url"].(string))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l, _, ok := r.router.Executor("E"); ok && l != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("executor not attached")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fs.down.Store(true)
	st, m := post(t, r.env("E")+"/connect", harnessToken, map[string]any{"harness_public_key": randomKey()})
	if st != 503 || errCode(m) != "store_unavailable" {
		t.Fatalf("connect with the store down: %d %v", st, m)
	}
	st, m = post(t, r.env("F")+"/register", execToken, map[string]any{"security_profile": SecurityProfile, "executor_public_key": randomKey()})
	if st != 503 || errCode(m) != "store_unavailable" {
		t.Fatalf("register with the store down: %d %v", st, m)
	}
}

// With replicated buckets, a registration put through one server is read
// back at once through another: reads go to the bucket's leader, not to
// a replica that may not have applied the put yet (direct gets).
func TestKVReplicatedReadAfterWrite(t *testing.T) {
	servers, _ := startNATSCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stores []*KVStore
	for _, ns := range servers {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		st, err := NewKVStore(ctx, nc, KVStoreOptions{Replicas: 3, Memory: true})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, st)
		js, _ := jetstream.New(nc)
		s, err := js.Stream(ctx, "KV_relay_reg")
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowDirect {
			t.Fatal("the replicated registration bucket allows direct (replica) reads")
		}
	}
	for i := range 100 {
		env := fmt.Sprint("E", i)
		reg := Registration{ID: fmt.Sprint("reg_", i), Key: randomKey(), At: time.Now()}
		if err := stores[i%3].PutRegistration(ctx, env, reg); err != nil {
			t.Fatal(err)
		}
		got, ok, err := stores[(i+1)%3].Registration(ctx, env)
		if err != nil || !ok || got.ID != reg.ID {
			t.Fatalf("put %d through one server, read through another: %+v %v %v", i, got, ok, err)
		}
	}
}

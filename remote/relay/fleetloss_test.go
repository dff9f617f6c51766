package relay

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/remote/harness"
)

// The executor's node dies and the executor redials to the very node that
// forwarded the harness's socket to it. That node becomes the home and
// must move its own forwarder at once (the announcement it publishes
// moves the other nodes' only): nothing may wait for the dead node to be
// declared dead, which this test puts beyond its end
// (FleetNodeDeadAfter 60 s), and the stream resumes without a reset.
func TestFleetNodeLossHarnessOnNewHome(t *testing.T) {
	front, nodes, ctx, ch := threeNodeStream(t, func(o *Options) {
		o.FleetNodeDeadAfter = time.Minute
		o.TakeoverGrace = time.Minute
	})
	a, b, c := nodes[0], nodes[1], nodes[2]
	if b.rec.count(func(e Event) bool { return e.Kind == "attach" && e.Code == "forward" }) != 1 {
		t.Fatal("the harness socket is not on node b")
	}
	if err := exchange(ctx, ch, 0, 100); err != nil {
		t.Fatal(err)
	}
	front.pick.Store(1) // the executor redials to b
	errc := make(chan error, 1)
	go func() { errc <- exchange(ctx, ch, 100, 300) }()
	time.Sleep(20 * time.Millisecond)
	a.crash()
	b.executorOn(t, "E", 30*time.Second)
	if err := <-errc; err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	if st := b.FleetStats(); st.Rehomed == 0 {
		t.Fatalf("node b did not move its forwarder when it became the home: %+v", st)
	}
	for _, n := range []*fleetNode{b, c} {
		if k := n.rec.count(func(e Event) bool { return e.Kind == "reset" }); k != 0 {
			t.Fatalf("node %s reset %d streams", n.name, k)
		}
	}
	if err := exchange(ctx, ch, 400, 100); err != nil {
		t.Fatal(err)
	}
}

// burnCPU keeps every CPU busy until the test ends (bounded by it).
func burnCPU(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) * 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := range 100000 {
					x += i
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// A live node late with its heartbeats (here: none at all, with every
// CPU busy) is suspected, probed, answers, and is not declared dead: the
// cross-node stream through it goes on, no socket is closed.
func TestFleetSilentNodeNotDeclaredDead(t *testing.T) {
	url := startNATS(t)
	fast := func(o *Options) { o.FleetNodeDeadAfter = time.Second }
	a := startNode(t, url, "a", "", fast)
	b := startNode(t, url, "b", "", fast)
	startExecutor(t, a.base, "E")
	a.executorOn(t, "E", 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch := dialStream(ctx, t, b.base, "E", harness.Options{})
	if err := exchange(ctx, ch, 0, 50); err != nil {
		t.Fatal(err)
	}
	burnCPU(t)
	a.fab.hbPaused.Store(true)
	// Round after round until b has suspected a, and found it alive,
	// three times.
	for i := 50; b.FleetStats().SuspicionsRefuted < 3; i += 20 {
		if err := exchange(ctx, ch, i, 20); err != nil {
			t.Fatalf("while a was silent: %v", err)
		}
	}
	if st := b.FleetStats(); st.NodesLost != 0 || st.Rehomed != 0 {
		t.Fatalf("a live node was taken for dead: %+v", st)
	}
	if st := a.FleetStats(); st.NodesLost != 0 {
		t.Fatalf("node a declared a node dead: %+v", st)
	}
	if ch.Err() != nil {
		t.Fatal(ch.Err())
	}
}

// A node that dies and whose executor does not come back anywhere is
// declared dead (its NATS subscriptions are gone: the probe finds no
// responders) and the forwarder to it is closed.
func TestFleetDeadNodeDeclared(t *testing.T) {
	url := startNATS(t)
	fast := func(o *Options) { o.FleetNodeDeadAfter = 300 * time.Millisecond }
	a := startNode(t, url, "a", "", fast)
	b := startNode(t, url, "b", "", fast)
	startExecutor(t, a.base, "E") // its URLs point at a alone
	a.executorOn(t, "E", 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch := dialStream(ctx, t, b.base, "E", harness.Options{ResumeTimeout: time.Second})
	if err := exchange(ctx, ch, 0, 20); err != nil {
		t.Fatal(err)
	}
	a.crash()
	for {
		st := b.FleetStats()
		if st.NodesLost == 1 && st.Rehomed == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node a not declared dead: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

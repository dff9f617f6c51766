package relay

import (
	"testing"
	"time"
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

package relay

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// pendingFrom sums the bytes node n holds, received from node peer and
// not handed on yet (its leg subscriptions' pending messages).
func pendingFrom(n *fleetNode, peer string) int64 {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	var sum int64
	for _, rl := range n.fab.remote {
		if rl.node == peer && rl.sub != nil {
			if _, b, err := rl.sub.Pending(); err == nil {
				sum += int64(b)
			}
		}
	}
	return sum
}

// One peer node floods a home through many harness legs whose executor
// does not read: the home holds at most that peer's share of its buffers
// (FleetNodeBytes over the nodes that may send to it) from it, not legs ×
// the per-leg window, and another peer's stream to the same home goes on
// meanwhile.
func TestFleetPeerBudget(t *testing.T) {
	const nodeBytes = 2 << 20
	tweak := func(o *Options) {
		o.FleetNodeBytes = nodeBytes
		o.QueueFrames, o.QueueBytes = 4, 256<<10 // the stuck executor absorbs little
		o.SlowHarness = time.Minute
		// No node dies here: the flood must not let a starved heartbeat
		// (seen once at load 60+ under -race) pass for a lost node.
		o.FleetNodeDeadAfter = 30 * time.Second
	}
	url := startNATS(t)
	h := startNode(t, url, "h", "", tweak)
	x := startNode(t, url, "x", "", tweak)
	y := startNode(t, url, "y", "", tweak)
	// x must know the three nodes before its budget toward h is made: its
	// share is then nodeBytes over x and y.
	deadline := time.Now().Add(20 * time.Second)
	for {
		x.fab.mu.Lock()
		n := len(x.fab.peers)
		x.fab.mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("x saw no heartbeats of h and y")
		}
		time.Sleep(20 * time.Millisecond)
	}
	const share = nodeBytes / 2

	stuck := dial(t, h.register(t, "stuck", randomKey())["url"].(string))
	_ = stuck // never read
	h.executorOn(t, "stuck", 10*time.Second)
	echo := dial(t, h.register(t, "echo", randomKey())["url"].(string))
	h.executorOn(t, "echo", 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			_, b, err := echo.Read(ctx)
			if err != nil || echo.Write(ctx, websocket.MessageBinary, b) != nil {
				return
			}
		}
	}()

	// Every socket is up before the flood: 12 legs from x (12 MiB of
	// per-leg windows), one from y.
	hy := dial(t, y.connect(t, "echo", randomKey())["url"].(string))
	payload := bytes.Repeat([]byte{'f'}, 64<<10)
	var flood []*websocket.Conn
	for range 12 {
		flood = append(flood, dial(t, x.connect(t, "stuck", randomKey())["url"].(string)))
	}
	for i, hc := range flood {
		sid := fmt.Sprintf("0f8b1d2e-aaaa-4bbb-8ccc-0000000000%02d", i)
		go func() {
			for seq := uint32(0); ctx.Err() == nil; seq++ {
				if hc.Write(ctx, websocket.MessageBinary, dataFrame(sid, seq, payload)) != nil {
					return
				}
			}
		}()
	}
	// Until x has waited on its budget and kept waiting, h never holds
	// more than x's share (plus one frame) from x.
	bound := int64(share + len(payload) + 1024)
	steady := 0
	for steady < 20 {
		if p := pendingFrom(h, "x"); p > bound {
			t.Fatalf("h holds %d bytes from x, more than its share %d", p, bound)
		}
		if x.FleetStats().PeerWaits > 0 {
			steady++
		}
		if time.Now().After(deadline.Add(60 * time.Second)) {
			t.Fatalf("x never waited on its budget toward h (h holds %d bytes from it)", pendingFrom(h, "x"))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// y's stream to the same home goes on.
	yctx, ycancel := context.WithTimeout(ctx, 30*time.Second)
	defer ycancel()
	const sid = "0f8b1d2e-aaaa-4bbb-8ccc-999999999999"
	for i := range 50 {
		f := dataFrame(sid, uint32(i), bytes.Repeat([]byte{byte(i)}, 4096))
		if err := hy.Write(yctx, websocket.MessageBinary, f); err != nil {
			t.Fatalf("y frame %d: %v", i, err)
		}
		_, got, err := hy.Read(yctx)
		if err != nil || !bytes.Equal(got, f) {
			t.Fatalf("y frame %d: %v (%d bytes)", i, err, len(got))
		}
	}
	if p := pendingFrom(h, "x"); p > bound {
		t.Fatalf("h holds %d bytes from x, more than its share %d", p, bound)
	}
}

package relay

import (
	"context"
	"runtime"
	"testing"

	"github.com/coder/websocket"
)

// The allocations of a 1 KiB frame's round trip across nodes (harness
// socket on node b, executor on node a, echoed), counted over the whole
// process: both relay nodes, the embedded NATS server and the two
// websocket ends of this test. Measured 28 per round trip (local: 12);
// 69 (local: 52) before frames were read without a copy, reads and writes
// stopped registering a context callback (and writes a deadline context)
// per message, and credits stopped allocating (a channel per credit
// message, a timer per frame). Skipped under -race, which changes the
// counts.
const maxAllocsPerCrossRoundTrip = 34

func allocsPerRoundTrip(t *testing.T, c *websocket.Conn, n int) float64 {
	t.Helper()
	ctx := context.Background()
	msg := dataFrame(benchSID, 1, make([]byte, 1024))
	rt := func() {
		if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 200 { // warm: credit timers, buffers, the scheduler
		rt()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		rt()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(n)
}

func TestAllocGuardFleetCrossNode(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	fe := startFleetBench(t, 2)
	local := allocsPerRoundTrip(t, fe.harness(t, 0, false), 2000)
	cross := allocsPerRoundTrip(t, fe.harness(t, 1, true), 2000)
	t.Logf("allocations per 1 KiB round trip: local %.1f, cross-node %.1f (bound %d)", local, cross, maxAllocsPerCrossRoundTrip)
	if cross > maxAllocsPerCrossRoundTrip {
		t.Fatalf("%.1f allocations per round trip across nodes, bound %d (local: %.1f)", cross, maxAllocsPerCrossRoundTrip, local)
	}
}

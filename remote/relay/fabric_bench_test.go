package relay

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
)

// The cross-node path against the node-local one, in one process: two
// relay nodes on an embedded NATS server, an executor socket on node a
// echoing every frame, harness sockets on a (local) or on b (cross). The
// sockets speak the relay's frame protocol with opaque payloads: the
// relay never decrypts, so what is measured is the relay (and, in this
// process, the NATS server and the websocket ends), not Noise.

// fleetBenchEnv is one environment on node a with an echoing executor.
type fleetBenchEnv struct {
	a, b *fleetNode
}

// fleetBenchNATS: how the nodes reach NATS in the benchmarks (go test
// -bench Fleet ./remote/relay -fleetnats=shared|embed|embed-tcp).
var fleetBenchNATS = flag.String("fleetnats", "shared", "fleet benchmarks: shared (one NATS server, TCP), embed (a server per node, in-process pipe), embed-tcp (a server per node, loopback TCP)")

// fleetBenchLinks: legs' frames on peer links (peerlink.go) rather than
// NATS (-fleetlinks).
var fleetBenchLinks = flag.Bool("fleetlinks", false, "fleet benchmarks: direct peer links between the nodes for legs' frames")

func startFleetBench(tb testing.TB, envs int) *fleetBenchEnv {
	tb.Helper()
	// No node dies here: a loaded machine must not pass a late
	// heartbeat for a lost node.
	tweak := func(o *Options) {
		o.FleetNodeDeadAfter = time.Minute
		if *fleetBenchLinks {
			o.PeerListen = "127.0.0.1:0"
		}
		if os.Getenv("MESHDEBUG") != "" {
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
	}
	fe := &fleetBenchEnv{}
	switch *fleetBenchNATS {
	case "shared":
		url := startNATS(tb)
		fe.a, fe.b = startNode(tb, url, "a", "", tweak), startNode(tb, url, "b", "", tweak)
	case "embed", "embed-tcp":
		addrs := []string{fmt.Sprintf("127.0.0.1:%d", freePort(tb)), fmt.Sprintf("127.0.0.1:%d", freePort(tb))}
		var servers []*EmbeddedNATS
		for i, name := range []string{"a", "b"} {
			e, err := StartEmbeddedNATS(EmbeddedNATSOptions{Name: name, StoreDir: tb.TempDir(),
				ClusterListen: addrs[i], Routes: addrs, Secret: fleetSecret})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(e.Shutdown)
			servers = append(servers, e)
		}
		for i, name := range []string{"a", "b"} {
			e := servers[i]
			connect := e.Connect
			if *fleetBenchNATS == "embed-tcp" {
				connect = e.ConnectLoopback
			}
			nc, err := connect(nats.Name(name))
			if err != nil {
				tb.Fatal(err)
			}
			n := startNodeConn(tb, nc, name, "", tweak, KVStoreOptions{Memory: true})
			if i == 0 {
				fe.a = n
			} else {
				fe.b = n
			}
		}
	default:
		tb.Fatalf("-fleetnats %q", *fleetBenchNATS)
	}
	if *fleetBenchLinks {
		waitLinks(tb, 10*time.Second, fe.a, fe.b)
	}
	for i := range envs {
		env := fmt.Sprint("E", i)
		reg := fe.a.register(tb, env, randomKey())
		e, _, err := websocket.Dial(context.Background(), reg["url"].(string), nil)
		if err != nil {
			tb.Fatal(err)
		}
		e.SetReadLimit(1 << 20)
		tb.Cleanup(func() { e.CloseNow() })
		go echo(context.Background(), e)
		fe.a.executorOn(tb, env, 10*time.Second)
	}
	return fe
}

// harness dials a harness socket for env i on node a (cross false) or b.
func (fe *fleetBenchEnv) harness(tb testing.TB, i int, cross bool) *websocket.Conn {
	tb.Helper()
	n := fe.a
	if cross {
		n = fe.b
	}
	bundle := n.connect(tb, fmt.Sprint("E", i), randomKey())
	h, _, err := websocket.Dial(context.Background(), bundle["url"].(string), nil)
	if err != nil {
		tb.Fatal(err)
	}
	h.SetReadLimit(1 << 20)
	tb.Cleanup(func() { h.CloseNow() })
	return h
}

var fleetPaths = []struct {
	name  string
	cross bool
}{{"local", false}, {"cross", true}}

const benchSID = "0f8b1d2e-aaaa-4bbb-8ccc-123456789abc"

// BenchmarkFleetRoundTrip: one 1 KiB frame echoed at a time.
func BenchmarkFleetRoundTrip(b *testing.B) {
	for _, p := range fleetPaths {
		b.Run(p.name, func(b *testing.B) {
			fe := startFleetBench(b, 1)
			c := fe.harness(b, 0, p.cross)
			msg := dataFrame(benchSID, 1, make([]byte, 1024))
			ctx := context.Background()
			for b.Loop() {
				if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
					b.Fatal(err)
				}
				if _, _, err := c.Read(ctx); err != nil {
					b.Fatal(err)
				}
			}
			sa, sb := fe.a.FleetStats(), fe.b.FleetStats()
			b.ReportMetric(float64(sa.LinkInline+sb.LinkInline)/float64(b.N), "inline/op")
		})
	}
}

// BenchmarkFleetFrames: 1 KiB frames pipelined through k streams (one
// harness socket each, up to 64 frames in flight per socket); one op is
// one frame each way.
func BenchmarkFleetFrames(b *testing.B) {
	for _, k := range []int{1, 16} {
		for _, p := range fleetPaths {
			b.Run(fmt.Sprintf("%s/streams=%d", p.name, k), func(b *testing.B) {
				fe := startFleetBench(b, k)
				var conns []*websocket.Conn
				for i := range k {
					conns = append(conns, fe.harness(b, i, p.cross))
				}
				b.SetBytes(1024)
				b.ResetTimer()
				pumpFrames(b, conns, b.N, 1024, 64)
			})
		}
	}
}

// pumpFrames sends n frames of size payload bytes spread over conns (at
// most window in flight on each) and reads their echoes.
func pumpFrames(tb testing.TB, conns []*websocket.Conn, n, size, window int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, 2*len(conns))
	for i, c := range conns {
		count := n / len(conns)
		if i < n%len(conns) {
			count++
		}
		msg := dataFrame(benchSID, 1, make([]byte, size))
		inflight := make(chan struct{}, window)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range count {
				inflight <- struct{}{}
				if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
					errc <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range count {
				if _, _, err := c.Read(ctx); err != nil {
					errc <- err
					return
				}
				<-inflight
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		tb.Fatal(err)
	default:
	}
}

// BenchmarkFleetThroughput: one stream of 60 KiB frames, up to 16 in
// flight, echoed; bytes are counted one way.
func BenchmarkFleetThroughput(b *testing.B) {
	for _, p := range fleetPaths {
		b.Run(p.name, func(b *testing.B) {
			fe := startFleetBench(b, 1)
			c := fe.harness(b, 0, p.cross)
			b.SetBytes(60 << 10)
			b.ResetTimer()
			pumpFrames(b, []*websocket.Conn{c}, b.N, 60<<10, 16)
			sa, sb := fe.a.FleetStats(), fe.b.FleetStats()
			b.ReportMetric(float64(sa.CreditWaits+sb.CreditWaits)/float64(b.N), "creditwaits/op")
		})
	}
}

package relay

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Memory per executor socket that has carried a frame and gone idle, as
// most of a fleet node's executors are most of the time: a survivor that
// took a dead node's executors held 69-101 MB for about 660 of them. The
// figure is the whole process's heap and stacks (relay and this test's
// client ends, their goroutines' stacks) over n sockets, after a
// collection. Each leg kept its 64 KiB read buffer for life: 134 KiB per
// socket; legs now hold none between frames, ping from a timer and start
// a writer only when one is needed (55-70 KiB), and are served on a fresh
// goroutine rather than the upgrade's grown one (34-48 KiB). Not timed:
// it counts bytes once every socket has answered a ping.
const maxIdleSocketBytes = 80 << 10

// In CI's allocation guard step (-run AllocGuard, without -race, which
// changes the sizes).
func TestAllocGuardIdleExecutorSocketMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("memory figures differ under the race detector")
	}
	r := startRelay(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// One socket first: the relay's one-time costs (pools, the
	// scheduler's per-P caches) are not per socket.
	open := func(i int) *websocket.Conn {
		env := fmt.Sprint("M", i)
		c := dial(t, r.register(t, env, randomKey())["url"].(string))
		c.CloseRead(ctx) // pongs need a reader
		// A frame for no stream: read, dropped; the ping's pong comes
		// once the relay is back waiting for the next frame.
		write(t, c, dataFrame("no-such-stream", 1, make([]byte, 1024)))
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	open(0)
	const n = 200
	before := heapAndStacks()
	for i := 1; i <= n; i++ {
		open(i)
	}
	after := heapAndStacks()
	per := float64(after-before) / n
	t.Logf("%.1f KiB per idle executor socket (bound %d KiB)", per/1024, maxIdleSocketBytes>>10)
	if per > maxIdleSocketBytes {
		t.Fatalf("%.1f KiB per idle executor socket, bound %d KiB", per/1024, maxIdleSocketBytes>>10)
	}
}

func heapAndStacks() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// Frames of every size class of the read buffers (and across their
// edges, and one of exactly the read limit, which grows past the last
// class) arrive byte-exact both ways, one after another on one leg, each
// buffer going back to its pool between them.
func TestFramesAcrossReadBufferClasses(t *testing.T) {
	const limit = 300 << 10
	p := newPair(t, Options{MaxFrameBytes: limit})
	h := p.harness(t)
	exact := 0
	for n := limit - 64; n <= limit; n++ {
		if len(dataFrame("s-1", 1, make([]byte, n))) == limit {
			exact = n
		}
	}
	if exact == 0 {
		t.Fatal("no payload size makes a frame of exactly the limit")
	}
	sizes := []int{0, 1, 4000, 4096, 5000, 65535, 66 << 10, 100 << 10, 200 << 10, exact, 10, exact, 3}
	for i, n := range sizes {
		payload := make([]byte, n)
		for j := range payload {
			payload[j] = byte(i + j*7)
		}
		f := dataFrame("s-1", uint32(i), payload)
		write(t, h, f)
		if got := read(t, p.exec); !bytes.Equal(got, f) {
			t.Fatalf("harness to executor, payload %d bytes: frame differs (%d bytes, want %d)", n, len(got), len(f))
		}
		write(t, p.exec, f)
		if got := read(t, h); !bytes.Equal(got, f) {
			t.Fatalf("executor to harness, payload %d bytes: frame differs (%d bytes, want %d)", n, len(got), len(f))
		}
	}
}

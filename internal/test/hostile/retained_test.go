package hostile

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRetainedOutput starts hundreds of short processes that each write 1
// MiB and exit, from a client that reads every push: each closed process
// keeps its retained output window (1 MiB) for process/read during the
// retention period (30 s). The server-wide budget for retained output
// (--max-retained-bytes, 16 MiB here) bounds what all those windows hold:
// 200 MiB of output must not become more than 160 MiB of resident memory
// (under -race, without the budget the high-water mark is about 240 MiB;
// with it, about 105 MiB, the rest being the garbage collector's headroom).
// The budget is small so that 200 processes tell the two apart: 400 under a
// 64 MiB budget did the same in twice the time.
func TestRetainedOutput(t *testing.T) {
	const bound = 160 << 20
	n := 200
	if v := os.Getenv("HOSTILE_RETAINED"); v != "" {
		n, _ = strconv.Atoi(v)
	} else if testing.Short() {
		n = 120 // still seven times the retained budget
	}
	mark := marker()
	t.Cleanup(func() { killMarked(mark) })
	s := startServer(t, nil, hostileArgs("HOSTILE_RETAINED_ARGS", "--max-retained-bytes", "16777216")...)
	base, _ := s.memory()
	mem := sampleMemory(s)
	stopProbe := startProbe(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	attacker := dial(ctx, t, s.url) // reads (and drops) every push
	attacker.handshake(ctx, t)
	var next, refused atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	stopAt := start.Add(25 * time.Second)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) || time.Now().After(stopAt) {
					return
				}
				err := attacker.startProcess(ctx, fmt.Sprintf("r%d", i), []string{"head", "-c", "1048576", "/dev/zero"}, map[string]string{"HOSTILE_MARK": mark})
				if err != nil {
					refused.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	waitNoMarked(mark, 10*time.Second)
	time.Sleep(time.Second)
	p := stopProbe()
	peak, hwm := mem()
	s.alive(t)
	started := min(next.Load()-1, int64(n)) - refused.Load()
	t.Logf("retained: %d processes of 1 MiB output started in %v, %d refused (%v)", started, time.Since(start), refused.Load(), firstErr.Load())
	p.check(t, "retained", livenessBound)
	checkMemory(t, "retained", base, peak, hwm)
	if hwm > bound {
		t.Fatalf("server memory high-water %s over %s with a 16 MiB budget for retained output", mib(hwm), mib(bound))
	}
}

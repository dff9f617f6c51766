package childinit

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// threads returns this process's OS thread count.
func threads(t testing.TB) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// TestSpawnersDoNotPinThreads: a live spawner (one per session) must not
// cost the server an OS thread. Go aborts at 10 000 threads, so a thread
// per session would let a flood of sessions kill the server.
//
// 100 spawners are enough: the bound below is 40 threads, so a thread per
// spawner fails it 2.5 times over, and each spawner is a -race test binary
// that costs about 0.1 s to start.
func TestSpawnersDoNotPinThreads(t *testing.T) {
	const n = 100
	before := threads(t)
	spawners := make([]*Spawner, 0, n)
	defer func() {
		for _, s := range spawners {
			s.Close()
		}
	}()
	for range n {
		s, err := StartSpawner()
		if err != nil {
			t.Fatal(err)
		}
		spawners = append(spawners, s)
	}
	// Start one child on each so that every spawner is in use.
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, s := range spawners {
		if _, _, err := s.Start(SpawnAttr{Path: "/bin/sleep", Argv: []string{"sleep", "1000"}, Setsid: true, Pdeathsig: true}, [3]*os.File{null, null, null}); err != nil {
			t.Fatal(err)
		}
	}
	after := threads(t)
	t.Logf("threads: %d before, %d with %d live spawners", before, after, n)
	if after-before > 40 {
		t.Fatalf("%d live spawners cost %d OS threads (from %d to %d)", n, after-before, before, after)
	}
}

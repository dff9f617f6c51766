package hostile

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// soakSessions is how many sessions TestSoak holds: SOAK_SESSIONS, else
// 1000 (200 with -short).
func soakSessions() int {
	if s := os.Getenv("SOAK_SESSIONS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	if testing.Short() {
		return 200
	}
	return 1000
}

// procStatus reads the numeric fields of /proc/PID/status that the soak
// bounds (Threads, VmRSS in bytes) and the number of open descriptors.
func procStatus(pid int) (threads int, rss int64, fds int) {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Threads:":
			threads = int(n)
		case "VmRSS:":
			rss = n << 10
		}
	}
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return threads, rss, len(entries)
}

// TestSoak holds many sessions (1000 by default), each on its own
// connection with a live process, and checks what each session costs the
// server (OS threads, resident memory, descriptors) and that SIGTERM still
// ends it all promptly and completely. It catches the defects of issue 14:
// a thread per session (Go aborts at 10 000 threads) and a shutdown that
// rescanned /proc per session (1000 sessions took 55 s).
//
// The bounds are liveness and leak bounds with ample slack, not
// performance targets; the figures are logged.
func TestSoak(t *testing.T) {
	n := soakSessions()
	mark := marker()
	t.Cleanup(func() { killMarked(mark) })
	// SOAK_SERVER_ENV adds to the server's environment, e.g.
	// EXEC_SERVER_NO_CGROUPS=1 to measure the spawners' fallback.
	s := startServer(t, strings.Fields(os.Getenv("SOAK_SERVER_ENV")))
	threads0, rss0, fds0 := procStatus(s.pid())

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) || ctx.Err() != nil {
					return
				}
				// Not dial: it may not fail the test from this goroutine.
				c, _, err := websocket.Dial(ctx, s.url, nil)
				var cl *client
				if err == nil {
					cl = newClient(c)
					go cl.readLoop()
					t.Cleanup(cl.close)
					err = cl.call(ctx, "initialize", map[string]any{"clientName": "soak"}, nil)
				}
				if err == nil {
					err = cl.notify(ctx, "initialized", map[string]any{})
				}
				if err == nil {
					err = cl.startProcess(ctx, "p", []string{"sleep", "1000"}, map[string]string{"HOSTILE_MARK": mark})
				}
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("session %d: %w", i, err) })
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	setup := time.Since(start)
	live := waitMarked(t, mark, n, 30*time.Second)
	threads, rss, fds := procStatus(s.pid())
	t.Logf("soak: %d sessions with a live process each, set up in %v", n, setup.Round(time.Millisecond))
	t.Logf("soak: server threads %d -> %d, RSS %s -> %s (%.1f KiB/session), fds %d -> %d (%.1f/session); %d marked processes",
		threads0, threads, mib(rss0), mib(rss), float64(rss-rss0)/1024/float64(n), fds0, fds, float64(fds-fds0)/float64(n), len(live))
	s.alive(t)
	// A thread per session would be n more.
	if threads > 50 {
		t.Errorf("soak: %d OS threads with %d sessions: threads grow with sessions", threads, n)
	}
	// A session's descriptors: its connection, its spawner's lifeline and
	// pidfd, the process's output pipes.
	if per := float64(fds-fds0) / float64(n); per > 8 {
		t.Errorf("soak: %.1f descriptors per session (%d with %d sessions)", per, fds, n)
	}
	// Measured about 30 KiB per session; a leak of a buffer per session
	// (64 KiB read buffers, a retained window) shows well past this.
	if per := float64(rss-rss0) / float64(n); per > 256<<10 {
		t.Errorf("soak: %s of RSS per session (%s with %d sessions)", mib(int64(per)), mib(rss), n)
	}

	// SIGTERM ends every session and kills every process.
	// Threads are sampled meanwhile: ending every session at once must
	// not park a thread per session either (Go would abort the server at
	// 10 000 threads, in the middle of its shutdown).
	var peakThreads atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if th, _, _ := procStatus(s.pid()); int64(th) > peakThreads.Load() {
				peakThreads.Store(int64(th))
			}
			select {
			case <-s.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	begin := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(90 * time.Second): // a hang guard; the bound is below
		t.Fatalf("soak: the server did not exit within 90 s of SIGTERM with %d sessions", n)
	}
	shutdown := time.Since(begin)
	<-sampled
	t.Logf("soak: SIGTERM to exit with %d sessions: %v (exit %v), at most %d threads meanwhile", n, shutdown.Round(time.Millisecond), s.cmd.ProcessState, peakThreads.Load())
	if p := peakThreads.Load(); p > 100 {
		t.Errorf("soak: %d OS threads during the shutdown of %d sessions", p, n)
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("soak: exit code %d after SIGTERM", code)
	}
	// Quadratic shutdown took 55-58 s for 1000 sessions on an idle machine;
	// the fix takes 1.0-1.5 s there (the figure is logged above). The bound
	// only catches that regression: under `go test ./...` every other
	// package competes for the same 2 cores, and 1000 spawners each need a
	// little CPU to end (16.6 s seen in a CI-like run, over 30 s in a
	// -count=2 run of every package beside two other builds).
	// A loaded machine (CPU hogs) stretches every spawner's end alike: the
	// bound grows with the load per core seen meanwhile, up to the hang
	// guard (47 s was seen beside two CPU hogs and four -race packages).
	if shutdown > loadScaled(45*time.Second, 90*time.Second) {
		t.Errorf("soak: SIGTERM to exit took %v with %d sessions", shutdown, n)
	}
	if left := waitNoMarked(mark, 10*time.Second); len(left) > 0 {
		t.Errorf("soak: %d processes survived the server's SIGTERM:%s", len(left), describe(left[:min(len(left), 5)]))
	}
}

// TestTerminateKillsEveryDescendant: process/terminate must kill every
// descendant of the process, every time, including one that started its
// own session and, with cgroups, a daemon that left the tree before the
// terminate (double fork). Before the fix the setsid sleep survived in 7 of
// 20 runs: the server's group kill raced the spawner's tree kill, the
// shell died first and its orphan was reparented away before the scan.
func TestTerminateKillsEveryDescendant(t *testing.T) {
	t.Parallel() // its own server; mostly waiting for processes to end
	runs := 50
	if testing.Short() {
		runs = 20
	}
	cases := []struct {
		name   string
		script string
		procs  int
	}{
		{"setsid-grandchild", "setsid sleep 1000 & sleep 1000", 2},
		{"setsid-daemon", "(setsid sleep 1000 &); sleep 1000", 2},
	}
	if !cgroupV2Writable() {
		// Without a cgroup, a daemon that left the tree and its session
		// cannot be told apart from another process's.
		cases = cases[:1]
		t.Log("no writable cgroup v2 hierarchy: the setsid-daemon case is not run")
	}
	s := startServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl := dial(ctx, t, s.url)
	cl.handshake(ctx, t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			survived := 0
			for i := range runs {
				mark := marker()
				id := fmt.Sprintf("%s-%d", tc.name, i)
				if err := cl.startProcess(ctx, id, []string{"sh", "-c", tc.script}, map[string]string{"HOSTILE_MARK": mark}); err != nil {
					t.Fatal(err)
				}
				waitMarked(t, mark, tc.procs, 10*time.Second)
				var res struct {
					Running bool `json:"running"`
				}
				if err := cl.call(ctx, "process/terminate", map[string]any{"processId": id}, &res); err != nil {
					t.Fatal(err)
				}
				if !res.Running {
					t.Errorf("run %d: terminate said the process was not running", i)
				}
				if left := waitNoMarked(mark, 3*time.Second); len(left) > 0 {
					survived++
					t.Errorf("run %d: %d survived terminate:%s", i, len(left), describe(left))
					killMarked(mark)
				}
			}
			t.Logf("%s: survivors in %d of %d runs", tc.name, survived, runs)
		})
	}
}

// cgroupV2Writable reports whether the server's spawners will use cgroups:
// this (root) process could create one in the v2 hierarchy.
func cgroupV2Writable() bool {
	if os.Getenv("EXEC_SERVER_NO_CGROUPS") != "" {
		return false // inherited by the server: its spawners do without
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		for i, w := range f {
			if w == "-" && i+1 < len(f) && f[i+1] == "cgroup2" && len(f) > 4 {
				return syscall.Access(f[4], 2) == nil // W_OK
			}
		}
	}
	return false
}

// loadScaled is d times the 1-minute load average per core (at least 1),
// at most max.
func loadScaled(d, max time.Duration) time.Duration {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return d
	}
	f := strings.Fields(string(b))
	load, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return d
	}
	if per := load / float64(runtime.NumCPU()); per > 1 {
		d = time.Duration(float64(d) * per)
	}
	return min(d, max)
}

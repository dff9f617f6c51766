package childinit

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func spawnSh(t testing.TB, s *Spawner, script string, env []string, setsid bool) (int, <-chan syscall.WaitStatus) {
	t.Helper()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	pid, ch, err := s.Start(SpawnAttr{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: env, Dir: "/", Setsid: setsid, Pdeathsig: true},
		[3]*os.File{null, null, null})
	if err != nil {
		t.Fatal(err)
	}
	return pid, ch
}

func newSpawner(t testing.TB) *Spawner {
	t.Helper()
	s, err := StartSpawner()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSpawnerStatusErrorsAndSignals(t *testing.T) {
	s := newSpawner(t)
	mark := marker()
	t.Cleanup(func() { killAll(mark) })
	env := []string{"PATH=/usr/bin:/bin", "CHILDINIT_MARK=" + mark}
	_, ch := spawnSh(t, s, "exit 3", env, true)
	if st, ok := <-ch; !ok || st.ExitStatus() != 3 {
		t.Fatalf("exit 3: %v %v", st, ok)
	}
	// Session leader in its own group, as if started directly; the group
	// signal reaches it.
	pid, ch := spawnSh(t, s, `[ "$(cut -d' ' -f6 /proc/$$/stat)" = $$ ] || exit 9; exec sleep 1000`, env, true)
	waitCount(mark, func(n int) bool { return n >= 1 }, 5*time.Second)
	time.Sleep(50 * time.Millisecond)
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st := <-ch; !st.Signaled() || st.Signal() != syscall.SIGTERM {
		t.Fatalf("after SIGTERM to the group: %#x (exited %v code %d)", uint32(st), st.Exited(), st.ExitStatus())
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	if _, _, err := s.Start(SpawnAttr{Path: "/nonexistent", Argv: []string{"x"}}, [3]*os.File{null, null, null}); err != syscall.ENOENT {
		t.Fatalf("missing program: %v", err)
	}
}

func TestSpawnerKillTreeAndClose(t *testing.T) {
	s := newSpawner(t)
	mark := marker()
	t.Cleanup(func() { killAll(mark) })
	env := []string{"PATH=/usr/bin:/bin", "CHILDINIT_MARK=" + mark}
	var pids []int
	for _, c := range strings.Split(trees, "\n") {
		pid, _ := spawnSh(t, s, c, env, true)
		pids = append(pids, pid)
	}
	if got := waitCount(mark, func(n int) bool { return n >= treeProcs }, 5*time.Second); len(got) < treeProcs {
		t.Fatalf("only %d of %d up", len(got), treeProcs)
	}
	// One tree: the setsid grandchild's.
	if err := s.KillTree(pids[2]); err != nil {
		t.Fatal(err)
	}
	// Exactly: a process caught in exec (its environment may be unreadable for a
	// moment) is missed by one look, so the first count at or under the
	// mark may be one short on a loaded machine.
	if got := waitCount(mark, func(n int) bool { return n == treeProcs-2 }, 3*time.Second); len(got) != treeProcs-2 {
		t.Fatalf("after KillTree of one tree: %d left, want %d", len(got), treeProcs-2)
	}
	// A child that exits leaving a setsid daemon: its status comes at once.
	_, ch := spawnSh(t, s, "setsid sleep 1000 & exit 4", env, true)
	select {
	case st := <-ch:
		if st.ExitStatus() != 4 {
			t.Fatalf("status %v", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no status while a daemon runs")
	}
	s.Close()
	if left := waitCount(mark, func(n int) bool { return n == 0 }, 5*time.Second); len(left) > 0 {
		t.Fatalf("%d survived Close", len(left))
	}
}

// TestSpawnerChildHoldsOnlyItsStreams: the descriptors that carried a
// child's streams must not leak into it beyond 0, 1 and 2, or a background
// process that redirected its output would still hold the pipe.
func TestSpawnerChildHoldsOnlyItsStreams(t *testing.T) {
	s := newSpawner(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	_, ch, err := s.Start(SpawnAttr{Path: "/bin/ls", Argv: []string{"ls", "-l", "/proc/self/fd"}, Setsid: true},
		[3]*os.File{null, w, w})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	out, _ := io.ReadAll(r)
	var holders []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasSuffix(line, fmt.Sprintf("pipe:[%d]", st.Ino)) {
			f := strings.Fields(line)
			holders = append(holders, f[len(f)-3])
		}
	}
	if strings.Join(holders, " ") != "1 2" {
		t.Fatalf("the output pipe is open on descriptors %q of the child, want only 1 and 2:\n%s", holders, out)
	}
}

// TestSpawnerServerSIGKILL: a stand-in server starts the trees through a
// spawner and is killed with SIGKILL.
func TestSpawnerServerSIGKILL(t *testing.T) {
	mark := marker()
	t.Cleanup(func() { killAll(mark) })
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "CHILDINIT_FAKE_SERVER="+trees, "CHILDINIT_FAKE_SPAWNER=1", "CHILDINIT_MARK="+mark)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		t.Fatalf("fake server: %q", line)
	}
	// server + spawner + the trees
	if got := waitCount(mark, func(n int) bool { return n >= treeProcs+2 }, 5*time.Second); len(got) < treeProcs+2 {
		t.Fatalf("only %d up", len(got))
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if left := waitCount(mark, func(n int) bool { return n == 0 }, 5*time.Second); len(left) > 0 {
		t.Fatalf("%d processes survived the server's SIGKILL: %v", len(left), left)
	}
}

// BenchmarkSpawnerStart: start and wait for /bin/true through a spawner
// (compare with BenchmarkStartDirect).
func BenchmarkSpawnerStart(b *testing.B) {
	s := newSpawner(b)
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	for b.Loop() {
		_, ch, err := s.Start(SpawnAttr{Path: "/bin/true", Argv: []string{"true"}, Setsid: true}, [3]*os.File{null, null, null})
		if err != nil {
			b.Fatal(err)
		}
		<-ch
	}
}

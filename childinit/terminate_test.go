package childinit

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestKillTreeEveryDescendant: KillTree followed by a kill of the child's
// group, as the process package terminates a process, must leave no
// descendant alive, every time. Before KillTree waited for the spawner, the
// group kill could win the race: the shell died first, its setsid child
// was reparented to the spawner before the spawner's scan, and survived
// (7 runs in 20). With cgroups, daemons that left the tree before the kill
// (double fork plus setsid) die too; the fallback cannot tell those apart
// from another child's, so that case runs only with cgroups.
//
// 25 runs per case: at the old race's rate (7 in 20) all 25 pass with
// probability 0.65^25, about 2e-5.
func TestKillTreeEveryDescendant(t *testing.T) {
	runs := 25
	if testing.Short() {
		runs = 10
	}
	cases := []struct {
		name, script string
		procs        int  // processes of the tree once it is up
		needCgroups  bool // only a cgroup finds all of them
	}{
		{"setsid child", "setsid sleep 1000 & sleep 1000", 2, false},
		{"background child", "sleep 1000 & sleep 1000", 2, false},
		{"double fork", "(sleep 1000 &); sleep 1000", 2, false},
		{"double fork and setsid", "(setsid sleep 1000 &); sleep 1000", 2, true},
	}
	for _, mode := range []string{"cgroups", "no cgroups"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "no cgroups" {
				t.Setenv(noCgroupsEnv, "1")
			} else if !cgroupsWork(t) {
				t.Skip("no writable cgroup v2 hierarchy here")
			}
			s := newSpawner(t)
			for _, tc := range cases {
				if tc.needCgroups && mode == "no cgroups" {
					continue
				}
				t.Run(tc.name, func(t *testing.T) {
					survived := 0
					for i := range runs {
						mark := marker()
						env := []string{"PATH=/usr/bin:/bin", "CHILDINIT_MARK=" + mark}
						pid, ch := spawnSh(t, s, tc.script, env, true)
						if got := waitCount(mark, func(n int) bool { return n >= tc.procs }, 5*time.Second); len(got) < tc.procs {
							killAll(mark)
							t.Fatalf("run %d: only %d of %d processes up", i, len(got), tc.procs)
						}
						if err := s.KillTree(pid); err != nil {
							t.Fatal(err)
						}
						_ = syscall.Kill(-pid, syscall.SIGKILL)
						<-ch
						if left := waitCount(mark, func(n int) bool { return n == 0 }, 2*time.Second); len(left) > 0 {
							survived++
							t.Errorf("run %d: %d survived: %s", i, len(left), describe(left))
							killAll(mark)
						}
					}
					if survived > 0 {
						t.Errorf("descendants survived in %d of %d runs", survived, runs)
					}
				})
			}
		})
	}
}

// cgroupsWork reports whether a spawner started now would use cgroups.
func cgroupsWork(t *testing.T) bool {
	t.Helper()
	c := newCgroups()
	defer func() { _ = c.remove(0) }()
	return c.dir != ""
}

func describe(pids []int) string {
	s := ""
	for _, p := range pids {
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		s += fmt.Sprintf("\n  %d: %q", p, cl)
	}
	return s
}

// TestSpawnerSIGKILLedCgroupReleased: a spawner killed with SIGKILL takes
// its children with it (Pdeathsig) but not their descendants; the server
// kills those through the spawner's cgroup once it has reaped the spawner.
func TestSpawnerSIGKILLedCgroupReleased(t *testing.T) {
	if !cgroupsWork(t) {
		t.Skip("no writable cgroup v2 hierarchy here")
	}
	s := newSpawner(t)
	mark := marker()
	t.Cleanup(func() { killAll(mark) })
	spawnSh(t, s, "setsid sleep 1000 & exec sleep 1000", []string{"PATH=/usr/bin:/bin", "CHILDINIT_MARK=" + mark}, true)
	if got := waitCount(mark, func(n int) bool { return n >= 2 }, 5*time.Second); len(got) < 2 {
		t.Fatalf("only %d of 2 up", len(got))
	}
	if err := syscall.Kill(s.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if left := waitCount(mark, func(n int) bool { return n == 0 }, 5*time.Second); len(left) > 0 {
		t.Fatalf("%d survived the spawner's SIGKILL: %s", len(left), describe(left))
	}
	dir := spawnerCgroup(cgroupBaseOnce(), s.Pid())
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestChildCgroupRemovedWhenEmpty: a child's cgroup outlives the child
// while a descendant it left runs there, and is removed once that one is
// gone too: cgroups do not pile up in a long session.
func TestChildCgroupRemovedWhenEmpty(t *testing.T) {
	if !cgroupsWork(t) {
		t.Skip("no writable cgroup v2 hierarchy here")
	}
	s := newSpawner(t)
	mark := marker()
	t.Cleanup(func() { killAll(mark) })
	dir := spawnerCgroup(cgroupBaseOnce(), s.Pid())
	children := func() int {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range entries {
			if e.IsDir() {
				n++
			}
		}
		return n
	}
	waitChildren := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for children() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d cgroups in %s, want %d", children(), dir, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	_, ch := spawnSh(t, s, "setsid sleep 1000 & exit 0", []string{"PATH=/usr/bin:/bin", "CHILDINIT_MARK=" + mark}, true)
	<-ch
	pids := waitCount(mark, func(n int) bool { return n >= 1 }, 5*time.Second)
	if len(pids) != 1 {
		t.Fatalf("want the daemon alive, have %v", pids)
	}
	waitChildren(1)
	_ = syscall.Kill(pids[0], syscall.SIGKILL)
	waitChildren(0)
}

// TestSweepStaleCgroups: the empty cgroups of a spawner that is gone are
// removed when the next spawner starts; a live spawner's are not.
func TestSweepStaleCgroups(t *testing.T) {
	if !cgroupsWork(t) {
		t.Skip("no writable cgroup v2 hierarchy here")
	}
	// A pid that is certainly dead: a child that has been reaped.
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	dead := spawnerCgroup(cgroupBaseOnce(), p.Pid)
	if err := os.Mkdir(dead, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dead+"/1", 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeCgroupTree(dead) })
	live := newSpawner(t)
	sweepStaleCgroups()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("%s of a dead spawner is still there (%v)", dead, err)
	}
	if _, err := os.Stat(spawnerCgroup(cgroupBaseOnce(), live.Pid())); err != nil {
		t.Errorf("the live spawner's cgroup: %v", err)
	}
}

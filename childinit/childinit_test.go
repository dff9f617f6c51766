package childinit

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is also the init (Prepare re-executes os.Executable) and,
// with CHILDINIT_FAKE_SERVER set, a stand-in server that starts the given
// shell commands under inits and then waits to be killed.
func TestMain(m *testing.M) {
	MaybeMain()
	if os.Getenv("GORACE") == "" {
		// A race-enabled binary sleeps 1 s at exit by default: every
		// spawner's Close would wait for it.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	if cmds := os.Getenv("CHILDINIT_FAKE_SERVER"); cmds != "" {
		fakeServer(strings.Split(cmds, "\n"))
		return
	}
	os.Exit(m.Run())
}

func fakeServer(cmds []string) {
	if os.Getenv("CHILDINIT_FAKE_SPAWNER") != "" {
		s, err := StartSpawner()
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		null, _ := os.Open(os.DevNull)
		for _, c := range cmds {
			if _, _, err := s.Start(SpawnAttr{Path: "/bin/sh", Argv: []string{"sh", "-c", c}, Env: os.Environ(), Setsid: true, Pdeathsig: true}, [3]*os.File{null, null, null}); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return
	}
	var ctls []*Control
	for _, c := range cmds {
		_, ctl, err := start("/bin/sh", []string{"sh", "-c", c}, os.Environ())
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		ctls = append(ctls, ctl)
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
	_ = ctls
}

// start runs argv under an init the way the server does: own session and
// process group, Pdeathsig as a second line of defence.
func start(path string, argv, env []string) (*os.Process, *Control, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, nil, err
	}
	defer null.Close()
	ipath, iargv, ifiles, isys, ctl, err := Prepare(path, argv, []*os.File{null, os.Stderr, os.Stderr},
		&syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL})
	if err != nil {
		return nil, nil, err
	}
	proc, err := os.StartProcess(ipath, iargv, &os.ProcAttr{Env: env, Files: ifiles, Sys: isys})
	if err != nil {
		ctl.Abort()
		return nil, nil, err
	}
	if _, err := ctl.Started(); err != nil {
		_, _ = proc.Wait()
		return nil, nil, err
	}
	return proc, ctl, nil
}

func marker() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "childinit-" + hex.EncodeToString(b)
}

// marked lists live, non-zombie processes whose environment holds
// CHILDINIT_MARK=mark.
func marked(mark string) []int {
	needle := []byte("CHILDINIT_MARK=" + mark + "\x00")
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append(env, 0), needle) {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func waitCount(mark string, cond func(int) bool, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		pids := marked(mark)
		if cond(len(pids)) || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func killAll(mark string) {
	for _, p := range marked(mark) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// trees: a plain child, a background grandchild, a grandchild in its own
// session, a double-forked daemon. 7 processes in all.
const trees = "exec sleep 1000\nsleep 1000 & wait\nsetsid sleep 1000 & wait\n(sleep 1000 &); exec sleep 1000"
const treeProcs = 7

func TestExitStatusAndSpawnError(t *testing.T) {
	env := append(os.Environ(), "CHILDINIT_MARK="+marker())
	for _, tc := range []struct {
		script string
		check  func(syscall.WaitStatus) bool
	}{
		{"exit 3", func(s syscall.WaitStatus) bool { return s.Exited() && s.ExitStatus() == 3 }},
		{"true", func(s syscall.WaitStatus) bool { return s.Exited() && s.ExitStatus() == 0 }},
		{"kill -TERM $$", func(s syscall.WaitStatus) bool { return s.Signaled() && s.Signal() == syscall.SIGTERM }},
	} {
		proc, ctl, err := start("/bin/sh", []string{"sh", "-c", tc.script}, env)
		if err != nil {
			t.Fatal(err)
		}
		st, err := ctl.Wait()
		if err != nil || !tc.check(st) {
			t.Errorf("%q: status %v (exited %v code %d signaled %v), %v", tc.script, st, st.Exited(), st.ExitStatus(), st.Signaled(), err)
		}
		ps, _ := proc.Wait()
		ctl.Close()
		t.Logf("%q: child status %#x, init exit %v", tc.script, uint32(st), ps)
	}
	_, _, err := start("/nonexistent/program", []string{"x"}, env)
	if err != syscall.ENOENT {
		t.Errorf("missing program: %v, want ENOENT", err)
	}
}

// TestGroupSignalReachesChild: the server signals the child's process group
// (the child is a session leader, as if started directly) and the init
// reports how the child died.
func TestGroupSignalReachesChild(t *testing.T) {
	mark := marker()
	t.Cleanup(func() { killAll(mark) })
	proc, ctl, err := start("/bin/sh", []string{"sh", "-c", "exec sleep 1000"}, append(os.Environ(), "CHILDINIT_MARK="+mark))
	if err != nil {
		t.Fatal(err)
	}
	waitCount(mark, func(n int) bool { return n >= 1 }, 5*time.Second)
	if err := syscall.Kill(-ctl.Pid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	st, err := ctl.Wait()
	if err != nil || !st.Signaled() || st.Signal() != syscall.SIGINT {
		t.Fatalf("status %v, %v; want killed by SIGINT", st, err)
	}
	if _, err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestKillTree: every descendant dies on request, setsid and daemons
// included.
func TestKillTree(t *testing.T) {
	mark := marker()
	t.Cleanup(func() { killAll(mark) })
	env := append(os.Environ(), "CHILDINIT_MARK="+mark)
	var procs []*os.Process
	var ctls []*Control
	for _, c := range strings.Split(trees, "\n") {
		proc, ctl, err := start("/bin/sh", []string{"sh", "-c", c}, env)
		if err != nil {
			t.Fatal(err)
		}
		procs, ctls = append(procs, proc), append(ctls, ctl)
	}
	if pids := waitCount(mark, func(n int) bool { return n >= treeProcs }, 5*time.Second); len(pids) < treeProcs {
		t.Fatalf("only %d of %d processes started", len(pids), treeProcs)
	}
	for _, ctl := range ctls {
		if err := ctl.KillTree(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		_, _ = p.Wait()
	}
	if left := waitCount(mark, func(n int) bool { return n == 0 }, 3*time.Second); len(left) > 0 {
		t.Fatalf("%d processes survived KillTree: %v", len(left), left)
	}
}

// TestServerSIGKILL: a stand-in server starts the trees under inits and is
// killed with SIGKILL; nothing it started may survive.
func TestServerSIGKILL(t *testing.T) {
	mark := marker()
	t.Cleanup(func() { killAll(mark) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "CHILDINIT_FAKE_SERVER="+trees, "CHILDINIT_MARK="+mark)
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
	// The marker is in the fake server's environment too; count only the
	// trees' processes.
	if pids := waitCount(mark, func(n int) bool { return n >= treeProcs+1+4 }, 5*time.Second); len(pids) < treeProcs+1+4 {
		t.Fatalf("only %d processes up (want server, 4 inits, %d in the trees)", len(pids), treeProcs)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if left := waitCount(mark, func(n int) bool { return n == 0 }, 5*time.Second); len(left) > 0 {
		var b strings.Builder
		for _, p := range left {
			cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			fmt.Fprintf(&b, "\n  %d: %s", p, bytes.ReplaceAll(cl, []byte{0}, []byte{' '}))
		}
		t.Fatalf("%d processes survived the server's SIGKILL:%s", len(left), b.String())
	}
}

// TestChildExitWithDaemonLeft: the child's status is reported at once even
// while a descendant it left behind still runs; the init stays to guard
// that descendant and kills it on request.
func TestChildExitWithDaemonLeft(t *testing.T) {
	mark := marker()
	t.Cleanup(func() { killAll(mark) })
	proc, ctl, err := start("/bin/sh", []string{"sh", "-c", "setsid sleep 1000 & exit 4"}, append(os.Environ(), "CHILDINIT_MARK="+mark))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var st syscall.WaitStatus
	go func() { st, err = ctl.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("no exit status while a descendant runs")
	}
	if err != nil || st.ExitStatus() != 4 {
		t.Fatalf("status %v, %v; want exit 4", st, err)
	}
	if pids := waitCount(mark, func(n int) bool { return n >= 2 }, 3*time.Second); len(pids) < 2 {
		t.Fatalf("want the init and the daemon alive, have %v", pids)
	}
	_ = ctl.KillTree()
	ps, _ := proc.Wait()
	if left := waitCount(mark, func(n int) bool { return n == 0 }, 3*time.Second); len(left) > 0 {
		t.Fatalf("survivors after KillTree: %v", left)
	}
	if ps.ExitCode() != 4 {
		t.Errorf("init exit code %d, want the child's 4", ps.ExitCode())
	}
}

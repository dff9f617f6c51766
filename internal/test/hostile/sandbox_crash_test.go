package hostile

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mountedAnywhere reports whether some process has path as a mount point.
func mountedAnywhere(path string) bool {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		f, err := os.Open(filepath.Join("/proc", p.Name(), "mountinfo"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == path {
				f.Close()
				return true
			}
		}
		f.Close()
	}
	return false
}

// A server SIGKILLed while a sandbox uses the mount points of missing
// protected paths (WORK/.git, .codex, .agents, .aws) cannot remove them;
// the next server to start does, once no sandbox has them mounted.
func TestKilledServerMountPointsCleaned(t *testing.T) {
	m := sbxModes[0]
	enterMode(t, m)
	fx := newFixture(t, m)
	state := "EXEC_SERVER_SANDBOX_STATE_DIR=" + t.TempDir()
	s := startSandboxServer(t, m, state)
	c := connect(t, s, fx)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := c.call(ctx, "process/start", map[string]any{
		"processId": "long", "argv": []string{"sleep", "1000"}, "cwd": fileURI(fx.WORK), "tty": false,
		"env": map[string]string{"PATH": "/usr/bin:/bin"}, "sandbox": c.procSbx,
	}, nil); err != nil {
		t.Fatal(err)
	}
	codex := fx.w(".codex")
	deadline := time.Now().Add(10 * time.Second)
	for !mountedAnywhere(codex) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never became the sandbox's mount point", codex)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	// The sandbox dies with its server (its init has a parent-death
	// signal); until then its mask must stay.
	deadline = time.Now().Add(20 * time.Second)
	for mountedAnywhere(codex) {
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox outlived its SIGKILLed server by 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var left []string
	for _, p := range fx.protected {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, filepath.Base(p))
		}
	}
	if len(left) == 0 {
		t.Fatal("the killed server left no mount point: the test proves nothing")
	}
	t.Logf("left by the killed server: %v", left)
	startSandboxServer(t, m, state) // cleans up before it listens
	for _, p := range fx.protected {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still on the host after a new server started", p)
		}
	}
}

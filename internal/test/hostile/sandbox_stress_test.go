package hostile

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// stressSeconds is how long each row of TestSandboxStress runs:
// SANDBOX_STRESS_SECONDS, else 15 s (the issue asks for 60: set it).
func stressSeconds() time.Duration {
	if v, err := strconv.Atoi(os.Getenv("SANDBOX_STRESS_SECONDS")); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return 15 * time.Second
}

// TestSandboxStress: four server processes of one user, each serving eight
// concurrent clients that run sandboxed commands and fs calls under codex's
// workspace-write policy on one shared workspace and on a directory
// standing in for /tmp as a project root (a temporary directory: the real
// /tmp is shared with everything else on the machine), while CPU hogs keep
// the machine loaded. No request may fail because another sandbox or
// server uses the same directories at the same time (the -32603 "mount
// …/.agents: protected path missing and its mount point could not be made"
// seen on a loaded machine), no write under a protected name or outside
// may get through, and once the servers ended (SIGTERM) nothing they made
// is left on the host.
func TestSandboxStress(t *testing.T) {
	for _, m := range sbxModes {
		t.Run(m.name, func(t *testing.T) {
			enterMode(t, m)
			sandboxStress(t, m)
		})
	}
}

type stressStats struct {
	fsOK, procOK, denied atomic.Int64
	mu                   sync.Mutex
	failures             []string
	holes                []string
}

func (s *stressStats) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failures) < 20 {
		s.failures = append(s.failures, fmt.Sprintf(format, args...))
	} else {
		s.failures = append(s.failures[:20], "…")
	}
}

func (s *stressStats) hole(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holes = append(s.holes, fmt.Sprintf(format, args...))
}

func sandboxStress(t *testing.T, m sbxMode) {
	const servers, workers = 4, 8
	fx := newFixture(t, m)
	tmp := filepath.Join(fx.P, "TMP") // the stand-in for /tmp
	if err := os.Mkdir(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	fx.own(t)
	secret := fx.o("secret.txt")
	before := fx.snapshot(t)

	// CPU hogs, bounded by the test.
	dur := stressSeconds()
	hogCtx, stopHogs := context.WithCancel(context.Background())
	defer stopHogs()
	var hogs []*exec.Cmd
	for range 4 {
		h := exec.CommandContext(hogCtx, "sh", "-c", "while :; do :; done")
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		hogs = append(hogs, h)
	}
	defer func() {
		stopHogs()
		for _, h := range hogs {
			_ = h.Wait()
		}
	}()

	var srvs []*server
	for range servers {
		srvs = append(srvs, startSandboxServer(t, m))
	}
	var st stressStats
	var maxLoad atomic.Uint64 // load average × 100
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile("/proc/loadavg"); err == nil {
				if f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64); err == nil {
					for v := uint64(f * 100); ; {
						old := maxLoad.Load()
						if v <= old || maxLoad.CompareAndSwap(old, v) {
							break
						}
					}
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	for i, s := range srvs {
		for w := range workers {
			c := connect(t, s, fx)
			wg.Add(1)
			go func() {
				defer wg.Done()
				stressWorker(c, fx, tmp, secret, fmt.Sprintf("s%dw%d", i, w), deadline, &st)
			}()
		}
	}
	wg.Wait()
	// An orderly end of every server: SIGTERM, then nothing of theirs may
	// stay on the host.
	for _, s := range srvs {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, s := range srvs {
		select {
		case <-s.done:
		case <-time.After(60 * time.Second):
			t.Errorf("a server did not exit within 60 s of SIGTERM")
		}
	}
	stopHogs()
	total := st.fsOK.Load() + st.procOK.Load() + st.denied.Load()
	t.Logf("%d servers × %d clients for %v: %d requests (%d fs, %d commands, %d refusals as expected), %d failures, peak load average %.2f",
		servers, workers, dur, total, st.fsOK.Load(), st.procOK.Load(), st.denied.Load(), len(st.failures), float64(maxLoad.Load())/100)
	for _, f := range st.failures {
		t.Errorf("FAIL: %s", f)
	}
	for _, h := range st.holes {
		t.Errorf("HOLE: %s", h)
	}
	if b, _ := os.ReadFile(secret); string(b) != "outside secret" {
		t.Errorf("HOLE: the outside secret changed: %q", b)
	}
	for _, root := range []string{fx.WORK, tmp} {
		for _, name := range []string{".git", ".codex", ".agents", ".aws"} {
			if _, err := os.Lstat(filepath.Join(root, name)); err == nil {
				t.Errorf("LEFTOVER: %s is on the host after every server ended", filepath.Join(root, name))
			}
		}
	}
	// The rest of the fixture (outside WORK) is as before.
	if d := fx.diff(before, fx.snapshot(t)); len(d) > 0 {
		var real []string
		for _, l := range d {
			if !strings.HasPrefix(l, "appeared: P/TMP/") && !strings.HasPrefix(l, "vanished: P/TMP/") && !strings.HasPrefix(l, "changed: P/TMP:") {
				real = append(real, l)
			}
		}
		if len(real) > 0 {
			t.Errorf("HOLE or LEFTOVER: the host changed outside the writable roots:\n  %s", strings.Join(real, "\n  "))
		}
	}
}

// stressWorker runs random sandboxed requests on one connection until the
// deadline. Requests that must succeed count a failure for any error;
// escape attempts count a hole when they succeed and a failure when they
// fail for another reason than the sandbox's refusal.
func stressWorker(c *sbxClient, fx *fixture, tmp, secret, id string, deadline time.Time, st *stressStats) {
	roots := []string{fx.WORK, tmp}
	for n := 0; time.Now().Before(deadline); n++ {
		root := roots[rand.IntN(len(roots))]
		fsSbx := fsContext(root, stressEntries())
		procSbx := procContext(root, stressEntries())
		file := filepath.Join(root, fmt.Sprintf("%s-%d", id, n%4))
		data := strings.Repeat("x", 4096)
		prot := filepath.Join(root, []string{".git", ".codex", ".agents", ".aws"}[rand.IntN(4)])
		switch op := rand.IntN(6); op {
		case 0, 1: // fs/writeFile, read it back, remove it
			err := c.fs("fs/writeFile", map[string]any{"path": fileURI(file), "dataBase64": base64.StdEncoding.EncodeToString([]byte(data)), "sandbox": fsSbx}, nil)
			if err != nil {
				st.fail("fs/writeFile %s: %v", file, err)
				continue
			}
			var res struct {
				DataBase64 string `json:"dataBase64"`
			}
			if err := c.fs("fs/readFile", map[string]any{"path": fileURI(file), "sandbox": fsSbx}, &res); err != nil {
				st.fail("fs/readFile %s: %v", file, err)
				continue
			}
			if err := c.fs("fs/remove", map[string]any{"path": fileURI(file), "force": true, "sandbox": fsSbx}, nil); err != nil {
				st.fail("fs/remove %s: %v", file, err)
				continue
			}
			st.fsOK.Add(3)
		case 2: // fs/createDirectory under a protected name: refused by the kernel
			err := c.fs("fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(prot, "hooks")), "recursive": true, "sandbox": fsSbx}, nil)
			switch {
			case err == nil:
				st.hole("fs/createDirectory %s/hooks succeeded", prot)
			case strings.Contains(err.Error(), "Read-only file system") || strings.Contains(err.Error(), "Permission denied"):
				st.denied.Add(1)
			default:
				st.fail("fs/createDirectory %s/hooks: %v (want a read-only refusal)", prot, err)
			}
		case 3: // a command writing in the root
			r := c.runIn(root, []string{"sh", "-c", "echo ok > " + filepath.Base(file) + " && cat " + filepath.Base(file) + " && rm " + filepath.Base(file)}, procSbx, false)
			if r.StartErr != nil || r.ExitCode != 0 || strings.TrimSpace(r.Output) != "ok" {
				st.fail("command in %s: %v", root, r)
				continue
			}
			st.procOK.Add(1)
		case 4: // a command trying the protected names and the outside
			r := c.runIn(root, []string{"sh", "-c", "mkdir -p " + filepath.Base(prot) + "/hooks 2>/dev/null && echo ESCAPED; " +
				"echo x > " + filepath.Base(prot) + "/config 2>/dev/null && echo ESCAPED; echo pwned > " + secret + " 2>/dev/null && echo ESCAPED; true"}, procSbx, false)
			switch {
			case r.StartErr != nil || r.ExitCode != 0:
				st.fail("probe command in %s: %v", root, r)
			case strings.Contains(r.Output, "ESCAPED"):
				st.hole("a command in %s wrote under %s or outside: %v", root, filepath.Base(prot), r)
			default:
				st.procOK.Add(1)
			}
		case 5: // /bin/true, the cheapest sandbox
			r := c.runIn(root, []string{"true"}, procSbx, false)
			if r.StartErr != nil || r.ExitCode != 0 {
				st.fail("true in %s: %v", root, r)
				continue
			}
			st.procOK.Add(1)
		}
	}
}

// stressEntries are codex's workspace-write entries without slash_tmp: the
// stand-in directory is the project root, and the machine's real /tmp,
// shared with every other test process, stays out of it.
func stressEntries() []any {
	var out []any
	for _, e := range workspaceWriteEntries() {
		if p, ok := e.(map[string]any)["path"].(map[string]any); ok {
			if v, ok := p["value"].(map[string]any); ok && v["kind"] == "slash_tmp" {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

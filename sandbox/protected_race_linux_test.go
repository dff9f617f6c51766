package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/internal/test/plantest"
	"github.com/execgo/exec-server/sandbox/policy"
)

// TestProtectedMissingRace: fs helpers and commands of one workspace, with
// .git and .codex missing, run at once while helpers and inits are killed
// at random. Plans are resolved as Resolve does (missing only if absent
// now: a concurrent sandbox's mount point makes the path look existing).
// No write under a protected name may get through, from either, and the
// host mount points go once everything is done.
// codexPlan resolves the workspace-write policy codex sends for ws now:
// its own read entries name .git and .codex (skipped when missing), so a
// protected name that exists, if only as a concurrent sandbox's mount
// point, comes from an entry, and one that is missing from protect.
func codexPlan(ws string) (*policy.Plan, error) {
	w := plantest.URI(ws)
	raw := plantest.Context([]string{plantest.Special("root", "read"), plantest.Special("project_roots", "write"),
		`{"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read","missing_path_behavior":"skip"}`,
		`{"path":{"type":"special","value":{"kind":"project_roots","subpath":".codex"}},"access":"read","missing_path_behavior":"skip"}`,
	}, `,"cwd":"`+w+`","workspaceRoots":["`+w+`"]`)
	p, err := policy.Parse([]byte(raw))
	if err != nil {
		return nil, err
	}
	return policy.Resolve(p, policy.Env{})
}

// TestProtectedMountPointOfConcurrentSandbox: a command resolved while a
// warm fs helper holds the mount point of the missing .git sees .git
// exist; when the helper goes, the command must still be unable to create
// .git/hooks on the host (it held no reference: the helper's release
// removed the directory, which unmounted the command's read-only bind of
// it, and mkdir went through the writable workspace).
func TestProtectedMountPointOfConcurrentSandbox(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	git := filepath.Join(ws, ".git")
	fsPlan, err := codexPlan(ws)
	if err != nil {
		t.Fatal(err)
	}
	if got := runOp(t, fsPlan, "write", filepath.Join(git, "x")); got != "EROFS" {
		t.Fatalf("fs write under the missing .git = %s", got)
	}
	if !isMountPoint(git) {
		t.Fatal("the warm fs helper holds no mount point for .git")
	}
	cmdPlan, err := codexPlan(ws) // .git exists now
	if err != nil {
		t.Fatal(err)
	}
	spec, err := Command(cmdPlan, "/bin/sh", []string{"sh", "-c", "while [ ! -e go ]; do sleep 0.01; done; mkdir -p .git/hooks && echo CREATED"}, nil, ws)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		r, w, _ := os.Pipe()
		null, _ := os.Open(os.DevNull)
		defer null.Close()
		proc, err := startSpecProcess(spec, []*os.File{null, w, w}, nil)
		w.Close()
		if err != nil {
			r.Close()
			spec.Release()
			done <- "start: " + err.Error()
			return
		}
		var out bytes.Buffer
		_, _ = out.ReadFrom(r)
		r.Close()
		st, _ := proc.Wait()
		spec.Release()
		done <- fmt.Sprintf("exit %d: %s", st.ExitCode(), out.String())
	}()
	// The fs helper goes (as when its idle time ends, or it dies): its
	// release must leave .git to the command.
	time.Sleep(200 * time.Millisecond) // the command's view is built
	closeIdle()
	for i := 0; ; i++ {
		protMu.Lock()
		e := protReg[git]
		released := e == nil || e.n == 1 && len(sandboxChildrenOf("run")) == 0
		protMu.Unlock()
		if released {
			break
		}
		if i == 500 {
			t.Fatal("the fs helper did not go")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if strings.Contains(res, "CREATED") || exists(filepath.Join(git, "hooks")) {
		t.Errorf("HOLE: the command created .git/hooks on the host: %s", res)
	}
	if err := os.Remove(filepath.Join(ws, "go")); err != nil {
		t.Fatal(err)
	}
	waitGone(t, git)
}

// TestProtectedMissingRace: fs helpers and commands of one workspace, with
// .git and .codex missing, run at once while helpers and inits are killed
// at random. Plans are resolved by Resolve from codex's policy: a
// concurrent sandbox's mount point makes a protected name look existing.
// No write under a protected name may get through, from either, and the
// host mount points go once everything is done.
func TestProtectedMissingRace(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	names := []string{".git", ".codex"}
	plan := func() *policy.Plan {
		p, err := codexPlan(ws)
		if err != nil {
			panic(err)
		}
		return p
	}
	// A write that got through leaves something other than the marker.
	leaked := func() string {
		for _, n := range names {
			ents, _ := os.ReadDir(filepath.Join(ws, n))
			for _, e := range ents {
				if e.Name() != protMadeMarker {
					return filepath.Join(n, e.Name())
				}
			}
		}
		return ""
	}
	var (
		stop              atomic.Bool
		wg                sync.WaitGroup
		mu                sync.Mutex
		holes             []string
		fsN, cmdN, killed atomic.Int64
	)
	hole := func(s string) {
		mu.Lock()
		holes = append(holes, s)
		mu.Unlock()
		stop.Store(true)
	}
	for range 2 {
		wg.Add(1)
		go func() { // fs calls
			defer wg.Done()
			for !stop.Load() {
				for _, n := range names {
					req, _ := json.Marshal(fsReq{"write", filepath.Join(ws, n, "x")})
					reply, f, err := Run(context.Background(), plan(), "test.probe", req)
					if f != nil {
						f.Close()
					}
					fsN.Add(1)
					if err == nil && string(reply) != "EROFS" && string(reply) != "ENOENT" {
						hole("fs write " + n + "/x: " + string(reply))
					}
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() { // commands
			defer wg.Done()
			null, _ := os.Open(os.DevNull)
			defer null.Close()
			for !stop.Load() {
				spec, err := Command(plan(), "/bin/sh", []string{"sh", "-c", "mkdir -p .git/hooks || mkdir .codex/x || exit 3"}, nil, ws)
				if err != nil {
					continue // fails closed
				}
				var out bytes.Buffer
				r, w, _ := os.Pipe()
				proc, err := startSpecProcess(spec, []*os.File{null, w, w}, nil)
				w.Close()
				if err != nil {
					r.Close()
					spec.Release()
					continue
				}
				_, _ = out.ReadFrom(r)
				r.Close()
				st, _ := proc.Wait()
				spec.Release()
				cmdN.Add(1)
				if st != nil && st.ExitCode() == 0 {
					hole("command exited 0: " + out.String())
				}
				if l := leaked(); l != "" {
					hole("the host has " + l + " (" + strings.TrimSpace(out.String()) + ")")
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // SIGKILL of this test's helpers and inits, at random
		defer wg.Done()
		for !stop.Load() {
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			for _, pid := range sandboxChildren() {
				if rand.IntN(3) == 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed.Add(1)
				}
			}
			if rand.IntN(10) == 0 {
				closeIdle()
			}
		}
	}()
	time.Sleep(3 * time.Second)
	stop.Store(true)
	wg.Wait()
	closeIdle()
	t.Logf("%d fs calls, %d commands, %d helpers or inits killed", fsN.Load(), cmdN.Load(), killed.Load())
	for _, h := range holes {
		t.Errorf("HOLE: %s", h)
	}
	if l := leaked(); l != "" {
		t.Errorf("HOLE: the host has %s", l)
	}
	for _, n := range names {
		waitGone(t, filepath.Join(ws, n))
	}
}

// sandboxChildren lists this process's children that are sandbox helpers
// or inits.
func sandboxChildren() []int { return sandboxChildrenOf("") }

// sandboxChildrenOf lists this process's sandbox children of mode ("run",
// "init"; "" for both).
func sandboxChildrenOf(mode string) []int {
	self := strconv.Itoa(os.Getpid())
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[1] != self {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if bytes.HasPrefix(cmdline, []byte("exec-server-sandbox\x00"+helperArg+"\x00"+mode)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestProtectedHeldByRemover: another server, removing its mount point of
// .git, holds it exclusively between the marker's unlink and the rmdir. A
// sandbox resolved then sees a plain directory; it must wait the remover
// out and make its own mount point, or fail, never bind a directory that
// is about to go (its rmdir would unmount the bind in the view).
func TestProtectedHeldByRemover(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	git := filepath.Join(ws, ".git")
	lockedDir := func() *os.File {
		t.Helper()
		if err := os.Mkdir(git, 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(git)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		return f
	}
	plan := func() *policy.Plan {
		t.Helper()
		p, err := codexPlan(ws)
		if err != nil {
			t.Fatal(err)
		}
		if m, ok := findMount(p, git); !ok || m.Missing || m.Access != policy.AccessRead {
			t.Fatalf(".git: %+v, %v", m, ok)
		}
		return p
	}
	// The remover is slow (longer than lockWait): fail closed.
	defer func(w time.Duration) { lockWait = w }(lockWait)
	lockWait = 300 * time.Millisecond
	other := lockedDir()
	if spec, err := Command(plan(), "/bin/true", []string{"true"}, nil, ws); err == nil {
		spec.Release()
		t.Error("a protected directory held exclusively by another server was used")
	}
	// The remover finishes (after the plan was resolved, which saw its
	// directory): the sandbox makes and holds its own.
	lockWait = 20 * time.Second
	p := plan()
	go func() {
		time.Sleep(5 * time.Millisecond)
		_ = os.Remove(git)
		other.Close()
	}()
	spec, err := Command(p, "/bin/true", []string{"true"}, nil, ws)
	if err != nil {
		t.Fatalf("after the remover finished: %v", err)
	}
	if !isMountPoint(git) {
		t.Error("no mount point of its own")
	}
	spec.Release()
	waitGone(t, git)
	other.Close()
}

// TestProtectedRemovalRetried: the last release finds the mount point
// locked for longer than removeMountPoint waits (a child forked at that
// moment shares the lock until it execs; on a loaded machine that takes a
// while): the removal is retried once the lock is free, not given up (the
// mount point stayed on the host for good).
func TestProtectedRemovalRetried(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	codex := filepath.Join(ws, ".codex")
	p := workspaceWrite(ws)
	p.Mounts = append(p.Mounts, policy.Mount{Path: codex, Access: policy.AccessRead, Protected: true, Missing: true, Dir: true})
	if got := runOp(t, p, "write", filepath.Join(codex, "x")); got != "EROFS" {
		t.Fatalf("write under the mask = %s", got)
	}
	child, err := os.Open(codex) // the forked child's shared lock
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	if err := unix.Flock(int(child.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	closeIdle()
	for i := 0; ; i++ { // the helper's release ran and found it locked
		protMu.Lock()
		_, held := protReg[codex]
		protMu.Unlock()
		if !held {
			break
		}
		if i == 500 {
			t.Fatal("the mount point is still held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if !isMountPoint(codex) {
		t.Fatal("removed although locked")
	}
	child.Close() // the child exec'ed
	waitGone(t, codex)
}

// TestResolveServerMountPoint: a protected name that is an exec-server's
// mount point (a concurrent sandbox's) resolves as the missing protected
// path it stands for, even with codex's read entry naming it; a real
// directory stays codex's read-only bind.
func TestResolveServerMountPoint(t *testing.T) {
	ws, _ := fixture(t)
	for _, n := range []string{".git", ".codex"} {
		if err := os.Mkdir(filepath.Join(ws, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", policy.MountPointMarker), nil, 0o400); err != nil {
		t.Fatal(err)
	}
	p, err := codexPlan(ws)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := findMount(p, filepath.Join(ws, ".git")); !ok || !m.Protected || !m.Missing || m.Access != policy.AccessRead {
		t.Errorf("a mount point .git: %+v, %v\n%s", m, ok, dump(p))
	}
	if m, ok := findMount(p, filepath.Join(ws, ".codex")); !ok || m.Protected || m.Missing || m.Access != policy.AccessRead {
		t.Errorf("a real .codex: %+v, %v\n%s", m, ok, dump(p))
	}
}

// TestProtectedRemovedWhileHeld: the mount point of a missing protected
// path goes while a warm helper holds it (the workspace's owner removes
// it: rm -rf, a test's cleanup). The next sandbox of this server must make
// and hold it again; reusing the entry started it without a mount point
// and failed it closed (-32603 "mount …/.codex: protected path missing and
// its mount point could not be made"), which a loaded machine (helpers
// warm for longer) turned into flaky tests.
func TestProtectedRemovedWhileHeld(t *testing.T) {
	needSandbox(t)
	ws, out := fixture(t)
	codex := filepath.Join(ws, ".codex")
	p := workspaceWrite(ws)
	p.Mounts = append(p.Mounts, policy.Mount{Path: codex, Access: policy.AccessRead, Protected: true, Missing: true, Dir: true})
	if got := runOp(t, p, "write", filepath.Join(codex, "x")); got != "EROFS" {
		t.Fatalf("write under the mask = %s", got)
	}
	if !isMountPoint(codex) {
		t.Fatal("the warm helper holds no mount point")
	}
	if err := os.RemoveAll(codex); err != nil {
		t.Fatal(err)
	}
	// Another plan (another helper), same protected path.
	q := workspaceWrite(ws)
	q.Mounts = append(q.Mounts, policy.Mount{Path: out, Access: policy.AccessRead, Dir: true},
		policy.Mount{Path: codex, Access: policy.AccessRead, Protected: true, Missing: true, Dir: true})
	policy.SortMounts(q.Mounts)
	if got := runOp(t, q, "write", filepath.Join(codex, "x")); got != "EROFS" {
		t.Errorf("write under the mask after the mount point went = %s", got)
	}
	closeIdle()
	waitGone(t, codex)
}

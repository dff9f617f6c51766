package hostile

// Helpers of the sandbox escape suite (sandbox_escape_test.go): a server per
// privilege mode (root, or dropped to an unprivileged uid), a fixture per
// case (a fresh parent P holding WORK, the writable root, and OUT, the
// outside), a snapshot of everything outside the writable roots taken
// before and after each case, policies exactly as codex sends them, and a
// small static probe program that makes the raw system calls a shell
// cannot (renameat2, MPTCP, vsock, ptrace, ...).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nobody is the unprivileged uid/gid the non-root matrix runs the server as.
const nobody = 65534

// sbxBaseDir is the directory all sandbox fixtures live in. It is NOT
// under /tmp: codex's workspace-write policy makes /tmp (slash_tmp)
// writable, so an "outside" directory under /tmp would be inside the
// policy. /var/tmp is the usual other temporary directory;
// SANDBOX_ESCAPE_TMP overrides it. It is shared by the top-level tests that
// run at a time (reference counted) and removed after the last one.
var (
	sbxMu      sync.Mutex
	sbxRefs    int
	sbxBaseDir string
	sbxProbe   string // the probe binary, 0755, runnable by nobody
	sbxServer  string // a copy of the server binary in a 0755 directory
	sbxNoTmp   bool   // the base is under /tmp: slash_tmp is dropped from policies
)

// sbxSetup prepares the base, the server copy and the probe for a
// top-level test, and removes them when the last such test ends.
func sbxSetup(t *testing.T) {
	t.Helper()
	sbxMu.Lock()
	defer sbxMu.Unlock()
	if sbxRefs == 0 {
		if err := sbxPrepare(); err != nil {
			if sbxBaseDir != "" {
				os.RemoveAll(sbxBaseDir)
				sbxBaseDir = ""
			}
			t.Fatalf("sandbox suite setup: %v", err)
		}
	}
	sbxRefs++
	t.Cleanup(func() {
		sbxMu.Lock()
		defer sbxMu.Unlock()
		if sbxRefs--; sbxRefs == 0 {
			if err := os.RemoveAll(sbxBaseDir); err != nil {
				t.Logf("removing %s: %v", sbxBaseDir, err)
			}
			sbxBaseDir = ""
		}
	})
}

func sbxPrepare() error {
	root := os.Getenv("SANDBOX_ESCAPE_TMP")
	if root == "" {
		root = "/var/tmp"
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		root = os.TempDir()
	}
	dir, err := os.MkdirTemp(root, "sbx-escape-")
	if err != nil {
		return err
	}
	sbxBaseDir = dir
	real, _ := filepath.EvalSymlinks(dir)
	sbxNoTmp = real == "/tmp" || strings.HasPrefix(real, "/tmp/")
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		return err
	}
	sbxServer = filepath.Join(bin, "exec-server")
	if err := copyFile(binary, sbxServer, 0o755); err != nil {
		return err
	}
	src := filepath.Join(bin, "probe.go")
	if err := os.WriteFile(src, []byte(probeSource), 0o644); err != nil {
		return err
	}
	sbxProbe = filepath.Join(bin, "probe")
	build := exec.Command("go", "build", "-trimpath", "-o", sbxProbe, src)
	build.Dir = bin
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the probe: %v\n%s", err, out)
	}
	if err := os.Chmod(sbxProbe, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "srvtmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	return os.Chmod(tmp, 0o1777)
}

func copyFile(from, to string, mode os.FileMode) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, mode)
}

// sbxMode is one row of the privilege matrix.
type sbxMode struct {
	name string
	uid  int // -1: the server runs as the test's own (root) user
}

var sbxModes = []sbxMode{{"root", -1}, {"nonroot", nobody}}

// userNSForbidden reports why an unprivileged user cannot create a user
// namespace here, or "" when it can: the probe, run as nobody, starts a
// child in a new user namespace (the clone is nobody's own).
func userNSForbidden() string {
	cmd := exec.Command(sbxProbe, "userns")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("the kernel forbids unprivileged user namespaces (uid %d: %v: %s)", nobody, err, strings.TrimSpace(string(out)))
	}
	return ""
}

// enterMode skips what the matrix row cannot run here.
func enterMode(t *testing.T, m sbxMode) {
	t.Helper()
	sbxSetup(t)
	if os.Getuid() != 0 {
		t.Skip("the sandbox matrix needs the test to run as root (to start the server as root and as an unprivileged uid)")
	}
	if m.uid >= 0 && os.Getenv("SANDBOX_ESCAPE_REFERENCE") != "" {
		t.Skip("the reference binary is run as root only (SANDBOX_ESCAPE_REFERENCE)")
	}
	if m.uid >= 0 {
		if why := userNSForbidden(); why != "" {
			t.Skip(why)
		}
	}
}

// startSandboxServer runs the server binary as mode's user with extra
// environment; it returns once the server printed its URL and kills it at
// the end of the test.
func startSandboxServer(t *testing.T, m sbxMode, env ...string) *server {
	t.Helper()
	cmd := exec.Command(sbxServer, "--listen", "ws://127.0.0.1:0", "--log-level", "warn")
	cmd.Dir = sbxBaseDir
	cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(sbxBaseDir, "srvtmp"))
	if ref := os.Getenv("SANDBOX_ESCAPE_REFERENCE"); ref != "" {
		// Calibration: the same cases against the reference (codex
		// exec-server), whose CODEX_HOME must not be under /tmp.
		home := filepath.Join(sbxBaseDir, fmt.Sprintf("codex-home-%d", fixtureSeq.Add(1)))
		if err := os.Mkdir(home, 0o700); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(ref, "exec-server", "--listen", "ws://127.0.0.1:0")
		cmd.Dir = sbxBaseDir
		cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(sbxBaseDir, "srvtmp"), "CODEX_HOME="+home)
	}
	cmd.Env = append(cmd.Env, env...)
	if m.uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.uid)}}
		cmd.Env = append(cmd.Env, "HOME=/nonexistent", "USER=nobody")
	}
	s := runServer(t, cmd, "server ("+m.name+")")
	if m.uid >= 0 {
		// The row is meaningful only if the server really is unprivileged.
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid()))
		if want := fmt.Sprintf("\nUid:\t%d\t%d\t%d\t%d\n", m.uid, m.uid, m.uid, m.uid); !strings.Contains(string(status), want) {
			t.Fatalf("the server does not run as uid %d:\n%s", m.uid, status)
		}
	}
	return s
}

// fixture is one case's world: P/WORK (writable root) and P/OUT (outside),
// with the fixtures in WORK pointing out.
type fixture struct {
	P, WORK, OUT string
	mode         sbxMode
	// protected are paths under WORK that must not change although WORK is
	// writable (protected subpaths, deny targets); missing ones must stay
	// missing.
	protected []string
	// mayChange are paths outside whose content may change by design
	// (the hard link of case 10); their inode may not.
	mayChange map[string]bool
	// fsEntries, when set by a case's setup, replace the workspace-write
	// entries of both policies (cwd and roots stay WORK).
	fsEntries []any
}

var fixtureSeq atomic.Int64

// newFixture builds a fresh fixture:
//
//	P/in.txt                 "parent decoy"
//	P/OUT/secret.txt         "outside secret"
//	P/OUT/hl.txt             "hard linked", also WORK/hardlink.txt
//	P/OUT/dir/f.txt, P/OUT/victim/v.txt, P/OUT/fifo
//	P/WORK/in.txt            "inside"
//	P/WORK/sub/              a directory
//	P/WORK/linkdir  -> P/OUT            (absolute)
//	P/WORK/linkfile -> P/OUT/secret.txt (absolute)
//	P/WORK/rellink  -> ../OUT           (relative)
//	P/WORK/chain1 -> chain2 -> P/OUT    (chained dir)
//	P/WORK/chainf1 -> chainf2 -> P/OUT/secret.txt
//	P/WORK/fifo              a FIFO
//
// Everything belongs to the mode's user, so that for a non-root server the
// outside is writable by plain permissions and only the sandbox stops it.
func newFixture(t *testing.T, m sbxMode) *fixture {
	t.Helper()
	P, err := os.MkdirTemp(sbxBaseDir, fmt.Sprintf("case%03d-", fixtureSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(P); err != nil {
			t.Logf("cleanup of %s: %v", P, err)
		}
	})
	fx := &fixture{P: P, WORK: filepath.Join(P, "WORK"), OUT: filepath.Join(P, "OUT"), mode: m, mayChange: map[string]bool{}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(P, 0o755))
	must(os.Mkdir(fx.WORK, 0o755))
	must(os.Mkdir(fx.OUT, 0o755))
	must(os.WriteFile(filepath.Join(P, "in.txt"), []byte("parent decoy"), 0o644))
	must(os.WriteFile(filepath.Join(fx.OUT, "secret.txt"), []byte("outside secret"), 0o644))
	must(os.WriteFile(filepath.Join(fx.OUT, "hl.txt"), []byte("hard linked"), 0o644))
	must(os.MkdirAll(filepath.Join(fx.OUT, "dir"), 0o755))
	must(os.WriteFile(filepath.Join(fx.OUT, "dir", "f.txt"), []byte("outside dir file"), 0o644))
	must(os.MkdirAll(filepath.Join(fx.OUT, "victim"), 0o755))
	must(os.WriteFile(filepath.Join(fx.OUT, "victim", "v.txt"), []byte("victim"), 0o644))
	must(syscall.Mkfifo(filepath.Join(fx.OUT, "fifo"), 0o666))
	must(os.WriteFile(filepath.Join(fx.WORK, "in.txt"), []byte("inside"), 0o644))
	must(os.Mkdir(filepath.Join(fx.WORK, "sub"), 0o755))
	must(os.Link(filepath.Join(fx.OUT, "hl.txt"), filepath.Join(fx.WORK, "hardlink.txt")))
	must(os.Symlink(fx.OUT, filepath.Join(fx.WORK, "linkdir")))
	must(os.Symlink(filepath.Join(fx.OUT, "secret.txt"), filepath.Join(fx.WORK, "linkfile")))
	must(os.Symlink("../OUT", filepath.Join(fx.WORK, "rellink")))
	must(os.Symlink("chain2", filepath.Join(fx.WORK, "chain1")))
	must(os.Symlink(fx.OUT, filepath.Join(fx.WORK, "chain2")))
	must(os.Symlink("chainf2", filepath.Join(fx.WORK, "chainf1")))
	must(os.Symlink(filepath.Join(fx.OUT, "secret.txt"), filepath.Join(fx.WORK, "chainf2")))
	must(syscall.Mkfifo(filepath.Join(fx.WORK, "fifo"), 0o666))
	for _, name := range []string{".git", ".codex", ".agents", ".aws"} {
		fx.protected = append(fx.protected, filepath.Join(fx.WORK, name))
	}
	fx.own(t)
	return fx
}

// own gives the whole fixture to the mode's user (a no-op for root).
func (fx *fixture) own(t *testing.T) {
	t.Helper()
	if fx.mode.uid < 0 {
		return
	}
	err := filepath.WalkDir(fx.P, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, fx.mode.uid, fx.mode.uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// w and o join under WORK and OUT.
func (fx *fixture) w(parts ...string) string {
	return filepath.Join(append([]string{fx.WORK}, parts...)...)
}
func (fx *fixture) o(parts ...string) string {
	return filepath.Join(append([]string{fx.OUT}, parts...)...)
}

// fileURI is the file: URI of an absolute host path.
func fileURI(p string) string { return (&url.URL{Scheme: "file", Path: p}).String() }

// snapEntry is what a snapshot records of one path.
type snapEntry struct {
	Mode         fs.FileMode
	Size         int64
	Mtime, Ctime int64
	Ino, Nlink   uint64
	UID, GID     uint32
	Link         string
	Sum          [32]byte
}

type snapshot map[string]snapEntry

// snapshot records every path under P except the writable root's contents,
// which are free to change; WORK itself is recorded by type and inode, and
// the protected paths under it fully (a missing one is recorded missing).
func (fx *fixture) snapshot(t *testing.T) snapshot {
	t.Helper()
	s := snapshot{}
	err := filepath.WalkDir(fx.P, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if p == fx.WORK {
			var st syscall.Stat_t
			if err := syscall.Lstat(p, &st); err != nil {
				return err
			}
			s[p] = snapEntry{Mode: fs.ModeDir, Ino: st.Ino}
			for _, pr := range fx.protected {
				if err := snapTree(pr, s); err != nil {
					return err
				}
			}
			return fs.SkipDir
		}
		return snapOne(p, s)
	})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s
}

// snapTree records root and, when it is a real directory, everything under
// it; a missing root is simply absent from the map.
func snapTree(root string, s snapshot) error {
	if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		return snapOne(p, s)
	})
}

func snapOne(p string, s snapshot) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil
	}
	e := snapEntry{
		Mode: fi.Mode(), Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(),
		Ino: st.Ino, Nlink: uint64(st.Nlink), UID: st.Uid, GID: st.Gid,
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Link, _ = os.Readlink(p)
	case fi.Mode().IsRegular() && st.Size <= 1<<20:
		if data, err := os.ReadFile(p); err == nil {
			e.Sum = sha256.Sum256(data)
		}
	}
	s[p] = e
	return nil
}

// diff lists what changed between two snapshots, allowing content changes
// (never an inode change) of the mayChange paths.
func (fx *fixture) diff(before, after snapshot) []string {
	var out []string
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		b, okb := before[k]
		a, oka := after[k]
		rel, _ := filepath.Rel(fx.P, k)
		switch {
		case !okb:
			out = append(out, fmt.Sprintf("appeared: P/%s (%v, %d bytes)", rel, a.Mode, a.Size))
		case !oka:
			out = append(out, fmt.Sprintf("vanished: P/%s", rel))
		case fx.mayChange[k]:
			if a.Ino != b.Ino {
				out = append(out, fmt.Sprintf("replaced (inode %d -> %d): P/%s", b.Ino, a.Ino, rel))
			}
		case k == fx.o("hl.txt") && a.Nlink < b.Nlink && !exists(fx.w("hardlink.txt")):
			// Unlinking WORK/hardlink.txt, a name inside the writable
			// root, lowers the shared inode's link count: not an escape.
			if b.Ino != a.Ino || b.Sum != a.Sum || b.Mode != a.Mode || b.Size != a.Size {
				out = append(out, fmt.Sprintf("changed: P/%s: %s", rel, entryDiff(b, a)))
			}
		case a != b:
			out = append(out, fmt.Sprintf("changed: P/%s: %s", rel, entryDiff(b, a)))
		}
	}
	return out
}

func entryDiff(b, a snapEntry) string {
	var d []string
	if a.Mode != b.Mode {
		d = append(d, fmt.Sprintf("mode %v->%v", b.Mode, a.Mode))
	}
	if a.Size != b.Size {
		d = append(d, fmt.Sprintf("size %d->%d", b.Size, a.Size))
	}
	if a.Sum != b.Sum {
		d = append(d, "content")
	}
	if a.Mtime != b.Mtime {
		d = append(d, "mtime")
	}
	if a.Ctime != b.Ctime {
		d = append(d, "ctime (metadata: chmod/chown/xattr/link count)")
	}
	if a.Ino != b.Ino {
		d = append(d, fmt.Sprintf("inode %d->%d", b.Ino, a.Ino))
	}
	if a.Nlink != b.Nlink {
		d = append(d, fmt.Sprintf("nlink %d->%d", b.Nlink, a.Nlink))
	}
	if a.UID != b.UID || a.GID != b.GID {
		d = append(d, fmt.Sprintf("owner %d:%d->%d:%d", b.UID, b.GID, a.UID, a.GID))
	}
	if a.Link != b.Link {
		d = append(d, fmt.Sprintf("link %q->%q", b.Link, a.Link))
	}
	return strings.Join(d, ", ")
}

// checkHost fails the test with HOLE when the host outside the writable
// roots differs from before. Mount points of missing protected paths may
// stay a moment after a reply (a warm helper keeps them while it waits for
// its next call, and its reaping on a loaded machine takes a while): a
// difference that clears within 20 s passes (the time is logged when over
// 2 s: a figure, not a verdict), one that stays is a LEFTOVER or a HOLE.
func (fx *fixture) checkHost(t *testing.T, before snapshot) {
	t.Helper()
	start := time.Now()
	var first []string
	for {
		d := fx.diff(before, fx.snapshot(t))
		waited := time.Since(start)
		if len(d) == 0 {
			if waited > 2*time.Second {
				t.Logf("slow: the host outside the writable roots was restored %v after the case:\n  %s", waited.Round(10*time.Millisecond), strings.Join(first, "\n  "))
			}
			return
		}
		if first == nil {
			first = d
		}
		if waited > 20*time.Second {
			if fx.onlyMountPoints(d) {
				t.Errorf("LEFTOVER: mount points of missing protected paths stayed on the host (the spec: nothing left afterwards):\n  %s", strings.Join(d, "\n  "))
			} else {
				t.Errorf("HOLE: the host changed outside the writable roots:\n  %s", strings.Join(d, "\n  "))
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// onlyMountPoints reports whether every difference is a protected name
// of WORK that appeared, empty but for the server's marker: a mount point
// of a missing protected path left behind. Anything else in it (.git/hooks)
// is a write that got through: a HOLE.
func (fx *fixture) onlyMountPoints(d []string) bool {
	for _, line := range d {
		ok := false
		for _, name := range []string{".git", ".codex", ".agents", ".aws"} {
			p := "appeared: P/WORK/" + name
			if strings.HasPrefix(line, p+" ") || strings.HasPrefix(line, p+"/.exec-server-sandbox-made ") {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Policies, exactly as codex 0.169 sends them.

func special(kind string) map[string]any {
	return map[string]any{"type": "special", "value": map[string]any{"kind": kind}}
}

func entry(path map[string]any, access string) map[string]any {
	return map[string]any{"path": path, "access": access}
}

func pathEntry(p, access string) map[string]any {
	return entry(map[string]any{"type": "path", "path": fileURI(p)}, access)
}

// workspaceWriteEntries are codex's -s workspace-write entries.
func workspaceWriteEntries() []any {
	e := []any{
		entry(special("root"), "read"),
		entry(special("project_roots"), "write"),
	}
	if !sbxNoTmp {
		e = append(e, entry(special("slash_tmp"), "write"))
	}
	e = append(e, entry(special("tmpdir"), "write"))
	for _, sub := range []string{".git", ".agents", ".codex", ".aws"} {
		e = append(e, map[string]any{
			"path":                  map[string]any{"type": "special", "value": map[string]any{"kind": "project_roots", "subpath": sub}},
			"access":                "read",
			"missing_path_behavior": "skip",
		})
	}
	return e
}

// fsContext is the sandbox codex puts on fs/writeFile, fs/createDirectory
// and fs/remove; procContext the one on process/start.
func fsContext(work string, entries []any) map[string]any {
	return map[string]any{
		"permissions": map[string]any{"type": "managed", "file_system": map[string]any{"type": "restricted", "entries": entries}, "network": "restricted"},
		"cwd":         fileURI(work),
		"policyContext": map[string]any{
			"cwd": fileURI(work), "workspaceRoots": []string{fileURI(work)},
		},
		"workspaceRoots":      []string{fileURI(work)},
		"userHomeDir":         "file:///root",
		"windowsSandboxLevel": "disabled",
		"useLegacyLandlock":   false,
	}
}

func procContext(work string, entries []any) map[string]any {
	return map[string]any{
		"permissions":                     map[string]any{"type": "managed", "file_system": map[string]any{"type": "restricted", "entries": entries}, "network": "restricted"},
		"cwd":                             fileURI(work),
		"workspaceRoots":                  []string{fileURI(work)},
		"windowsSandboxLevel":             "disabled",
		"windowsSandboxProxySettingsMode": "reconcile",
		"useLegacyLandlock":               false,
	}
}

// sbxClient is one connection of a case, with the fixture's policies.
type sbxClient struct {
	*client
	fx      *fixture
	srv     *server
	fsSbx   map[string]any // sandbox for fs calls
	procSbx map[string]any // sandbox for process/start
	procSeq atomic.Int64
}

func connect(t *testing.T, s *server, fx *fixture) *sbxClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := dial(ctx, t, s.url)
	cl.handshake(ctx, t)
	return &sbxClient{client: cl, fx: fx, srv: s,
		fsSbx: fsContext(fx.WORK, workspaceWriteEntries()), procSbx: procContext(fx.WORK, workspaceWriteEntries())}
}

// opTimeout bounds every single call: a sandboxed operation answers within
// it or the case fails (a hang is a failure, never a wait). Generous: a
// hang guard, not a latency bound (TestSandboxStress runs 32 clients
// beside CPU hogs, at load averages of 30 to 40 on 2 cores).
const opTimeout = 60 * time.Second

// fs sends an fs method with the case's sandbox (sbx nil: the default fs
// context; pass noSandbox to send none).
func (c *sbxClient) fs(method string, params map[string]any, result any) error {
	if _, ok := params["sandbox"]; !ok {
		params["sandbox"] = c.fsSbx
	}
	if params["sandbox"] == nil {
		delete(params, "sandbox")
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return c.call(ctx, method, params, result)
}

func (c *sbxClient) writeFile(p, data string) error {
	return c.fs("fs/writeFile", map[string]any{"path": fileURI(p), "dataBase64": base64.StdEncoding.EncodeToString([]byte(data))}, nil)
}

func (c *sbxClient) writeURI(uri, data string) error {
	return c.fs("fs/writeFile", map[string]any{"path": uri, "dataBase64": base64.StdEncoding.EncodeToString([]byte(data))}, nil)
}

func (c *sbxClient) readFile(p string) (string, error) {
	var res struct {
		DataBase64 string `json:"dataBase64"`
	}
	err := c.fs("fs/readFile", map[string]any{"path": fileURI(p)}, &res)
	data, _ := base64.StdEncoding.DecodeString(res.DataBase64)
	return string(data), err
}

func (c *sbxClient) mkdir(p string, recursive bool) error {
	return c.fs("fs/createDirectory", map[string]any{"path": fileURI(p), "recursive": recursive}, nil)
}

func (c *sbxClient) remove(p string, recursive, force bool) error {
	return c.fs("fs/remove", map[string]any{"path": fileURI(p), "recursive": recursive, "force": force}, nil)
}

func (c *sbxClient) copy(from, to string, recursive bool) error {
	return c.fs("fs/copy", map[string]any{"sourcePath": fileURI(from), "destinationPath": fileURI(to), "recursive": recursive}, nil)
}

// procResult is what a finished process reported.
type procResult struct {
	StartErr      error
	SandboxType   string
	Output        string // stdout and stderr, interleaved
	ExitCode      int
	SandboxDenied bool
	TimedOut      bool
}

func (r procResult) String() string {
	if r.StartErr != nil {
		return "process/start: " + r.StartErr.Error()
	}
	return fmt.Sprintf("exit %d sandboxDenied=%v sandboxType=%s output %q", r.ExitCode, r.SandboxDenied, r.SandboxType, strings.TrimSpace(r.Output))
}

// run starts argv in WORK under the case's process sandbox (or sbx when
// given) and collects its output, exit code and sandboxDenied through
// process/read until it is closed.
func (c *sbxClient) run(argv []string, sbx map[string]any) procResult {
	return c.runIn(c.fx.WORK, argv, sbx, false)
}

func (c *sbxClient) runIn(cwd string, argv []string, sbx map[string]any, tty bool) procResult {
	if sbx == nil {
		sbx = c.procSbx
	}
	id := fmt.Sprintf("sbx-%d", c.procSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var start struct {
		SandboxType string `json:"sandboxType"`
	}
	err := c.call(ctx, "process/start", map[string]any{
		"processId": id, "argv": argv, "cwd": fileURI(cwd), "tty": tty, "pipeStdin": false,
		"env":     map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"},
		"sandbox": sbx,
	}, &start)
	if err != nil {
		return procResult{StartErr: err}
	}
	r := procResult{SandboxType: start.SandboxType, ExitCode: -1}
	var out bytes.Buffer
	after := uint64(0)
	for {
		var res struct {
			Chunks []struct {
				Chunk []byte `json:"chunk"`
			} `json:"chunks"`
			NextSeq       uint64 `json:"nextSeq"`
			Exited        bool   `json:"exited"`
			ExitCode      *int   `json:"exitCode"`
			Closed        bool   `json:"closed"`
			SandboxDenied bool   `json:"sandboxDenied"`
		}
		if err := c.call(ctx, "process/read", map[string]any{"processId": id, "afterSeq": after, "waitMs": 1000}, &res); err != nil {
			r.TimedOut = ctx.Err() != nil
			r.Output = out.String()
			if !r.TimedOut {
				r.StartErr = fmt.Errorf("process/read: %w", err)
			}
			_ = c.call(context.Background(), "process/terminate", map[string]any{"processId": id}, nil)
			return r
		}
		for _, ch := range res.Chunks {
			out.Write(ch.Chunk)
		}
		if res.NextSeq > 0 {
			after = res.NextSeq - 1
		}
		if res.ExitCode != nil {
			r.ExitCode = *res.ExitCode
		}
		r.SandboxDenied = res.SandboxDenied
		if res.Closed {
			r.Output = out.String()
			return r
		}
	}
}

// Expectations. A HOLE is an escape (the operation did what the sandbox
// must prevent); a mismatch is a refusal with another code or text than
// the spec's (parity, not safety).

// rpcCode returns the JSON-RPC code of err, or 0.
func rpcCode(err error) int {
	var e *rpcError
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// wantOK fails unless the call succeeded.
func wantOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("FAIL: %s: want success, got %v", what, err)
	}
}

// wantDenied fails with HOLE when the call succeeded and with mismatch
// when its code or message is not the expected one (msg "" skips the
// message check).
func wantDenied(t *testing.T, what string, err error, code int, msg string) {
	t.Helper()
	if err == nil {
		t.Errorf("HOLE: %s succeeded; want %d %q", what, code, msg)
		return
	}
	if rpcCode(err) != code || (msg != "" && !strings.Contains(err.Error(), msg)) {
		t.Errorf("mismatch: %s: got %v; want code %d with %q", what, err, code, msg)
		return
	}
	t.Logf("observed: %s: %v", what, err)
}

// wantRefused accepts any of codes (the spec allows either), and fails
// with HOLE only on success.
func wantRefused(t *testing.T, what string, err error, codes ...int) {
	t.Helper()
	if err == nil {
		t.Errorf("HOLE: %s succeeded; want an error %v", what, codes)
		return
	}
	for _, c := range codes {
		if rpcCode(err) == c {
			t.Logf("observed: %s: %v", what, err)
			return
		}
	}
	t.Errorf("mismatch: %s: got %v; want one of codes %v", what, err, codes)
}

// EROFS is what a write outside the writable roots meets (the mount layer).
const erofs = "Read-only file system"

// wantProcOK fails unless the process ran under the sandbox and exited 0.
func wantProcOK(t *testing.T, what string, r procResult) {
	t.Helper()
	if r.StartErr != nil || r.TimedOut || r.ExitCode != 0 {
		t.Errorf("FAIL: %s: want exit 0 under the sandbox, got %v", what, r)
		return
	}
	if r.SandboxType != "linuxSeccomp" {
		t.Errorf("mismatch: %s: sandboxType %q, want linuxSeccomp", what, r.SandboxType)
	}
}

// wantProcDenied fails with HOLE when the process exited 0, and with
// mismatch when it did not run sandboxed or sandboxDenied is not set.
// A start refusal is reported as FAIL: the command must run, confined.
func wantProcDenied(t *testing.T, what string, r procResult, denied bool) {
	t.Helper()
	switch {
	case r.StartErr != nil:
		t.Errorf("FAIL: %s: %v (the command must start, confined)", what, r.StartErr)
	case r.TimedOut:
		t.Errorf("FAIL: %s: no exit within %v: %v", what, opTimeout, r)
	case r.ExitCode == 0:
		t.Errorf("HOLE: %s exited 0: %v", what, r)
	case r.SandboxType != "linuxSeccomp":
		t.Errorf("mismatch: %s: sandboxType %q, want linuxSeccomp", what, r.SandboxType)
	case denied && !r.SandboxDenied:
		t.Errorf("mismatch: %s: sandboxDenied false: %v", what, r)
	default:
		t.Logf("observed: %s: %v", what, r)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// statDeep stats base/comps... one component at a time (the whole path
// may be longer than PATH_MAX).
func statDeep(base string, comps []string, st *unix.Stat_t) error {
	fd, err := syscall.Open(base, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	for i, comp := range comps {
		if i == len(comps)-1 {
			err := unix.Fstatat(fd, comp, st, unix.AT_SYMLINK_NOFOLLOW)
			syscall.Close(fd)
			return err
		}
		next, err := unix.Openat(fd, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		syscall.Close(fd)
		if err != nil {
			return err
		}
		fd = next
	}
	syscall.Close(fd)
	return nil
}

// mustNotExist fails with HOLE when p exists on the host.
func mustNotExist(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); err == nil {
		t.Errorf("HOLE: %s exists on the host", p)
	}
}

// probe returns the argv running the probe program with op and args.
func probeCmd(op string, args ...string) []string {
	return append([]string{sbxProbe, op}, args...)
}

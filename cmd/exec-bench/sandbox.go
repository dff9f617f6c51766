package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/protocol"
)

// The sandboxed workloads send what codex sends in `-s workspace-write`
// (as internal/test/interop/codex_test.go observes): a managed, restricted policy with the
// workspace writable, on process/start and fs/writeFile.

// sandboxWork is a workspace for the sandboxed workloads, with a home for
// the reference's CODEX_HOME beside it. Both are outside the temp dir:
// the reference will not set up its sandbox helper with CODEX_HOME under
// it, and under workspace-write /tmp is writable anyway, so a workspace
// there would not be what codex users have.
type sandboxWork struct {
	root string
	work string
	home string // CODEX_HOME for the reference
}

func newSandboxWork() (*sandboxWork, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return nil, fmt.Errorf("a scratch dir outside the temp dir: %w", err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(base, "exec-bench-sandbox-")
	if err != nil {
		return nil, err
	}
	s := &sandboxWork{root: root, work: filepath.Join(root, "work"), home: filepath.Join(root, "codex-home")}
	for _, d := range []string{s.work, s.home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			os.RemoveAll(root)
			return nil, err
		}
	}
	return s, nil
}

func (s *sandboxWork) remove() { _ = os.RemoveAll(s.root) }

// permissions is codex 0.169's workspace-write permission profile.
func workspaceWritePermissions() map[string]any {
	special := func(kind, subpath string) map[string]any {
		v := map[string]any{"kind": kind}
		if subpath != "" {
			v["subpath"] = subpath
		}
		return map[string]any{"type": "special", "value": v}
	}
	entries := []any{
		map[string]any{"path": special("root", ""), "access": "read"},
		map[string]any{"path": special("project_roots", ""), "access": "write"},
		map[string]any{"path": special("slash_tmp", ""), "access": "write"},
		map[string]any{"path": special("tmpdir", ""), "access": "write"},
	}
	for _, sub := range []string{".git", ".agents", ".codex", ".aws"} {
		entries = append(entries, map[string]any{"path": special("project_roots", sub), "access": "read", "missing_path_behavior": "skip"})
	}
	return map[string]any{"type": "managed", "network": "restricted",
		"file_system": map[string]any{"type": "restricted", "entries": entries}}
}

// processSandbox is the sandbox object codex puts on process/start.
func (s *sandboxWork) processSandbox() map[string]any {
	uri := fileuri.FromPath(s.work)
	return map[string]any{"permissions": workspaceWritePermissions(), "cwd": uri, "workspaceRoots": []string{uri},
		"windowsSandboxLevel": "disabled", "windowsSandboxProxySettingsMode": "reconcile", "useLegacyLandlock": false}
}

// fsSandbox is the sandbox object codex puts on a mutating fs call.
func (s *sandboxWork) fsSandbox() map[string]any {
	uri := fileuri.FromPath(s.work)
	home, _ := os.UserHomeDir()
	return map[string]any{"permissions": workspaceWritePermissions(), "cwd": uri,
		"policyContext":  map[string]any{"cwd": uri, "workspaceRoots": []string{uri}},
		"workspaceRoots": []string{uri}, "userHomeDir": fileuri.FromPath(home),
		"windowsSandboxLevel": "disabled", "useLegacyLandlock": false}
}

// startSandboxed makes a workspace for one side and starts its server
// for the sandboxed workloads, with a protocol-level client (the SDK sends
// no sandbox policies): the reference gets CODEX_HOME outside the temp
// dir. Each side has its own workspace: a sandbox may briefly create mount
// points for missing protected paths (W/.git, W/.codex) in it, which the
// other server would see come and go.
func startSandboxed(ctx context.Context, sd side, tr transportKind) (*sandboxWork, *server, *rawConn, error) {
	sw, err := newSandboxWork()
	if err != nil {
		return nil, nil, nil, err
	}
	if sd.ref {
		sd.env = append(os.Environ(), "CODEX_HOME="+sw.home, "RUST_LOG=error")
	}
	srv, err := sd.start(ctx, tr)
	if err != nil {
		sw.remove()
		return nil, nil, nil, err
	}
	c, err := srv.dialRaw(ctx)
	if err != nil {
		srv.close()
		sw.remove()
		return nil, nil, nil, err
	}
	return sw, srv, c, nil
}

// sandbox-writeFile: fs/writeFile of 4 KiB into the workspace under the
// workspace-write policy, one at a time. ms per call.
func runSandboxWriteFile(cfg *config, sides []side, tr transportKind) []*row {
	st := interleave(cfg, sides, tr, cfg.sandboxN, 5, func(ctx context.Context, sd side) (*runner, error) {
		sw, srv, c, err := startSandboxed(ctx, sd, tr)
		if err != nil {
			return nil, err
		}
		data := make([]byte, 4<<10)
		_, _ = rand.Read(data)
		path := filepath.Join(sw.work, "bench-"+sd.name+".bin")
		params, err := json.Marshal(map[string]any{"path": fileuri.FromPath(path),
			"dataBase64": base64.StdEncoding.EncodeToString(data), "sandbox": sw.fsSandbox()})
		if err != nil {
			c.Close()
			srv.close()
			sw.remove()
			return nil, err
		}
		var next int
		r := &runner{close: func() { c.Close(); srv.close(); sw.remove() }}
		r.take = func(n int) ([]float64, error) {
			ctx := timeout(time.Minute)
			xs, err := r.timedRetry(n, &next, func(int) error {
				return c.call(ctx, protocol.MethodFsWriteFile, json.RawMessage(params), nil)
			})
			if err == nil && len(xs) > 0 {
				if got, rerr := os.ReadFile(path); rerr != nil || !bytes.Equal(got, data) {
					return xs, fmt.Errorf("fs/writeFile: the file on disk differs (%d bytes, %v)", len(got), rerr)
				}
			}
			return xs, err
		}
		return settle(r, sd), nil
	})
	reportRaces("sandbox-writeFile", tr)
	return []*row{mkrow("sandbox-writeFile", "latency", "ms", false, tr, st)}
}

// sandbox-spawn: /bin/true under the workspace-write policy,
// process/start → process/closed, one at a time. ms per round trip. The
// first start must answer sandboxType linuxSeccomp, so a server that
// quietly ran the command unconfined cannot score.
func runSandboxSpawn(cfg *config, sides []side, tr transportKind) []*row {
	st := interleave(cfg, sides, tr, cfg.sandboxN, 5, func(ctx context.Context, sd side) (*runner, error) {
		sw, srv, c, err := startSandboxed(ctx, sd, tr)
		if err != nil {
			return nil, err
		}
		sandbox := sw.processSandbox()
		start := func(ctx context.Context, id string) (string, error) {
			p := map[string]any{"processId": id, "argv": []string{"/bin/true"}, "cwd": fileuri.FromPath(sw.work),
				"env": map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}, "tty": false, "sandbox": sandbox}
			var res struct {
				SandboxType string `json:"sandboxType"`
			}
			if err := c.call(ctx, protocol.MethodProcessStart, p, &res); err != nil {
				return "", err
			}
			code, err := c.waitClosed(ctx, id)
			if err == nil && code != 0 {
				err = fmt.Errorf("/bin/true exited %d in the sandbox", code)
			}
			return res.SandboxType, err
		}
		if typ, err := start(timeout(30*time.Second), "sb0"); err != nil || typ != "linuxSeccomp" {
			c.Close()
			srv.close()
			sw.remove()
			if err == nil {
				err = fmt.Errorf("process/start answered sandboxType %q, want linuxSeccomp", typ)
			}
			return nil, err
		}
		var next int
		r := &runner{close: func() { c.Close(); srv.close(); sw.remove() }}
		r.take = func(n int) ([]float64, error) {
			ctx := timeout(time.Minute)
			return r.timedRetry(n, &next, func(i int) error {
				_, err := start(ctx, fmt.Sprintf("sb%d", i))
				return err
			})
		}
		return settle(r, sd), nil
	})
	reportRaces("sandbox-spawn", tr)
	return []*row{mkrow("sandbox-spawn", "latency", "ms", false, tr, st)}
}

// settle makes our side wait, after its share of a round, for its warm
// sandbox helpers to go (they idle 0.5 s) before the reference's share: a
// helper holds mount points of missing protected paths, /tmp/.git among
// them (slash_tmp is a writable root), and a reference that resolves its
// policy while one exists and binds it after it went fails
// ("bwrap: Can't get type of source /tmp/.git"). The wait is not sampled.
func settle(r *runner, sd side) *runner {
	if sd.ref {
		return r
	}
	take := r.take
	r.take = func(n int) ([]float64, error) {
		xs, err := take(n)
		time.Sleep(time.Second)
		return xs, err
	}
	return r
}

// hostRace says whether err is the reference's bwrap failing because of
// another sandbox on the host: a mount point of a missing protected path
// under /tmp (/tmp/.git, made for the life of a sandbox by ours and the
// reference's alike) existed when the policy was resolved and was gone
// when bwrap bound it. Other engineers' tests cause it on a shared
// machine; it is not the server's cost.
func hostRace(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "bwrap: Can't") && strings.Contains(msg, "tmp/.")
}

// hostRaces counts samples taken again after a host race.
var hostRaces atomic.Int64

// timedRetry is runner.timed, except that a sample failing with a host
// race is taken again (at most 5 times); the failed attempt is not timed.
func (r *runner) timedRetry(n int, next *int, f func(i int) error) ([]float64, error) {
	var xs []float64
	for range n {
		if time.Now().After(r.deadline) {
			break
		}
		*next++
		var err error
		for range 5 {
			t0 := time.Now()
			if err = f(*next); err == nil {
				xs = append(xs, ms(time.Since(t0)))
				break
			}
			if !hostRace(err) {
				break
			}
			hostRaces.Add(1)
		}
		if err != nil {
			return xs, err
		}
	}
	return xs, nil
}

func reportRaces(w string, tr transportKind) {
	if n := hostRaces.Swap(0); n > 0 {
		fmt.Fprintf(os.Stderr, "exec-bench: %s %s: %d samples taken again after a host race (bwrap: a /tmp mount point of another sandbox came and went)\n", w, tr, n)
	}
}

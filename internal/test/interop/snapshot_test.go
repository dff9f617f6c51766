package interop

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/codexref"
)

// TestCodexShellSnapshot runs the real codex exec (the reference binary,
// 0.171 in CI) with features.shell_snapshot_v2 against each server: the
// executor's HOME has a login profile that sleeps, exports a variable,
// defines a function and an alias and counts its runs in a file. Four
// exec_command calls must each see the profile's state, the process/start
// requests must carry shellSnapshot, and the profile must have run once
// for all four (the capture), not once per command. Full access, so that
// the profile can write its count; the sandboxed replay is covered by
// process TestShellSnapshotSandboxed.
func TestCodexShellSnapshot(t *testing.T) {
	codex := codexref.Bin(t)
	base := scratchBase(t)
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			runSnapshotScenario(t, codex, base, tg)
		})
	}
}

func runSnapshotScenario(t *testing.T, codex, base string, tg *target) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	root := mkScratch(t, base, "snap-"+tg.name+"-")
	work, home, serverHome, codexHome := filepath.Join(root, "work"), filepath.Join(root, "home"), filepath.Join(root, "server-home"), filepath.Join(root, "codex-home")
	for _, d := range []string{work, home, serverHome, codexHome} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	counter := filepath.Join(root, "profile-runs")
	profile := fmt.Sprintf(`echo run >> %q
sleep 1
export SNAP_PROFILE_VAR="from-profile"
snap_greet() { echo "greet-$1"; }
alias snapll='echo aliased'
shopt -s expand_aliases
`, counter)
	if err := os.WriteFile(filepath.Join(home, ".bash_profile"), []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	// The server runs in the workspace (codex snapshots only commands whose
	// cwd is the environment's) with HOME holding the profile.
	args := []string{"-C", work, "CODEX_HOME=" + serverHome, "HOME=" + home, tg.bin}
	if tg.ref {
		args = append(args, "exec-server")
	}
	srv, err := StartServer(ctx, Spec{Name: tg.name, Bin: "/usr/bin/env", Args: args}, WebSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	proxy := startRPCProxy(t, srv.URL)
	var steps [][]map[string]any
	for i := range 4 {
		steps = append(steps, execCommand(fmt.Sprintf("call-%d", i), fmt.Sprintf(`echo "v$SNAP_PROFILE_VAR-%d"; snap_greet %d; snapll`, i, i)))
	}
	model := newMockModel(t, steps...)
	cmd := codexref.Exec(ctx, codex, work, model.URL, "--dangerously-bypass-approvals-and-sandbox", "-c", "features.shell_snapshot_v2=true")
	cmd.Env = append(filteredEnv(), "CODEX_HOME="+codexHome, "CODEX_EXEC_SERVER_URL="+proxy.url, "RUST_LOG=warn")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err = cmd.Run()
	elapsed := time.Since(t0)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("codex exec (%.1f s, err %v)\nstdout:\n%s\nstderr tail:\n%s", elapsed.Seconds(), err,
				codexref.Tail(stdout.String(), 4000), codexref.Tail(stderr.String(), 2000))
			t.Logf("json-rpc traffic:\n%s", codexref.Tail(proxy.log.String(), 12000))
			t.Logf("%s server stderr tail:\n%s", tg.name, srv.Stderr())
		}
	})
	if err != nil {
		t.Fatalf("codex exec: %v", err)
	}
	for i := range 4 {
		out, ok := model.toolOutput(fmt.Sprintf("call-%d", i))
		for _, want := range []string{fmt.Sprintf("vfrom-profile-%d", i), fmt.Sprintf("greet-%d", i), "aliased"} {
			if !ok || !strings.Contains(out, want) {
				t.Errorf("call-%d: output lacks %q: %q", i, want, out)
			}
		}
	}
	starts := proxy.log.calls("process/start")
	if len(starts) != 4 {
		t.Errorf("%d process/start requests, want 4", len(starts))
	}
	for _, c := range starts {
		snap, _ := c.params["shellSnapshot"].(map[string]any)
		if snap == nil || snap["scopeId"] == "" {
			t.Errorf("process/start without shellSnapshot: %v", c.params)
		}
	}
	runs, _ := os.ReadFile(counter)
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Errorf("the login profile ran %d times for 4 commands, want once (the capture)", n)
	}
	t.Logf("%s: 4 commands with a 1 s login profile: codex exec took %.1f s", tg.name, elapsed.Seconds())
}

package interop

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/test/codexref"
)

// TestCodexReviewDomains runs the real codex (0.171) under admin review
// domains: review_domains in [experimental_network] of
// /etc/codex/requirements.toml, the only place codex reads them from (or
// MDM, or its cloud). So that the host's /etc is never touched, codex runs
// in a private mount namespace with an overlay on /etc that holds the file
// (root, unshare and overlayfs needed; skipped otherwise). codex sends
// the list as networkProxy.proxy.reviewDomains (it refused every command
// while networkProxyReviewDomains was false); codex exec has no decider
// (it never sends policyDecisionTimeoutMs), so a review domain is denied
// even when allowlisted, as the reference does (measured: not_allowed,
// baseline_policy). The round trip with a decider is server
// TestNetworkReviewDomains.
func TestCodexReviewDomains(t *testing.T) {
	codex := codexref.Bin(t)
	if os.Getuid() != 0 {
		t.Skip("needs root for a private mount namespace with an overlay on /etc")
	}
	for _, tool := range []string{"unshare", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	base := scratchBase(t)
	ovl := codexref.Dir(t, base, "etc-overlay-")
	upper, work := filepath.Join(ovl, "upper"), filepath.Join(ovl, "work")
	for _, d := range []string{filepath.Join(upper, "codex"), work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	req := "[experimental_network]\nreview_domains = [\"r.example\", \"a.example\"]\n"
	if err := os.WriteFile(filepath.Join(upper, "codex", "requirements.toml"), []byte(req), 0o644); err != nil {
		t.Fatal(err)
	}
	// codex, started through a wrapper that mounts the overlay in its own
	// mount namespace first.
	wrapper := filepath.Join(ovl, "codex")
	script := fmt.Sprintf("#!/bin/sh\nexec unshare -m --propagation private sh -c "+
		"'mount -t overlay overlay -o lowerdir=/etc,upperdir=%s,workdir=%s /etc && exec \"$0\" \"$@\"' %s \"$@\"\n",
		upper, work, codex)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(wrapper, "--version").CombinedOutput(); err != nil {
		t.Skipf("cannot run codex with an overlay on /etc: %v: %s", err, out)
	}
	ours := oursTarget()
	sc := codexScenario{
		name: "review-domains",
		flags: []string{
			"-c", "features.network_proxy=true",
			"-c", `default_permissions="ws"`,
			"-c", `permissions.ws.filesystem={":root"="read",":project_roots"="write"}`,
			"-c", `permissions.ws.network={enabled=true,domains={"a.example"="allow"}}`,
		},
		script: func(work, token string) [][]map[string]any {
			return [][]map[string]any{execCommand("call-rv",
				`echo "a=$(curl -s http://a.example/)"; echo "r=$(curl -s http://r.example/)"`)}
		},
	}
	r := runCodexOnce(t, wrapper, base, ours, sc)
	start := r.startOf("call-rv")
	if start.err != nil {
		t.Fatalf("process/start refused: %v", start.err)
	}
	np, _ := json.Marshal(start.params["networkProxy"])
	if !strings.Contains(string(np), `"reviewDomains":["r.example","a.example"]`) {
		if v, _ := exec.Command(codex, "--version").Output(); strings.Contains(string(v), " 0.169.") {
			t.Skipf("%s: networkProxy %s", strings.TrimSpace(string(v)), np)
		}
		t.Fatalf("codex did not send the review domains: networkProxy %s", np)
	}
	out := r.toolOutput("call-rv")
	t.Logf("command output:\n%s", out)
	for _, want := range []string{
		`a={"status":"blocked","host":"a.example","reason":"not_allowed","decision":"deny","source":"baseline_policy"`,
		`r={"status":"blocked","host":"r.example","reason":"not_allowed","decision":"deny","source":"baseline_policy"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("command output lacks %q", want)
		}
	}
}

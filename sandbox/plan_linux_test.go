package sandbox

import (
	"fmt"
	"strings"
	"testing"

	"github.com/execgo/exec-server/sandbox/policy"
)

// resolve parses and resolves raw, failing t on an error (the plan's
// invariants are the policy package's tests).
func resolve(t testing.TB, raw string, env policy.Env) *policy.Plan {
	t.Helper()
	p, err := policy.Parse([]byte(raw))
	if err != nil {
		t.Fatalf("Parse(%s): %v", raw, err)
	}
	plan, err := policy.Resolve(p, env)
	if err != nil {
		t.Fatalf("Resolve(%s): %v", raw, err)
	}
	return plan
}

func dump(p *policy.Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "root=%v fullRead=%v fullWrite=%v net=%v globs=%q\n", p.Root, p.FullRead, p.FullWrite, p.Network, p.DenyGlobs)
	for _, m := range p.Mounts {
		fmt.Fprintf(&b, "  %s %v prot=%v missing=%v dir=%v\n", m.Path, m.Access, m.Protected, m.Missing, m.Dir)
	}
	return b.String()
}

func findMount(p *policy.Plan, path string) (policy.Mount, bool) {
	for _, m := range p.Mounts {
		if m.Path == path {
			return m, true
		}
	}
	return policy.Mount{}, false
}

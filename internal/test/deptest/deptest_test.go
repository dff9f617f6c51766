package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/execgo/exec-server"

// testOnly are the packages written for tests alone: no product package
// may link them (docs/architecture.md, "Import rules", rule 2).
var testOnly = []string{
	"internal/test/...",
	"remote/noise/noisetest",
}

// testOnlyStd are the standard library's test-only packages: no product
// package, and so no binary under cmd/, may link them (rule 6).
var testOnlyStd = []string{"testing", "testing/...", "net/http/httptest", "crypto/mlkem/mlkemtest"}

// serverSide are the packages that make up the server; the client SDK
// links none of them (rule 3).
var serverSide = []string{
	"server/...", "process/...", "fsys/...", "sandbox/...", "childinit/...", "remote/relay/...", "netproxy/...",
	"fswatch/...", "caproots/...", "auth/...", "httpcall/...",
}

// A rule forbids the packages matching pkgs (and, through Deps, everything
// they link, transitively) to depend on any package of the module matching
// forbid, or, when allow is set, on any package of the module outside allow,
// or on any package outside the module matching forbidExt. Patterns are
// module-relative (forbidExt: full import paths); "x/..." matches x and
// everything below it.
type rule struct {
	name      string
	pkgs      []string
	forbid    []string
	allow     []string
	forbidExt []string
}

// rules is the table docs/architecture.md ("Import rules") describes; keep
// the two in step.
var rules = []rule{
	{name: "1. jsonrpc imports nothing of this project", pkgs: []string{"jsonrpc/..."}, allow: []string{"jsonrpc/..."}},
	{name: "2. no product package links a test-only package", pkgs: []string{"..."}, forbid: testOnly},
	{name: "3. the client SDK links no server-side package", pkgs: []string{"client/..."}, forbid: serverSide},
	{
		name:  "4. protocol links only jsonrpc and internal/b64codec",
		pkgs:  []string{"protocol/..."},
		allow: []string{"protocol/...", "jsonrpc", "internal/b64codec"},
	},
	{
		name:      "5. sandbox/policy (what a sandbox allows) links no golang.org/x/sys/unix",
		pkgs:      []string{"sandbox/policy/..."},
		forbidExt: []string{"golang.org/x/sys/unix"},
	},
	{
		name:      "6. no product package (no binary under cmd/) links a test-only package of the standard library",
		pkgs:      []string{"..."},
		forbidExt: testOnlyStd,
	},
}

// exceptions are known violations, by rule name and "pkg -> dep", each
// with a TODO naming its issue. Empty: every rule holds today.
var exceptions = map[string]map[string]string{}

// pkg is the part of `go list -json` this test reads: Deps are the
// module's packages (module-relative), Ext the others (standard library
// included).
type pkg struct {
	ImportPath string
	Deps       []string
	Ext        []string
}

// match reports whether the module-relative path rel matches pattern.
func match(pattern, rel string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

func matchAny(patterns []string, rel string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, rel) })
}

// check returns every violation of rules in pkgs, as "rule: pkg -> dep",
// leaving out the listed exceptions. Package paths are module-relative;
// test-only packages are never subject to rule 2's pkgs.
func check(pkgs []pkg, rules []rule, exceptions map[string]map[string]string) []string {
	var bad []string
	for _, r := range rules {
		for _, p := range pkgs {
			if !matchAny(r.pkgs, p.ImportPath) || matchAny(testOnly, p.ImportPath) {
				continue
			}
			for _, d := range p.Deps {
				forbidden := r.forbid != nil && matchAny(r.forbid, d) ||
					r.allow != nil && !matchAny(r.allow, d)
				if !forbidden {
					continue
				}
				edge := p.ImportPath + " -> " + d
				if _, ok := exceptions[r.name][edge]; ok {
					continue
				}
				bad = append(bad, r.name+": "+edge)
			}
			for _, d := range p.Ext {
				if !matchAny(r.forbidExt, d) {
					continue
				}
				edge := p.ImportPath + " -> " + d
				if _, ok := exceptions[r.name][edge]; ok {
					continue
				}
				bad = append(bad, r.name+": "+edge)
			}
		}
	}
	return bad
}

// list runs `go list -e -json ./...` for goos and returns the module's
// packages with their module dependencies, paths relative to the module.
func list(t *testing.T, goos string) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Deps", "./...")
	cmd.Dir = "../../.."
	cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list (GOOS=%s): %v\n%s", goos, err, stderr.Bytes())
	}
	rel := func(path string) (string, bool) {
		if path == module {
			return ".", true
		}
		return strings.CutPrefix(path, module+"/")
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		r, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		q := pkg{ImportPath: r}
		for _, d := range p.Deps {
			if dr, ok := rel(d); ok {
				q.Deps = append(q.Deps, dr)
			} else {
				q.Ext = append(q.Ext, d)
			}
		}
		pkgs = append(pkgs, q)
	}
	return pkgs
}

// TestImportRules enforces the table above on the module as built for
// Linux (the server) and for darwin and windows (where the SDK runs too).
func TestImportRules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		t.Run(goos, func(t *testing.T) {
			pkgs := list(t, goos)
			if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.ImportPath == "jsonrpc" }) ||
				!slices.ContainsFunc(pkgs, func(p pkg) bool { return p.ImportPath == "client" }) {
				t.Fatalf("go list returned %d packages, without jsonrpc or client", len(pkgs))
			}
			for _, b := range check(pkgs, rules, exceptions) {
				t.Error(b)
			}
		})
	}
}

// TestCheckFindsViolations shows check is not vacuous: a graph breaking each
// rule reports each break, and an exception silences exactly its edge.
func TestCheckFindsViolations(t *testing.T) {
	g := []pkg{
		{ImportPath: "jsonrpc", Deps: []string{"protocol"}},
		{ImportPath: "server", Deps: []string{"internal/test/testbin", "jsonrpc"}},
		{ImportPath: "client", Deps: []string{"sandbox", "jsonrpc", "protocol"}},
		{ImportPath: "protocol", Deps: []string{"jsonrpc", "fileuri"}},
		{ImportPath: "internal/test/interop", Deps: []string{"server", "internal/test/testbin"}},
		{ImportPath: "sandbox/policy", Deps: []string{"protocol"}, Ext: []string{"os", "golang.org/x/sys/unix"}},
		{ImportPath: "sandbox", Deps: []string{"sandbox/policy"}, Ext: []string{"golang.org/x/sys/unix"}},
		{ImportPath: "cmd/exec-server", Deps: []string{"remote/noise"}, Ext: []string{"crypto/mlkem", "crypto/mlkem/mlkemtest"}},
		{ImportPath: "remote/noise/noisetest", Ext: []string{"crypto/mlkem/mlkemtest"}},
	}
	got := check(g, rules, nil)
	want := []string{
		rules[0].name + ": jsonrpc -> protocol",
		rules[1].name + ": server -> internal/test/testbin",
		rules[2].name + ": client -> sandbox",
		rules[3].name + ": protocol -> fileuri",
		rules[4].name + ": sandbox/policy -> golang.org/x/sys/unix",
		rules[5].name + ": cmd/exec-server -> crypto/mlkem/mlkemtest",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("check = %q\nwant %q", got, want)
	}
	exc := map[string]map[string]string{rules[2].name: {"client -> sandbox": "TODO(#0): test"}}
	if got := check(g, rules, exc); len(got) != len(want)-1 || slices.Contains(got, want[2]) {
		t.Fatalf("with an exception, check = %q", got)
	}
}

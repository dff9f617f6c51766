package envreg

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/test/shapescan"
)

// registryPackages speak the registry's HTTP contract: the relay answers
// it, the executor and the harness call it.
var registryPackages = []string{"relay", "executor", "harness"}

// registryExceptions are their structs with json tags that are not
// registry bodies, each with what they are.
var registryExceptions = map[string]string{
	"relay/fabric.go fabRequest": "a fleet node's request to an environment's home node (over NATS), not the registry's HTTP",
	"relay/fabric.go fabReply":   "the home node's answer to fabRequest",
	"relay/kvstore.go kvReg":     "a registration as stored in the fleet's NATS key-value bucket",
	"relay/kvstore.go kvAuth":    "a pending harness authorization as stored in the bucket",

	"executor/agentid.go agentClaims":          "the Agent Identity token's claims (auth service, not the registry)",
	"executor/agentid.go jwks":                 "the auth service's JWKS document",
	"executor/agentid.go func RegisterTask":    "the auth service's task registration body and answer",
	"executor/auth.go authJSON":                "CODEX_HOME/auth.json, read from disk",
	"executor/auth.go func RefreshAuthFile":    "the token endpoint's refresh answer",
	"harness/cred.go func LoadCodexCredential": "CODEX_HOME/auth.json, read from disk",
	"harness/cred.go func jwtExpiry":           "a JWT's exp claim",
}

// TestRegistryShapesLiveInEnvreg fails when the relay, the executor or the
// harness declares a struct with json tags that is not listed above: the
// registry's bodies are declared once, here, so the side that answers and
// the sides that ask cannot drift apart.
func TestRegistryShapesLiveInEnvreg(t *testing.T) {
	shapescan.Check(t, "../..", registryPackages, registryExceptions, "remote/internal/envreg")
}

// TestRegistryNamesLiveInEnvreg fails when the relay, the executor or the
// harness spells one of the registry's names (the security profile, the
// direct transport, the stream id header, an error code) as a string
// literal instead of using the constant: a client classifies a failure by
// its code, so both ends must read the same one.
func TestRegistryNamesLiveInEnvreg(t *testing.T) {
	fset := token.NewFileSet()
	names := wireNames(t, fset)
	if len(names) < 15 {
		t.Fatalf("wire.go: %d string constants, want the registry's names", len(names))
	}
	for _, dir := range registryPackages {
		files, err := filepath.Glob(filepath.Join("../..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("package %s: no Go files (%v)", dir, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Field:
					// A struct tag is a string literal too, and a field's
					// type holds no other: skip a tagged field whole.
					return n.Tag == nil
				case *ast.BasicLit:
					if n.Kind != token.STRING {
						return false
					}
					if v, err := strconv.Unquote(n.Value); err == nil && names[v] {
						t.Errorf("%s: %q is spelled out; use the envreg constant", fset.Position(n.Pos()), v)
					}
				}
				return true
			})
		}
	}
}

// wireNames is every string constant wire.go declares: the registry's
// names, read from their home so that a name added there is checked too.
func wireNames(t *testing.T, fset *token.FileSet) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(fset, "wire.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			for _, v := range spec.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						names[s] = true
					}
				}
			}
		}
	}
	return names
}

package protocol

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// methodExceptions lists product files (slash paths from the module root)
// still allowed to spell a method name as a string literal, each with the
// reason. Empty today; an entry needs a TODO naming its issue.
var methodExceptions = map[string]string{}

// methodShape is what a JSON-RPC method of this protocol looks like:
// "family/name", possibly with more segments ("http/request/bodyDelta").
var methodShape = regexp.MustCompile(`^[a-zA-Z]+(/[a-zA-Z0-9]+)+$`)

// knownMethods returns every method and notification name declared in this
// package (constants named Method* or Notify*), read from its source so that
// a constant added later is covered without editing this test.
func knownMethods(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	names := map[string]string{}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Method") && !strings.HasPrefix(id.Name, "Notify") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					names[v] = id.Name
				}
			}
		}
	}
	return names
}

// TestMethodNamesLiveInProtocol fails when product code outside this package
// spells an exec-server method or notification name as a string literal
// (alone, or inside a hand-written JSON frame) instead of using the constant
// here, or spells a "family/name" of a known family that this package does
// not declare: one home for the wire contract (docs/architecture.md, "Import
// rules"). Tests and test helpers (internal/test/...) may spell names: they
// check the wire, and the interop suite talks to the reference without this
// package.
func TestMethodNamesLiveInProtocol(t *testing.T) {
	known := knownMethods(t)
	if len(known) < 30 {
		t.Fatalf("found only %d method constants in protocol; the parser missed them", len(known))
	}
	families := map[string]bool{}
	for name := range known {
		if fam, _, ok := strings.Cut(name, "/"); ok {
			families[fam] = true
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var bad []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel != "." && strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", d.Name() == "vendor",
				rel == "protocol", rel == "internal/test":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		if _, ok := methodExceptions[rel]; ok {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			pos := fset.Position(lit.Pos())
			where := rel + ":" + strconv.Itoa(pos.Line)
			if c, ok := known[s]; ok {
				bad = append(bad, where+": "+strconv.Quote(s)+" (use protocol."+c+")")
				return true
			}
			if methodShape.MatchString(s) {
				if fam, _, _ := strings.Cut(s, "/"); families[fam] {
					bad = append(bad, where+": "+strconv.Quote(s)+" (a method of a known family: declare it in protocol)")
				}
				return true
			}
			for name, c := range known {
				if strings.Contains(name, "/") && strings.Contains(s, `"`+name+`"`) {
					bad = append(bad, where+": "+strconv.Quote(name)+" inside a literal (build it from protocol."+c+")")
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}

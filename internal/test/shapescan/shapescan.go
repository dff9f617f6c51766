// Package shapescan finds the structs with json tags in Go source, the
// candidate wire shapes of the "one home per contract" tests: a contract's
// home package runs Check over the packages that speak it, and each struct
// found outside the home must be listed with the reason it is not a second
// copy of the contract (docs/architecture.md, "Import rules"). Test-only.
package shapescan

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// Check fails t for every struct with json tags in the non-test Go files
// of dirs (each relative to root, and named by it in keys) that exceptions
// does not list, and for every exception no longer found. A key is
// "dir/file.go Name" for a named type, "dir/file.go func F" for an
// anonymous struct inside F. home names the contract's package in the
// failure message.
func Check(t testing.TB, root string, dirs []string, exceptions map[string]string, home string) {
	t.Helper()
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("package %s has no Go files: update the list of packages", dir)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			rel := dir + "/" + filepath.Base(path)
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range TaggedStructs(f) {
				key = rel + " " + key
				seen[key] = true
				if _, ok := exceptions[key]; !ok {
					t.Errorf("%s: a struct with json tags outside %s; move the wire shape there or list it in the exceptions with the reason", key, home)
				}
			}
		}
	}
	var stale []string
	for key := range exceptions {
		if !seen[key] {
			stale = append(stale, key)
		}
	}
	sort.Strings(stale)
	for _, key := range stale {
		t.Errorf("the exceptions list %s, which no longer exists: remove it", key)
	}
}

// TaggedStructs names the structs in f with a json tag on a field: a named
// type by its name, an anonymous struct by "func " and its enclosing
// function.
func TaggedStructs(f *ast.File) []string {
	var out []string
	add := func(key string) {
		for _, k := range out {
			if k == key {
				return
			}
		}
		out = append(out, key)
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			for _, s := range d.Specs {
				if ts, ok := s.(*ast.TypeSpec); ok && hasJSONTag(ts.Type) {
					add(ts.Name.Name)
				}
			}
		case *ast.FuncDecl:
			if d.Body == nil {
				continue
			}
			ast.Inspect(d.Body, func(n ast.Node) bool {
				if st, ok := n.(*ast.StructType); ok && hasJSONTag(st) {
					add("func " + d.Name.Name)
					return false
				}
				return true
			})
		}
	}
	return out
}

// hasJSONTag reports whether a struct type (or one nested in it) tags a
// field for encoding/json.
func hasJSONTag(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		fl, ok := n.(*ast.Field)
		if !ok || fl.Tag == nil {
			return true
		}
		if _, ok := reflect.StructTag(strings.Trim(fl.Tag.Value, "`")).Lookup("json"); ok {
			found = true
		}
		return !found
	})
	return found
}

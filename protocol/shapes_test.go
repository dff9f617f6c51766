package protocol

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

// shapePackages are the product packages that implement or call exec-server
// methods: a struct with json tags in one of them is a candidate wire shape.
// The registry/relay HTTP shapes (remote/internal/envreg) and configuration
// files are other contracts and are not scanned.
var shapePackages = []string{
	"server", "fsys", "process", "httpcall", "caproots", "fswatch",
	"netproxy", "internal/codexhome", "client",
}

// shapeExceptions lists the structs with json tags that stay outside this
// package ("dir/file.go Name", or "dir/file.go func F" for an anonymous
// struct inside F), each with why it is not an exec-server wire shape or
// why it is a second, deliberate decoding of one.
var shapeExceptions = map[string]string{
	// Strict first passes: the raw members are decoded apart so that errors
	// read as the reference's; the shapes are protocol.Fs*Params.
	"fsys/copy.go func copy":                        "raw first pass over protocol.FsCopyParams",
	"fsys/files.go func decodeWriteFile":            "raw first pass over protocol.FsWriteFileParams",
	"fsys/handles.go func open":                     "raw first pass over protocol.FsOpenParams",
	"fsys/handles.go func writeBlock":               "raw first pass over protocol.FsWriteBlockParams",
	"fsys/walk.go func walk":                        "raw first pass over protocol.FsWalkParams",
	"server/discover.go func decodeCapabilityRoots": "raw first pass over protocol.CapabilityRootsDiscoverParams",
	"process/mask.go func maskingRequested":         "peeks at one member of protocol.NetworkProxySettings before it is checked",

	// Not the exec-server wire: the server and its sandboxed helper
	// processes, files on disk, and the network proxy's own answers.
	"fsys/sandbox.go sandboxRequest":         "server to sandboxed fs helper (a re-exec of this binary)",
	"fsys/sandbox.go sandboxReply":           "sandboxed fs helper to server",
	"caproots/sandbox.go helperRequest":      "server to sandboxed capability-roots helper",
	"caproots/caproots.go func declarations": "a plugin manifest file's members, read from disk",
	"netproxy/http.go blockedBody":           "the proxy's 403 body to the sandboxed command's HTTP client",

	// The SDK's encoders and fast decoders of shapes declared here.
	"client/decode.go readBlockResult": "protocol.FsReadBlockResult with a fast decoder",
	"client/decode.go readFileResult":  "protocol.FsReadFileResult with a fast decoder",
	"client/process.go startParams":    "protocol.StartParams with int rows/cols, so an out-of-range size is refused by the server rather than truncated here",
	"client/process.go resizeParams":   "protocol.ResizeParams with int rows/cols, for the same reason",
	"client/process.go event":          "one decoder for protocol.OutputNotification, ExitedNotification and ClosedNotification",
	"client/sandbox.go policyEntry":    "the sandbox member's policy document, whose home is sandbox/policy (protocol carries it raw)",
	"client/sandbox.go policyPath":     "as policyEntry",
	"client/sandbox.go policySpecPath": "as policyEntry",
	"client/sandbox.go func policy":    "as policyEntry",
}

// TestWireShapesLiveInProtocol fails when a product package that serves or
// calls exec-server methods declares a struct with json tags that is not
// listed in shapeExceptions: a method's params, result or notification
// belongs here (docs/architecture.md, "Import rules"), and anything else
// must say why it is not one.
func TestWireShapesLiveInProtocol(t *testing.T) {
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, dir := range shapePackages {
		files, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("package %s has no Go files: update shapePackages", dir)
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
			for _, key := range taggedStructs(f) {
				key = rel + " " + key
				seen[key] = true
				if _, ok := shapeExceptions[key]; !ok {
					t.Errorf("%s: a struct with json tags outside protocol; move the wire shape here or list it in shapeExceptions with the reason", key)
				}
			}
		}
	}
	var stale []string
	for key := range shapeExceptions {
		if !seen[key] {
			stale = append(stale, key)
		}
	}
	sort.Strings(stale)
	for _, key := range stale {
		t.Errorf("shapeExceptions lists %s, which no longer exists: remove it", key)
	}
}

// taggedStructs names the structs in f with a json tag on a field: a named
// type by its name, an anonymous struct by its enclosing function.
func taggedStructs(f *ast.File) []string {
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

// Package plantest builds the sandbox policies the tests of sandbox/policy
// and of sandbox (the kernel side) resolve: JSON texts of the protocol's
// sandbox parameter, and temporary trees for them to name. It imports
// nothing of the sandbox, so that the policy package's own tests can use it.
package plantest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgo/exec-server/fileuri"
)

// Tree makes files (names ending in "/" are directories) under a fresh
// temporary directory, canonical, and returns it.
func Tree(t testing.TB, names ...string) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if strings.HasSuffix(n, "/") {
			err = os.MkdirAll(p, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			err = os.WriteFile(p, []byte("x"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// URI is the file: URI of the host path p.
func URI(p string) string { return fileuri.FromPath(p) }

// Context builds a sandbox context: a managed restricted profile with
// entries (JSON texts) and extra top-level members.
func Context(entries []string, extra string) string {
	return `{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[` +
		strings.Join(entries, ",") + `]}},"windowsSandboxLevel":"disabled"` + extra + `}`
}

// Path is a file-system entry giving the host path p access.
func Path(p, access string) string {
	return `{"path":{"type":"path","path":"` + URI(p) + `"},"access":"` + access + `"}`
}

// Special is a file-system entry for a special path (root, project_roots…).
func Special(kind, access string) string {
	return `{"path":{"type":"special","value":{"kind":"` + kind + `"}},"access":"` + access + `"}`
}

// Glob is a file-system entry for a glob pattern.
func Glob(pattern, access string) string {
	return `{"path":{"type":"glob_pattern","pattern":"` + pattern + `"},"access":"` + access + `"}`
}

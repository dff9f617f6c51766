package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecServer builds the server (or finds it built) and runs it.
func TestExecServer(t *testing.T) {
	bin, err := ExecServer()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ExecServer()
	if err != nil || again != bin {
		t.Fatalf("second call: %q, %v; want %q", again, err, bin)
	}
	out, _ := exec.Command(bin, "--bogus").CombinedOutput()
	if !strings.Contains(string(out), "flag provided but not defined") {
		t.Fatalf("%s --bogus: %q", bin, out)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The name follows the sources: a changed source is another binary.
	h1, err := sourceHash(root)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(filepath.Base(bin), h1) {
		t.Fatalf("%s is not named after the sources' hash %s", bin, h1)
	}
	dir := t.TempDir()
	os.WriteFile(dir+"/go.mod", []byte("module x\n"), 0o644)
	os.WriteFile(dir+"/a.go", []byte("package x\n"), 0o644)
	a, _ := sourceHash(dir)
	os.WriteFile(dir+"/a_test.go", []byte("package x\n"), 0o644)
	b, _ := sourceHash(dir)
	os.WriteFile(dir+"/a.go", []byte("package x // changed\n"), 0o644)
	c, _ := sourceHash(dir)
	if a != b || a == c {
		t.Errorf("hash: %s, with a test file %s (want equal), after a change %s (want different)", a, b, c)
	}
}

package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rm, mkdir and mv work on remote paths, name the path in errors (exit 1),
// and ls -l shows mode, owner, size, time and link targets.
func TestFileOps(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := mainOut(t, "", append(args[:1:1], append([]string{"--url", serverURL}, args[1:]...)...)...)
		if code != want {
			t.Errorf("%v: exit %d, want %d; stderr %q", args, code, want, errOut)
		}
		return out + errOut
	}
	run(0, "mkdir", "-p", ":"+dir+"/a/b")
	if fi, err := os.Stat(dir + "/a/b"); err != nil || !fi.IsDir() {
		t.Fatalf("mkdir -p: %v", err)
	}
	if out := run(1, "mkdir", ":"+dir+"/x/y"); !strings.Contains(out, dir+"/x/y") {
		t.Errorf("mkdir error does not name the path: %q", out)
	}
	os.WriteFile(dir+"/a/f", []byte("data"), 0o640)
	os.Symlink("f", dir+"/a/link")
	out := run(0, "ls", "-l", ":"+dir+"/a")
	for _, want := range []string{"-rw-r-----", " f\n", "link -> f", "drwx"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls -l lacks %q:\n%s", want, out)
		}
	}
	run(0, "mv", ":"+dir+"/a/f", ":"+dir+"/a/g")
	if b, _ := os.ReadFile(dir + "/a/g"); string(b) != "data" {
		t.Errorf("mv: g holds %q", b)
	}
	if out := run(1, "mv", ":"+dir+"/a/f", ":"+dir+"/a/h"); !strings.Contains(out, dir+"/a/f") {
		t.Errorf("mv of a missing file: %q", out)
	}
	if out := run(1, "rm", ":"+dir+"/a"); !strings.Contains(out, dir+"/a") {
		t.Errorf("rm of a directory without -r: %q", out)
	}
	run(1, "rm", ":"+dir+"/nope")
	run(0, "rm", "-f", ":"+dir+"/nope")
	run(0, "rm", "-r", ":"+dir+"/a")
	if _, err := os.Stat(dir + "/a"); err == nil {
		t.Errorf("rm -r left %s", filepath.Join(dir, "a"))
	}
	run(2, "rm", "relative")
	run(2, "mv", ":/one")
}

package sandbox

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgo/exec-server/sandbox/policy"
)

// A directory of a writable root that holds a mount (a read-only carve-out,
// a deny mask) cannot be renamed: the kernel would move the mount along,
// and the command could then make the carve-out's or the denied path anew
// on the host. Without the pins, `mv a c` and `mv d e` succeeded, a/b/new
// appeared on the host and d/secret.txt was replaced.
func TestCommandCannotMoveAMountAway(t *testing.T) {
	needSandbox(t)
	ws, _ := fixture(t)
	for name, data := range map[string]string{"a/b/ro.txt": "ro", "d/secret.txt": "secret", "x/y/z/deep.txt": "deep"} {
		if err := os.MkdirAll(filepath.Join(ws, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := workspaceWrite(ws)
	p.Mounts = append(p.Mounts,
		policy.Mount{Path: filepath.Join(ws, "a", "b"), Access: policy.AccessRead, Dir: true},
		policy.Mount{Path: filepath.Join(ws, "d", "secret.txt"), Access: policy.AccessNone},
		policy.Mount{Path: filepath.Join(ws, "x", "y", "z"), Access: policy.AccessRead, Dir: true})
	script := `for m in "a c" "d e" "x x2" "x/y x/y2"; do mv $m 2>/dev/null && echo "moved $m"; done
mkdir -p a/b d x/y/z; echo new > a/b/new; echo new > d/secret.txt; echo new > x/y/z/new
echo control > ok.txt; mkdir -p free/sub && mv free free2 && echo "moved free"`
	spec, err := Command(p, "/bin/sh", []string{"sh", "-c", script}, nil, ws)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r, w, _ := os.Pipe()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	done := make(chan struct{})
	go func() { io.Copy(&out, r); close(done) }()
	startSpec(t, spec, []*os.File{null, w, w}, nil)
	w.Close()
	<-done
	got := out.String()
	if strings.Contains(got, "moved a") || strings.Contains(got, "moved d") || strings.Contains(got, "moved x") {
		t.Errorf("a directory holding a mount was renamed:\n%s", got)
	}
	if !strings.Contains(got, "moved free") {
		t.Errorf("control: a directory holding no mount could not be renamed:\n%s", got)
	}
	for name, want := range map[string]string{"a/b/ro.txt": "ro", "d/secret.txt": "secret", "x/y/z/deep.txt": "deep", "ok.txt": "control\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(b) != want {
			t.Errorf("host %s = %q, %v; want %q", name, b, err, want)
		}
	}
	for _, name := range []string{"a/b/new", "x/y/z/new", "c", "e", "x2", "x/y2"} {
		if _, err := os.Lstat(filepath.Join(ws, name)); err == nil {
			t.Errorf("host %s exists: the command wrote where the policy forbids\n%s", name, got)
		}
	}
}

package codexref

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScratch(t *testing.T) {
	var dir, base string
	t.Run("inner", func(t *testing.T) {
		dir = Scratch(t, "exec-server-codexref-test", "x-")
		base = filepath.Dir(dir)
		for _, tmp := range []string{os.TempDir(), "/tmp"} {
			if rel, err := filepath.Rel(tmp, dir); err == nil && !strings.HasPrefix(rel, "..") {
				t.Fatalf("%s is under the temp dir %s", dir, tmp)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left behind: %v", dir, err)
	}
	if _, err := os.Stat(base); !os.IsNotExist(err) {
		t.Fatalf("empty base %s left behind: %v", base, err)
	}
}

func TestExec(t *testing.T) {
	cmd := Exec(context.Background(), "/bin/codex", "/w", "http://127.0.0.1:9/v1", "-s", "read-only")
	args := strings.Join(cmd.Args, " ")
	for _, want := range []string{"/bin/codex exec ", " -C /w ", " -s read-only ", `base_url="http://127.0.0.1:9/v1"`} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if last := cmd.Args[len(cmd.Args)-1]; last != "run the scripted tool calls" {
		t.Errorf("prompt %q", last)
	}
	if cmd.Dir != "/w" || cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid || cmd.Cancel == nil {
		t.Errorf("dir %q, process group %+v", cmd.Dir, cmd.SysProcAttr)
	}
}

func TestTail(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{{"abcdef", 3, "…def"}, {"abc", 3, "abc"}, {"", 2, ""}} {
		if got := Tail(c.in, c.n); got != c.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

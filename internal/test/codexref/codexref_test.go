package codexref

import (
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

package cli_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWatch: `exec-server watch` prints the changes under a path, one
// "KIND\tPATH" line each, and stops after --count lines.
func TestWatch(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	stop := make(chan struct{})
	done := make(chan struct{})
	// The watch is set some time after run starts: keep making files
	// until the command has seen one.
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			_ = os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o644)
		}
	}()
	out, code := run(t, dir, "", "watch", "--url", serverURL, "--count", "1", dir)
	close(stop)
	<-done
	if code != 0 {
		t.Errorf("watch: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "created\t$DIR/f") {
		t.Errorf("watch printed no created line:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"watch", "--url", serverURL}, 2, "want one PATH"},
		{[]string{"watch", "--url", serverURL, filepath.Join(dir, "missing")}, 255, "No such file or directory"},
		{[]string{"watch", "--url", serverURL, "relative"}, 255, "not an absolute path"},
	} {
		out, code := run(t, "", "", tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want %d with %q\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
}

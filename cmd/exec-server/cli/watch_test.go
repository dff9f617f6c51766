package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/cmd/exec-server/cli"
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

// watch takes the :/path form of the other commands, and ends with an
// error (exit 255) a few seconds after its server is gone, not never.
func TestWatchServerGone(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	url, srv := startServerAt(t, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr lineWaiter
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, "watch", []string{"--url", url, ":" + dir}, strings.NewReader(""), &stdout, &stderr)
	}()
	for i := 0; !strings.Contains(stdout.String(), "created\t"+dir+"/f"); i++ {
		if i > 400 {
			t.Fatalf("no change printed; stderr %q", stderr.String())
		}
		os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o644)
		time.Sleep(50 * time.Millisecond)
	}
	srv.Process.Kill()
	srv.Wait()
	select {
	case code := <-done:
		if code != 255 || !strings.Contains(stderr.String(), "watch ended") {
			t.Errorf("exit %d, stderr %q; want 255 and watch ended", code, stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("watch did not end after its server died; stderr %q", stderr.String())
	}
}

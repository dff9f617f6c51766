package cli_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/cmd/exec-server/cli"
)

// entry is what cp -a keeps of a path: its type, permission bits, bytes
// or link target, and (for files and directories) modification time.
type entry struct {
	kind   string
	mode   fs.FileMode
	data   string
	target string
	mtime  time.Time
}

// snapshot describes the tree under root, by relative path.
func snapshot(t *testing.T, root string) map[string]entry {
	t.Helper()
	got := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := entry{mode: fi.Mode() & (fs.ModePerm | fs.ModeSetgid | fs.ModeSticky)}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			e.kind = "link"
			e.mode = 0
			e.target, _ = os.Readlink(p)
		case fi.IsDir():
			e.kind = "dir"
			e.mtime = fi.ModTime().Truncate(time.Second)
		default:
			e.kind = "file"
			b, _ := os.ReadFile(p)
			e.data = string(b)
			e.mtime = fi.ModTime().Truncate(time.Second)
		}
		got[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// makeTree makes a tree with the modes, times and links -a must keep.
func makeTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(root+"/sub/deeper", 0o755))
	must(os.WriteFile(root+"/run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.WriteFile(root+"/private", []byte("secret\n"), 0o600))
	must(os.WriteFile(root+"/sub/deeper/data", []byte("data\n"), 0o640))
	must(os.WriteFile(root+"/with space", []byte("sp\n"), 0o644))
	must(os.Symlink("run.sh", root+"/link-to-file"))
	must(os.Symlink("sub/deeper", root+"/link-to-dir"))
	must(os.Symlink("../nowhere", root+"/dangling"))
	must(os.Symlink("-starts-with-dash", root+"/dash-link"))
	// Modes and times last: writing into a directory changes its time.
	must(os.Chmod(root+"/sub", 0o750))
	must(os.Chmod(root+"/sub/deeper", 0o2775))
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for i, p := range []string{"run.sh", "private", "sub/deeper/data", "with space", "sub/deeper", "sub", "."} {
		ts := old.Add(time.Duration(i) * time.Hour)
		must(os.Chtimes(filepath.Join(root, p), ts, ts))
	}
}

// cp -a keeps modes, modification times and symlinks (dangling ones
// too) both ways; the server is this machine, so the remote tree is
// inspected directly.
func TestCopyArchive(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	makeTree(t, dir+"/src")
	want := snapshot(t, dir+"/src")
	u := serverURL
	steps := []struct {
		name     string
		args     []string
		root     string
		wantTree map[string]entry
	}{
		{"up", []string{"-a", dir + "/src", ":" + dir + "/remote"}, dir + "/remote", want},
		{"down", []string{"-a", ":" + dir + "/remote", dir + "/back"}, dir + "/back", want},
		{"down into a directory", []string{"-a", ":" + dir + "/remote", dir + "/back/"}, dir + "/back/remote", want},
		{"single file up", []string{"-a", dir + "/src/private", ":" + dir + "/one"}, dir + "/one", map[string]entry{".": want["private"]}},
		{"single link down", []string{"-a", ":" + dir + "/src/dangling", dir + "/dl"}, dir + "/dl", map[string]entry{".": want["dangling"]}},
	}
	for _, st := range steps {
		code, out, errOut := mainOut(t, "", append([]string{"cp", "--url", u}, st.args...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", st.name, code, out, errOut)
		}
		got := snapshot(t, st.root)
		for p, w := range st.wantTree {
			if g, ok := got[p]; !ok || g != w {
				t.Errorf("%s: %s = %+v, want %+v", st.name, p, got[p], w)
			}
		}
		for p := range got {
			if _, ok := st.wantTree[p]; !ok {
				t.Errorf("%s: unexpected %s", st.name, p)
			}
		}
	}
}

// Without -a, a symlinked tree still copies and the file modes are not
// the point; what matters is that a target is replaced whole or not at
// all, and no temporary file is left behind.
func TestCopyReplacesWhole(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	big := make([]byte, 8<<20)
	rand.Read(big)
	old := []byte("the old contents\n")
	for _, f := range []string{"remote-target", "local-target", "src.bin"} {
		data := old
		if f == "src.bin" {
			data = big
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		args   []string
		stdin  io.Reader
		stop   bool // cancel once the temporary file has data
		target string
	}{
		// The local input fails half way: the remote target is untouched.
		{"upload, input fails", []string{"-", ":" + dir + "/remote-target"}, io.MultiReader(bytes.NewReader(big[:3<<20]), failingReader{}), false, "remote-target"},
		// Stopped in the middle of the transfer.
		{"upload, stopped", []string{dir + "/src.bin", ":" + dir + "/remote-target"}, nil, true, "remote-target"},
		{"download, stopped", []string{":" + dir + "/src.bin", dir + "/local-target"}, nil, true, "local-target"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(filepath.Join(dir, tc.target), old, 0o644)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stopped := make(chan bool, 1)
			if tc.stop {
				// The server is this machine: the temporary file is
				// visible here either way.
				go func() {
					for ctx.Err() == nil {
						parts, _ := filepath.Glob(filepath.Join(dir, "."+tc.target+".part-*"))
						for _, p := range parts {
							if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
								cancel()
								stopped <- true
								return
							}
						}
						time.Sleep(time.Millisecond)
					}
				}()
			}
			stdin := tc.stdin
			if stdin == nil {
				stdin = strings.NewReader("")
			}
			var stderr bytes.Buffer
			code := cli.Main(ctx, "cp", append([]string{"--url", serverURL, "-q"}, tc.args...), stdin, io.Discard, &stderr)
			got, err := os.ReadFile(filepath.Join(dir, tc.target))
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-stopped:
				t.Logf("stopped mid-transfer; exit %d, the target holds the new contents: %v", code, bytes.Equal(got, big))
			default:
				t.Logf("exit %d; the target holds the new contents: %v", code, bytes.Equal(got, big))
			}
			switch {
			case bytes.Equal(got, old):
				if code == 0 {
					t.Errorf("exit 0 but the target is unchanged")
				}
			case bytes.Equal(got, big):
			default:
				t.Errorf("target holds %d bytes, neither the old contents nor the new (exit %d, %s)", len(got), code, stderr.String())
			}
			if tc.stdin != nil && code != 1 {
				t.Errorf("exit %d, want 1 (%s)", code, stderr.String())
			}
			// The server may still finish a request cp gave up on.
			deadline := time.Now().Add(5 * time.Second)
			for {
				parts, _ := filepath.Glob(filepath.Join(dir, ".*.part-*"))
				if len(parts) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("temporary files left: %v", parts)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("input failed") }

// Without -a, cp keeps what docker cp keeps: permission bits (a 0600 file
// stays private, a script keeps +x) and symlinks as links, both ways; times
// are not kept. Before, every file arrived 0644 and links were skipped with
// exit 0.
func TestCopyKeepsModesAndLinks(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	makeTree(t, dir+"/src")
	want := snapshot(t, dir+"/src")
	for p, e := range want {
		e.mtime = time.Time{}
		want[p] = e
	}
	for _, st := range []struct{ name, from, to, root string }{
		{"up", dir + "/src", ":" + dir + "/remote", dir + "/remote"},
		{"down", ":" + dir + "/remote", dir + "/back", dir + "/back"},
	} {
		code, out, errOut := mainOut(t, "", "cp", "--url", serverURL, "-r", st.from, st.to)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", st.name, code, out, errOut)
		}
		got := snapshot(t, st.root)
		for p, w := range want {
			g, ok := got[p]
			g.mtime = time.Time{}
			if !ok || g != w {
				t.Errorf("%s: %s = %+v, want %+v", st.name, p, g, w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d entries, want %d", st.name, len(got), len(want))
		}
	}
}

// An entry cp cannot copy (a FIFO) is reported by path and makes cp exit
// 1, both ways; the rest of the tree is still copied.
func TestCopySkippedEntryFails(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	if err := os.MkdirAll(dir+"/src", 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(dir+"/src/a", []byte("a"), 0o644)
	if err := syscallMkfifo(dir + "/src/fifo"); err != nil {
		t.Skip("mkfifo:", err)
	}
	for _, st := range []struct{ name, from, to, check string }{
		{"up", dir + "/src", ":" + dir + "/up", dir + "/up/a"},
		{"down", ":" + dir + "/src", dir + "/down", dir + "/down/a"},
	} {
		code, _, errOut := mainOut(t, "", "cp", "--url", serverURL, "-r", st.from, st.to)
		if code != 1 || !strings.Contains(errOut, "fifo") {
			t.Errorf("%s: exit %d, want 1 naming the fifo; stderr:\n%s", st.name, code, errOut)
		}
		if _, err := os.Stat(st.check); err != nil {
			t.Errorf("%s: the rest of the tree was not copied: %v", st.name, err)
		}
	}
}

// -a remote to remote keeps times and the setgid and sticky bits (fs/copy
// keeps permission bits only).
func TestCopyArchiveRemoteToRemote(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	makeTree(t, dir+"/src")
	if err := os.Chmod(dir+"/src/sub", 0o1750); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2001, 2, 3, 9, 0, 0, 0, time.UTC)
	os.Chtimes(dir+"/src/sub", ts, ts)
	want := snapshot(t, dir+"/src")
	code, out, errOut := mainOut(t, "", "cp", "--url", serverURL, "-a", ":"+dir+"/src", ":"+dir+"/dst")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	got := snapshot(t, dir+"/dst")
	for p, w := range want {
		if g := got[p]; g != w {
			t.Errorf("%s = %+v, want %+v", p, g, w)
		}
	}
}

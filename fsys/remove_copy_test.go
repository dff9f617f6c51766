package fsys

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestRemove(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name      string
		path      string
		recursive *bool
		force     *bool
		code      int
		msg       string
		gone      []string
		kept      []string
	}{
		{"rm -rf by default", "full", nil, nil, 0, "", []string{"full"}, []string{"f"}},
		{"file", "f", nil, nil, 0, "", []string{"f"}, nil},
		{"missing, force default", "nosuch", nil, nil, 0, "", nil, nil},
		{"missing parent, force default", "nosuch/x", nil, nil, 0, "", nil, nil},
		{"missing, force false", "nosuch", nil, &no, protocol.CodeNotFound, "No such file or directory (os error 2)", nil, nil},
		{"non-empty, recursive false", "full", &no, nil, protocol.CodeInternal, "Directory not empty (os error 39)", nil, []string{"full/x/y"}},
		{"empty, recursive false", "empty", &no, nil, 0, "", []string{"empty"}, nil},
		{"file, recursive false", "f", &no, &no, 0, "", []string{"f"}, nil},
		{"symlink to dir removes the link only", "dl", nil, nil, 0, "", []string{"dl"}, []string{"full/x/y"}},
		{"under a file", "f/x", nil, nil, protocol.CodeInternal, "Not a directory (os error 20)", nil, []string{"f"}},
		{"hidden files inside", "hid", nil, nil, 0, "", []string{"hid"}, nil},
		{"links inside are not followed", "withlinks", nil, nil, 0, "", []string{"withlinks"}, []string{"full/x/y", "f"}},
		{"many entries", "many", nil, nil, 0, "", []string{"many"}, []string{"f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTestFile(t, dir+"/full/x/y", []byte("y"))
			writeTestFile(t, dir+"/f", []byte("f"))
			writeTestFile(t, dir+"/hid/.a/.b", nil)
			os.Mkdir(dir+"/empty", 0o755)
			os.Symlink("full", dir+"/dl")
			os.Mkdir(dir+"/withlinks", 0o755)
			os.Symlink(dir+"/full", dir+"/withlinks/tofull")
			os.Symlink(dir+"/f", dir+"/withlinks/tof")
			if tc.path == "many" {
				for i := range 600 {
					writeTestFile(t, fmt.Sprintf("%s/many/d%d/f%d", dir, i%3, i), nil)
				}
			}
			f := New(Options{})
			params := obj("path", uri(dir+"/"+tc.path))
			if tc.recursive != nil {
				params["recursive"] = *tc.recursive
			}
			if tc.force != nil {
				params["force"] = *tc.force
			}
			out, e := call(t, f, nil, protocol.MethodFsRemove, params)
			if tc.code != 0 {
				wantErr(t, e, tc.code, tc.msg)
			} else if e != nil || string(out) != "{}" {
				t.Fatalf("got %s, %v", out, e)
			}
			for _, g := range tc.gone {
				if exists(dir + "/" + g) {
					t.Errorf("%s still exists", g)
				}
			}
			for _, k := range tc.kept {
				if !exists(dir + "/" + k) {
					t.Errorf("%s was removed", k)
				}
			}
		})
	}
}

// The mount guard, with a fake mount table naming directories of the test:
// nothing real is ever at risk.
func TestRemoveRefusesMountRoots(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir+"/mnt/data", []byte("keep"))
	writeTestFile(t, dir+"/outer/inner mnt/data", []byte("keep"))
	writeTestFile(t, dir+"/bindfile", []byte("keep"))
	os.Symlink(dir+"/mnt", dir+"/link-to-mnt")
	os.Symlink(dir, dir+"/selflink")
	mountinfo := fmt.Sprintf("22 1 0:21 / / rw - ext4 /dev/root rw\n"+
		"30 22 0:30 / %s rw - tmpfs tmpfs rw\n"+
		"31 22 0:31 / %s rw - tmpfs tmpfs rw\n"+
		"32 22 0:31 / %s rw - tmpfs tmpfs rw\n",
		dir+"/mnt", strings.ReplaceAll(dir+"/outer/inner mnt", " ", `\040`), dir+"/bindfile")
	writeTestFile(t, dir+"/mountinfo", []byte(mountinfo))
	f := New(Options{})
	f.mounts = mountTable{path: dir + "/mountinfo"}
	for _, tc := range []struct{ name, uri, msg string }{
		{"mount root", uri(dir + "/mnt"), "it is the root of a mounted filesystem"},
		{"mount root by ..", "file://" + dir + "/mnt/sub/..", "it is the root of a mounted filesystem"},
		{"mount root through a symlinked parent", uri(dir + "/selflink/mnt"), "it is the root of a mounted filesystem"},
		{"escaped mount point", uri(dir + "/outer/inner mnt"), "it is the root of a mounted filesystem"},
		{"a mount inside", uri(dir + "/outer"), "a filesystem is mounted inside it"},
		{"bind-mounted file", uri(dir + "/bindfile"), "it is the root of a mounted filesystem"},
		{"root", "file:///", "it is the root directory"},
		{"root by ..", "file:///tmp/..", "it is the root directory"},
		{"root by many ..", "file:///a/../../..", "it is the root directory"},
		{"root via localhost", "file://localhost/", "it is the root directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, e := call(t, f, nil, protocol.MethodFsRemove, obj("path", tc.uri))
			wantErr(t, e, protocol.CodeInvalidRequest, tc.msg)
		})
	}
	for _, p := range []string{"/mnt/data", "/outer/inner mnt/data", "/bindfile"} {
		if b, err := os.ReadFile(dir + p); err != nil || string(b) != "keep" {
			t.Fatalf("%s was touched: %v", p, err)
		}
	}
	// The link itself is not the mount root: removing it is fine and leaves
	// the mount alone.
	mustCall(t, f, nil, protocol.MethodFsRemove, obj("path", uri(dir+"/link-to-mnt")))
	if !exists(dir+"/mnt/data") || exists(dir+"/link-to-mnt") {
		t.Fatal("removing the link went wrong")
	}
}

func TestMountTableReadsTheRealOne(t *testing.T) {
	m, err := mountTable{path: "/proc/self/mountinfo"}.load()
	if err != nil {
		t.Skip(err)
	}
	if !m["/"] {
		t.Fatalf("/ is not among the mount points: %v", m)
	}
	if !m["/proc"] {
		t.Logf("/proc is not a mount point here: %v", m)
	}
}

// The real guard against the real mount table, run as uid 65534 so that even
// a broken guard could not delete anything that matters: fs/remove of "/"
// and of "/tmp/.." must be refused.
func TestRemoveRootAsNobody(t *testing.T) {
	replies := runAsNobody(t, []helperCall{
		{Method: protocol.MethodFsRemove, Params: json.RawMessage(`{"path":"file:///"}`)},
		{Method: protocol.MethodFsRemove, Params: json.RawMessage(`{"path":"file:///tmp/.."}`)},
		{Method: protocol.MethodFsRemove, Params: json.RawMessage(`{"path":"file:///proc"}`)},
	})
	for i, r := range replies {
		if r.Error == nil || r.Error.Code != protocol.CodeInvalidRequest || !strings.Contains(r.Error.Message, "fs/remove refuses") {
			t.Errorf("call %d: %+v %s", i, r.Error, r.Result)
		}
	}
}

func TestCopy(t *testing.T) {
	setup := func(t *testing.T) string {
		dir := t.TempDir()
		writeTestFile(t, dir+"/d/a.txt", []byte("hello"))
		writeTestFile(t, dir+"/d/sub/inner/f", []byte("deep"))
		writeTestFile(t, dir+"/d/.hidden", []byte("h"))
		os.Chmod(dir+"/d/a.txt", 0o640)
		os.Symlink("a.txt", dir+"/d/lnk")
		os.Symlink("nowhere", dir+"/d/dang")
		mkfifo(t, dir+"/d/fifo")
		writeTestFile(t, dir+"/existing/old", []byte("old"))
		writeTestFile(t, dir+"/file2", []byte("other"))
		return dir
	}
	type check struct {
		path string
		data string // "->target" for a symlink, "/" for a directory, "!" for absent
	}
	for _, tc := range []struct {
		name      string
		src, dst  string
		recursive any // bool, nil for absent, "null"
		code      int
		msg       string
		checks    []check
	}{
		{"file", "d/a.txt", "c", false, 0, "", []check{{"c", "hello"}, {"d/a.txt", "hello"}}},
		{"file, recursive true", "d/a.txt", "c", true, 0, "", []check{{"c", "hello"}}},
		{"file over a file", "d/a.txt", "file2", false, 0, "", []check{{"file2", "hello"}}},
		{"file onto itself keeps it", "d/a.txt", "d/a.txt", false, 0, "", []check{{"d/a.txt", "hello"}}},
		{"file onto itself via a link keeps it", "d/a.txt", "d/lnk", false, 0, "", []check{{"d/a.txt", "hello"}}},
		{"file onto a directory", "d/a.txt", "existing", false, protocol.CodeInternal, "Is a directory (os error 21)", nil},
		{"dir without recursive", "d", "c", false, protocol.CodeInvalidRequest, "fs/copy requires recursive: true when sourcePath is a directory", []check{{"c", "!"}}},
		{"recursive missing", "d/a.txt", "c", nil, protocol.CodeInvalidParams, "missing field `recursive`", nil},
		{"recursive null", "d/a.txt", "c", "null", protocol.CodeInvalidParams, "invalid type: null, expected a boolean", nil},
		{"dir into itself", "d", "d/sub/x", true, protocol.CodeInvalidRequest, "fs/copy cannot copy a directory to itself or one of its descendants", nil},
		{"dir onto itself", "d", "d", true, protocol.CodeInvalidRequest, "itself", nil},
		{"dir tree", "d", "c", true, 0, "", []check{{"c/a.txt", "hello"}, {"c/sub/inner/f", "deep"}, {"c/.hidden", "h"}, {"c/lnk", "->a.txt"}, {"c/dang", "->nowhere"}, {"c/fifo", "!"}}},
		{"dir merges into an existing dir", "d", "existing", true, 0, "", []check{{"existing/old", "old"}, {"existing/a.txt", "hello"}, {"existing/sub/inner/f", "deep"}}},
		{"dir onto a file", "d/sub", "file2", true, protocol.CodeInternal, "File exists (os error 17)", nil},
		{"symlink as a link", "d/lnk", "c", false, 0, "", []check{{"c", "->a.txt"}}},
		{"dangling symlink", "d/dang", "c", false, 0, "", []check{{"c", "->nowhere"}}},
		{"fifo", "d/fifo", "c", false, protocol.CodeInvalidRequest, "fs/copy only supports regular files, directories, and symlinks", nil},
		{"missing source", "nosuch", "c", false, protocol.CodeNotFound, "No such file or directory (os error 2)", nil},
		{"missing dest parent", "d/a.txt", "nodir/c", false, protocol.CodeNotFound, "No such file or directory (os error 2)", nil},
		{"missing dest parent, dir", "d", "nodir/c", true, protocol.CodeNotFound, "No such file or directory (os error 2)", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := setup(t)
			params := `{"sourcePath":` + string(mustJSON(uri(dir+"/"+tc.src))) + `,"destinationPath":` + string(mustJSON(uri(dir+"/"+tc.dst)))
			switch r := tc.recursive.(type) {
			case bool:
				params += fmt.Sprintf(`,"recursive":%v`, r)
			case string:
				params += `,"recursive":` + r
			}
			params += "}"
			out, e := call(t, New(Options{}), nil, protocol.MethodFsCopy, json.RawMessage(params))
			if tc.code != 0 {
				wantErr(t, e, tc.code, tc.msg)
			} else if e != nil || string(out) != "{}" {
				t.Fatalf("got %s, %v", out, e)
			}
			for _, c := range tc.checks {
				p := dir + "/" + c.path
				switch {
				case c.data == "!":
					if exists(p) {
						t.Errorf("%s exists", c.path)
					}
				case strings.HasPrefix(c.data, "->"):
					if got, err := os.Readlink(p); err != nil || got != c.data[2:] {
						t.Errorf("%s: link to %q (%v), want %q", c.path, got, err, c.data[2:])
					}
				default:
					if got, err := os.ReadFile(p); err != nil || string(got) != c.data {
						t.Errorf("%s: %q (%v), want %q", c.path, got, err, c.data)
					}
				}
			}
		})
	}
	t.Run("permissions are copied", func(t *testing.T) {
		dir := setup(t)
		mustCall(t, New(Options{}), nil, protocol.MethodFsCopy, obj("sourcePath", uri(dir+"/d/a.txt"), "destinationPath", uri(dir+"/c"), "recursive", false))
		if st, err := os.Stat(dir + "/c"); err != nil || st.Mode().Perm() != 0o640 {
			t.Fatalf("mode %v, %v", st.Mode(), err)
		}
	})
	t.Run("big file", func(t *testing.T) {
		dir := setup(t)
		data := pattern(3 << 20)
		writeTestFile(t, dir+"/big", data)
		mustCall(t, New(Options{}), nil, protocol.MethodFsCopy, obj("sourcePath", uri(dir+"/big"), "destinationPath", uri(dir+"/big2"), "recursive", false))
		if got, _ := os.ReadFile(dir + "/big2"); !bytes.Equal(got, data) {
			t.Fatal("copy differs")
		}
	})
}

// Cancellation: tree operations stop between entries once ctx is done.
func TestTreeOperationsHonourContext(t *testing.T) {
	dir := t.TempDir()
	for i := range 200 {
		writeTestFile(t, filepath.Join(dir, "tree", fmt.Sprintf("d%d", i%10), fmt.Sprintf("f%d", i)), []byte("x"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, _ := os.Lstat(dir + "/tree")
	if err := removeTree(ctx, dir+"/tree", devOf(st)); err == nil {
		t.Fatal("removeTree ignored a cancelled context")
	}
	if err := copyTree(ctx, dir+"/tree", dir+"/copy", st, nil); err == nil {
		t.Fatal("copyTree ignored a cancelled context")
	}
	if _, err := walkTree(ctx, dir+"/tree", protocol.FsWalkOptions{MaxDepth: 5, MaxDirectories: 100, MaxEntries: 1000}); err == nil {
		t.Fatal("walkTree ignored a cancelled context")
	}
	f := New(Options{})
	file, err := os.Open(dir + "/tree/d0/f0")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, err := f.readAll(ctx, file, dir+"/tree/d0/f0", 1); err == nil {
		t.Fatal("readAll ignored a cancelled context")
	}
	if _, err := readEncoded(ctx, file, 1); err == nil {
		t.Fatal("readEncoded ignored a cancelled context")
	}
	if err := writeWhole(ctx, dir+"/w", pattern(100)); err == nil {
		t.Fatal("writeWhole ignored a cancelled context")
	}
	// The whole tree is still there.
	n := 0
	filepath.WalkDir(dir+"/tree", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	if n != 200 {
		t.Fatalf("%d of 200 files left", n)
	}
	// Through Call, a cancelled request reports the cancellation.
	_, e := callCtx(t, ctx, f, nil, protocol.MethodFsRemove, obj("path", uri(dir+"/tree")))
	wantErr(t, e, protocol.CodeInternal, "cancelled")
}

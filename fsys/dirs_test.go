package fsys

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/execgo/exec-server/protocol"
)

func TestCreateDirectory(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir+"/file", []byte("x"))
	os.Symlink("nowhere", dir+"/dangling")
	os.Symlink("file", dir+"/filelink")
	os.Mkdir(dir+"/exists", 0o755)
	f := New(Options{})
	no := false
	yes := true
	for _, tc := range []struct {
		name      string
		path      string
		recursive *bool
		code      int
		msg       string
		wantDir   string
	}{
		{"default is recursive", dir + "/a/b/c", nil, 0, "", dir + "/a/b/c"},
		{"recursive true", dir + "/r/s", &yes, 0, "", dir + "/r/s"},
		{"existing dir, recursive", dir + "/exists", nil, 0, "", dir + "/exists"},
		{"non-recursive, parent missing", dir + "/m/n", &no, protocol.CodeNotFound, "No such file or directory (os error 2)", ""},
		{"non-recursive, new", dir + "/single", &no, 0, "", dir + "/single"},
		{"non-recursive, exists", dir + "/exists", &no, protocol.CodeInternal, "File exists (os error 17)", ""},
		{"existing file", dir + "/file", nil, protocol.CodeInternal, "File exists (os error 17)", ""},
		{"existing file, non-recursive", dir + "/file", &no, protocol.CodeInternal, "File exists (os error 17)", ""},
		{"dangling link", dir + "/dangling", nil, protocol.CodeInternal, "File exists (os error 17)", ""},
		{"under a file", dir + "/file/sub", nil, protocol.CodeInternal, "Not a directory (os error 20)", ""},
		{"under a link to a file", dir + "/filelink/sub", nil, protocol.CodeInternal, "Not a directory (os error 20)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := obj("path", uri(tc.path))
			if tc.recursive != nil {
				params["recursive"] = *tc.recursive
			}
			out, e := call(t, f, nil, protocol.MethodFsCreateDirectory, params)
			if tc.code != 0 {
				wantErr(t, e, tc.code, tc.msg)
				return
			}
			if e != nil || string(out) != "{}" {
				t.Fatalf("got %s, %v", out, e)
			}
			if st, err := os.Stat(tc.wantDir); err != nil || !st.IsDir() {
				t.Fatalf("%s is not a directory: %v", tc.wantDir, err)
			}
		})
	}
	t.Run("recursive null is the default", func(t *testing.T) {
		mustCall(t, f, nil, protocol.MethodFsCreateDirectory, json.RawMessage(`{"path":"`+uri(dir+"/nul/x")+`","recursive":null}`))
	})
}

func TestGetMetadata(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir+"/file", []byte("hello world"))
	os.Mkdir(dir+"/sub", 0o755)
	os.Symlink("file", dir+"/link")
	os.Symlink("sub", dir+"/dirlink")
	os.Symlink("nowhere", dir+"/dangling")
	mkfifo(t, dir+"/fifo")
	mtime := time.Date(2024, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	os.Chtimes(dir+"/file", mtime, mtime)
	f := New(Options{})
	for _, tc := range []struct {
		name string
		path string
		want protocol.FsMetadata // times are checked apart
		code int
	}{
		{"file", dir + "/file", protocol.FsMetadata{IsFile: true, Size: 11}, 0},
		{"dir", dir + "/sub", protocol.FsMetadata{IsDirectory: true}, 0},
		{"link to file", dir + "/link", protocol.FsMetadata{IsFile: true, IsSymlink: true, Size: 11}, 0},
		{"link to dir", dir + "/dirlink", protocol.FsMetadata{IsDirectory: true, IsSymlink: true}, 0},
		{"fifo", dir + "/fifo", protocol.FsMetadata{}, 0},
		{"trailing slash on a file", dir + "/file/", protocol.FsMetadata{IsFile: true, Size: 11}, 0},
		{"dangling", dir + "/dangling", protocol.FsMetadata{}, protocol.CodeNotFound},
		{"missing", dir + "/nosuch", protocol.FsMetadata{}, protocol.CodeNotFound},
		{"under a file", dir + "/file/x", protocol.FsMetadata{}, protocol.CodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, e := call(t, f, nil, protocol.MethodFsGetMetadata, obj("path", uri(tc.path)))
			if tc.code != 0 {
				wantErr(t, e, tc.code, "")
				return
			}
			if e != nil {
				t.Fatal(e)
			}
			got := decodeResult[protocol.FsMetadata](t, out)
			if got.ModifiedAtMs <= 0 || got.CreatedAtMs < 0 {
				t.Fatalf("times %+v", got)
			}
			if tc.want.IsDirectory {
				tc.want.Size = got.Size // filesystem-dependent
			}
			tc.want.ModifiedAtMs, tc.want.CreatedAtMs = got.ModifiedAtMs, got.CreatedAtMs
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	out := mustCall(t, f, nil, protocol.MethodFsGetMetadata, obj("path", uri(dir+"/file")))
	if m := decodeResult[protocol.FsMetadata](t, out); m.ModifiedAtMs != mtime.UnixMilli() {
		t.Fatalf("modifiedAtMs %d, want %d", m.ModifiedAtMs, mtime.UnixMilli())
	}
	// Exactly the reference's keys, in its order.
	var keys []string
	dec := json.NewDecoder(bytesReader(out))
	dec.Token()
	for dec.More() {
		k, _ := dec.Token()
		keys = append(keys, k.(string))
		var v any
		dec.Decode(&v)
	}
	if want := []string{"isDirectory", "isFile", "isSymlink", "size", "createdAtMs", "modifiedAtMs"}; !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
}

func TestCanonicalize(t *testing.T) {
	dir := t.TempDir()
	real := dir + "/real dir#1"
	os.Mkdir(real, 0o755)
	writeTestFile(t, real+"/f", nil)
	os.Symlink("real dir#1", dir+"/link")
	os.Symlink("nowhere", dir+"/dangling")
	f := New(Options{})
	for _, tc := range []struct {
		name, path, want string
		code             int
	}{
		{"dir link", dir + "/link", uri(real), 0},
		{"through a link", dir + "/link/f", uri(real + "/f"), 0},
		{"root", "/", "file:///", 0},
		{"dangling", dir + "/dangling", "", protocol.CodeNotFound},
		{"missing", dir + "/nosuch", "", protocol.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, e := call(t, f, nil, protocol.MethodFsCanonicalize, obj("path", uri(tc.path)))
			if tc.code != 0 {
				wantErr(t, e, tc.code, "No such file or directory (os error 2)")
				return
			}
			if e != nil {
				t.Fatal(e)
			}
			if got := decodeResult[protocol.FsCanonicalizeResult](t, out).Path; got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
	// ".." is lexical, before any symlink is looked at: link/.. is dir.
	out := mustCall(t, f, nil, protocol.MethodFsCanonicalize, obj("path", "file://"+dir+"/link/../link/f"))
	if got := decodeResult[protocol.FsCanonicalizeResult](t, out).Path; got != uri(real+"/f") {
		t.Fatalf("got %s", got)
	}
}

func TestReadDirectory(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir+"/a.txt", []byte("a"))
	writeTestFile(t, dir+"/.hidden", nil)
	os.Mkdir(dir+"/sub", 0o755)
	os.Symlink("a.txt", dir+"/lnk")
	os.Symlink("sub", dir+"/dl")
	os.Symlink("nowhere", dir+"/dang")
	mkfifo(t, dir+"/fifo")
	writeTestFile(t, dir+"/odd name é", nil)
	f := New(Options{})
	out := mustCall(t, f, nil, protocol.MethodFsReadDirectory, obj("path", uri(dir)))
	res := decodeResult[protocol.FsReadDirectoryResult](t, out)
	got := map[string]protocol.FsDirEntry{}
	for _, e := range res.Entries {
		got[e.FileName] = e
	}
	want := map[string]protocol.FsDirEntry{
		"a.txt":      {FileName: "a.txt", IsFile: true},
		".hidden":    {FileName: ".hidden", IsFile: true},
		"sub":        {FileName: "sub", IsDirectory: true},
		"lnk":        {FileName: "lnk", IsFile: true},
		"dl":         {FileName: "dl", IsDirectory: true},
		"fifo":       {FileName: "fifo"},
		"odd name é": {FileName: "odd name é", IsFile: true},
	}
	if len(got) != len(res.Entries) || len(got) != len(want) {
		t.Fatalf("entries %+v", res.Entries)
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%q: got %+v, want %+v", k, got[k], w)
		}
	}
	// Empty directory: an empty array, not null.
	os.Mkdir(dir+"/empty", 0o755)
	if out := mustCall(t, f, nil, protocol.MethodFsReadDirectory, obj("path", uri(dir+"/empty"))); string(out) != `{"entries":[]}` {
		t.Fatalf("got %s", out)
	}
	_, e := call(t, f, nil, protocol.MethodFsReadDirectory, obj("path", uri(dir+"/a.txt")))
	wantErr(t, e, protocol.CodeInternal, "Not a directory (os error 20)")
	_, e = call(t, f, nil, protocol.MethodFsReadDirectory, obj("path", uri(dir+"/nosuch")))
	wantErr(t, e, protocol.CodeNotFound, "No such file or directory (os error 2)")
}

// Permission errors as a non-root user (uid 65534 in a helper process):
// -32600 with the OS text, as the reference answers them; fs/walk reports an
// unreadable directory in errors and goes on.
func TestPermissionDeniedAsNobody(t *testing.T) {
	dir := makeWalkTree(t)
	openUp(t, dir)
	writeTestFile(t, dir+"/d/priv", []byte("secret"))
	os.Chmod(dir+"/d/priv", 0o600)
	u := func(p string) string { return string(mustJSON(uri(dir + p))) }
	const denied = "Permission denied (os error 13)"
	calls := []struct {
		method, params, want string
	}{
		{"fs/readFile", `{"path":` + u("/d/priv") + `}`, denied},
		{"fs/writeFile", `{"path":` + u("/d/priv") + `,"dataBase64":""}`, denied},
		{"fs/readDirectory", `{"path":` + u("/d/noperm") + `}`, denied},
		{"fs/getMetadata", `{"path":` + u("/d/noperm/x") + `}`, denied},
		{"fs/createDirectory", `{"path":` + u("/d/newdir") + `}`, denied},
		{"fs/remove", `{"path":` + u("/d/x.txt") + `}`, denied},
		{"fs/open", `{"handleId":"a","path":` + u("/d/priv") + `}`, denied},
		{"fs/copy", `{"sourcePath":` + u("/d/priv") + `,"destinationPath":` + u("/d/priv2") + `,"recursive":false}`, denied},
		{"fs/walk", `{"path":` + u("/d") + `,"options":{"maxDepth":10,"maxDirectories":100,"maxEntries":100,"followDirectorySymlinks":false}}`, ""},
		{"fs/walk", `{"path":` + u("/d/noperm") + `,"options":{"maxDepth":10,"maxDirectories":100,"maxEntries":100,"followDirectorySymlinks":false}}`, ""},
	}
	var hc []helperCall
	for _, c := range calls {
		hc = append(hc, helperCall{Method: c.method, Params: json.RawMessage(c.params)})
	}
	replies := runAsNobody(t, hc)
	for i, c := range calls {
		r := replies[i]
		if c.want != "" {
			if r.Error == nil || r.Error.Code != protocol.CodeInvalidRequest || r.Error.Message != c.want {
				t.Errorf("%s: got %+v %s, want -32600 %q", c.method, r.Error, r.Result, c.want)
			}
			continue
		}
		if r.Error != nil {
			t.Fatalf("%s: %v", c.method, r.Error)
		}
	}
	// The reference's answers for the two walks.
	if got, want := walkSummary(t, dir, replies[8].Result), "d/e/ d/noperm/ d/priv d/x.txt d/e/f/ d/e/y d/e/f/g/ error:d/noperm:"+denied; got != want {
		t.Errorf("walk as nobody:\n got  %s\n want %s", got, want)
	}
	if got, want := walkSummary(t, dir, replies[9].Result), "error:d/noperm:"+denied; got != want {
		t.Errorf("walk of an unreadable root:\n got  %s\n want %s", got, want)
	}
	if exists(dir+"/d/priv2") || exists(dir+"/d/newdir") || !exists(dir+"/d/x.txt") {
		t.Error("a refused operation changed the tree")
	}
	if b, _ := os.ReadFile(dir + "/d/priv"); string(b) != "secret" {
		t.Error("a refused write truncated the file")
	}
}

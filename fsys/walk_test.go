package fsys

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// walkTree builds the tree the reference was probed with:
//
//	d/ dang -> nowhere, dlink -> e, e/, fifo, lnk -> x.txt, noperm/ (000), x.txt
//	d/e/ f/, y      d/e/f/ g/
func makeWalkTree(t *testing.T) string {
	dir := t.TempDir()
	for _, p := range []string{"d/e/f/g", "d/noperm"} {
		if err := os.MkdirAll(dir+"/"+p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeTestFile(t, dir+"/d/x.txt", []byte("hi\n"))
	writeTestFile(t, dir+"/d/e/y", []byte("a\n"))
	os.Symlink("x.txt", dir+"/d/lnk")
	os.Symlink("nowhere", dir+"/d/dang")
	os.Symlink("e", dir+"/d/dlink")
	mkfifo(t, dir+"/d/fifo")
	os.Chmod(dir+"/d/noperm", 0)
	t.Cleanup(func() { os.Chmod(dir+"/d/noperm", 0o755) })
	return dir
}

// walkSummary renders a result compactly: "d/e(dir) d/x.txt ... [truncated]".
func walkSummary(t *testing.T, dir string, out json.RawMessage) string {
	t.Helper()
	res := decodeResult[protocol.FsWalkResult](t, out)
	var parts []string
	prefix := uri(dir) + "/"
	for _, e := range res.Entries {
		s := strings.TrimPrefix(e.Path, prefix)
		if e.Kind == protocol.FsKindDirectory {
			s += "/"
		} else if e.Kind != protocol.FsKindFile {
			s += "(" + e.Kind + ")"
		}
		parts = append(parts, s)
	}
	for _, e := range res.Errors {
		parts = append(parts, "error:"+strings.TrimPrefix(e.Path, prefix)+":"+e.Message)
	}
	if res.Truncated {
		parts = append(parts, "[truncated]")
	}
	return strings.Join(parts, " ")
}

// The expectations are the reference's answers on the same tree.
func TestWalkMatchesReference(t *testing.T) {
	dir := makeWalkTree(t)
	f := New(Options{})
	const all = "d/e/ d/noperm/ d/x.txt d/e/f/ d/e/y d/e/f/g/"
	for _, tc := range []struct {
		path                 string
		depth, dirs, entries int
		follow               bool
		want                 string
	}{
		{"d", 10, 100, 100, false, all},
		{"d", 1, 100, 100, false, "d/e/ d/noperm/ d/x.txt d/e/f/ d/e/y"},
		{"d", 0, 100, 100, false, "d/e/ d/noperm/ d/x.txt"},
		{"d", 10, 100, 100, true, "d/dlink/ d/e/ d/noperm/ d/x.txt d/dlink/f/ d/dlink/y d/dlink/f/g/"},
		{"d", 10, 1, 100, false, "d/e/ d/noperm/ d/x.txt [truncated]"},
		{"d", 10, 2, 100, false, "d/e/ d/noperm/ d/x.txt d/e/f/ d/e/y [truncated]"},
		{"d", 10, 3, 100, false, "d/e/ d/noperm/ d/x.txt d/e/f/ d/e/y [truncated]"},
		{"d", 10, 4, 100, false, all + " [truncated]"},
		{"d", 10, 5, 100, false, all},
		{"d", 10, 100, 1, false, "[truncated]"},
		{"d", 10, 100, 2, false, "d/e/ [truncated]"},
		{"d", 10, 100, 3, false, "d/e/ [truncated]"},
		{"d", 10, 100, 4, false, "d/e/ [truncated]"},
		{"d", 10, 100, 7, false, "d/e/ d/noperm/ d/x.txt d/e/f/ [truncated]"},
		{"d", 10, 100, 8, false, "d/e/ d/noperm/ d/x.txt d/e/f/ d/e/y [truncated]"},
		{"d", 10, 100, 9, false, all},
		{"d", 10, 100, 10, false, all},
		{"d/x.txt", 10, 100, 100, false, ""},
		{"d/lnk", 3, 100, 100, false, ""},
		{"d/dlink", 3, 100, 100, false, ""},
		{"d/dlink", 10, 100, 100, true, "d/dlink/f/ d/dlink/y d/dlink/f/g/"},
	} {
		name := fmt.Sprintf("%s depth=%d dirs=%d entries=%d follow=%v", tc.path, tc.depth, tc.dirs, tc.entries, tc.follow)
		t.Run(name, func(t *testing.T) {
			out := mustCall(t, f, nil, protocol.MethodFsWalk, obj("path", uri(dir+"/"+tc.path), "options", obj(
				"maxDepth", tc.depth, "maxDirectories", tc.dirs, "maxEntries", tc.entries, "followDirectorySymlinks", tc.follow)))
			if got := walkSummary(t, dir, out); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	t.Run("empty result shape", func(t *testing.T) {
		out := mustCall(t, f, nil, protocol.MethodFsWalk, obj("path", uri(dir+"/d/x.txt"), "options", obj(
			"maxDepth", 1, "maxDirectories", 1, "maxEntries", 1, "followDirectorySymlinks", false)))
		if string(out) != `{"entries":[],"errors":[],"truncated":false}` {
			t.Fatalf("got %s", out)
		}
	})
}

func TestWalkErrors(t *testing.T) {
	dir := makeWalkTree(t)
	f := New(Options{})
	p := `"` + uri(dir+"/d") + `"`
	for _, tc := range []struct {
		params string
		code   int
		msg    string
	}{
		{`{"path":` + p + `,"options":{"maxDepth":65,"maxDirectories":1,"maxEntries":1,"followDirectorySymlinks":false}}`, protocol.CodeInvalidRequest, "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"},
		{`{"path":` + p + `,"options":{"maxDepth":1,"maxDirectories":10001,"maxEntries":1,"followDirectorySymlinks":false}}`, protocol.CodeInvalidRequest, "exceed maximums"},
		{`{"path":` + p + `,"options":{"maxDepth":1,"maxDirectories":1,"maxEntries":50001,"followDirectorySymlinks":false}}`, protocol.CodeInvalidRequest, "exceed maximums"},
		{`{"path":` + p + `,"options":{"maxDepth":1,"maxDirectories":0,"maxEntries":1,"followDirectorySymlinks":false}}`, protocol.CodeInvalidRequest, "filesystem walk limits must be greater than zero"},
		{`{"path":` + p + `,"options":{"maxDepth":1,"maxDirectories":1,"maxEntries":0,"followDirectorySymlinks":false}}`, protocol.CodeInvalidRequest, "filesystem walk limits must be greater than zero"},
		{`{"path":` + p + `,"options":{"maxDepth":-1,"maxDirectories":1,"maxEntries":1,"followDirectorySymlinks":false}}`, protocol.CodeInvalidParams, ""},
		{`{"path":` + p + `,"options":{"maxDepth":1,"maxDirectories":1,"maxEntries":1}}`, protocol.CodeInvalidParams, "missing field `followDirectorySymlinks`"},
		{`{"path":` + p + `,"options":{}}`, protocol.CodeInvalidParams, "missing field `maxDepth`"},
		{`{"path":` + p + `,"options":null}`, protocol.CodeInvalidParams, "invalid type: null, expected struct WalkOptions"},
		{`{"path":` + p + `}`, protocol.CodeInvalidParams, "missing field `options`"},
		{`null`, protocol.CodeInvalidParams, "expected struct WireFsWalkParams"},
		{`{"path":"` + uri(dir+"/nosuch") + `","options":{"maxDepth":1,"maxDirectories":1,"maxEntries":1,"followDirectorySymlinks":false}}`, protocol.CodeNotFound, "No such file or directory (os error 2)"},
	} {
		_, e := call(t, f, nil, protocol.MethodFsWalk, json.RawMessage(tc.params))
		wantErr(t, e, tc.code, tc.msg)
	}
}

func TestWalkEscapesPathsAsTheReference(t *testing.T) {
	dir := t.TempDir()
	name := "a b%c#d?é{}`<>\"'!$&()*+,;=:@[]^|~"
	writeTestFile(t, dir+"/"+name, nil)
	writeTestFile(t, dir+"/x\\y", nil)
	out := mustCall(t, New(Options{}), nil, protocol.MethodFsWalk, obj("path", uri(dir), "options", obj(
		"maxDepth", 1, "maxDirectories", 10, "maxEntries", 10, "followDirectorySymlinks", false)))
	res := decodeResult[protocol.FsWalkResult](t, out)
	want := []string{
		uri(dir) + "/a%20b%25c%23d%3F%C3%A9%7B%7D%60%3C%3E%22'!$&()*+,;=:@[]^|~",
		uri(dir) + "/x%5Cy",
	}
	if len(res.Entries) != 2 || res.Entries[0].Path != want[0] || res.Entries[1].Path != want[1] {
		t.Fatalf("got %+v\nwant %v", res.Entries, want)
	}
	// And every listed path reads back through the URI parser.
	for _, e := range res.Entries {
		mustCall(t, New(Options{}), nil, protocol.MethodFsGetMetadata, obj("path", e.Path))
	}
}

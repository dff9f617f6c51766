package fsys

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// TestMatchesReference runs the same requests against the reference
// (EXEC_SERVER_REFERENCE, the codex binary) and our server, each on a fresh
// copy of the same tree at the same path, and compares the replies byte for
// byte (times excepted). Known, deliberate differences compare codes only.
func TestMatchesReference(t *testing.T) {
	ref := os.Getenv("EXEC_SERVER_REFERENCE")
	if ref == "" {
		t.Skip("EXEC_SERVER_REFERENCE not set")
	}
	bin := buildServer(t)
	base := t.TempDir()
	T := base + "/t"
	u := func(p string) string { return "file://" + T + "/" + p }
	build := func() {
		os.RemoveAll(T)
		for _, d := range []string{"d/e/f/g", "d/noperm", "r/full/x", "r/empty", "existing/old"} {
			if err := os.MkdirAll(T+"/"+d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		files := map[string]string{"d/x.txt": "hi\n", "d/e/y": "a\n", "f10": "0123456789", "r/f": "q",
			"d/a b%c#d?é{}`<>\"'!$&()*+,;=:@[]^|~": "odd"}
		for p, c := range files {
			writeTestFile(t, T+"/"+p, []byte(c))
		}
		os.Symlink("x.txt", T+"/d/lnk")
		os.Symlink("nowhere", T+"/d/dang")
		os.Symlink("e", T+"/d/dlink")
		os.Symlink("full", T+"/r/dl")
		syscall.Mkfifo(T+"/d/fifo", 0o644)
	}
	type req struct {
		method string
		params any
		known  string // why only the code is compared
	}
	var reqs []req
	R := func(m string, p any) { reqs = append(reqs, req{method: m, params: p}) }
	walk := func(p string, depth, dirs, entries int, follow bool) {
		R("fs/walk", obj("path", u(p), "options", obj("maxDepth", depth, "maxDirectories", dirs, "maxEntries", entries, "followDirectorySymlinks", follow)))
	}
	for _, w := range [][4]int{{10, 100, 100, 0}, {1, 100, 100, 0}, {0, 100, 100, 0}, {10, 100, 100, 1}, {10, 2, 100, 0}, {10, 100, 2, 0}, {10, 100, 7, 0}} {
		walk("d", w[0], w[1], w[2], w[3] == 1)
	}
	walk("d/dlink", 10, 100, 100, true)
	walk("d/x.txt", 1, 1, 1, false)
	for _, p := range []string{"d", "d/x.txt/x", "d/lnk", "d/dang", "d/nosuch", "d/sub/../x.txt", "f10", "d/%78.txt", "d/x.txt?q=1", "d/x.txt#f"} {
		R("fs/readFile", obj("path", u(p)))
	}
	for _, p := range []string{"/etc/passwd", "file://host/x", "http://x/y", "file://localhost" + T + "/d/x.txt", "FILE://" + T + "/d/x.txt", "file://localhost:80/x"} {
		R("fs/readFile", obj("path", p))
	}
	R("fs/readFile", nil)
	R("fs/readFile", obj())
	for _, p := range []string{"d/x.txt", "d", "d/lnk", "d/dlink", "d/fifo", "d/dang", "d/x.txt/"} {
		R("fs/getMetadata", obj("path", u(p)))
	}
	for _, p := range []string{"d/dlink", "d/dlink/../x.txt", "d/dang", "d/a%20b%25c%23d%3F%C3%A9%7B%7D%60%3C%3E%22'!$&()*+,;=:@[]^|~"} {
		R("fs/canonicalize", obj("path", u(p)))
	}
	R("fs/readDirectory", obj("path", u("d")))
	R("fs/readDirectory", obj("path", u("d/x.txt")))
	for _, d := range []string{"abc", "!!!!", "YQ", "YR==", "Y", "YWJj\nZA==", "YWJjZ", "YWJjZA=a", ""} {
		R("fs/writeFile", obj("path", u("w1"), "dataBase64", d))
	}
	R("fs/writeFile", obj("path", u("d"), "dataBase64", "YQ=="))
	R("fs/writeFile", obj("path", u("nodir/x"), "dataBase64", "YQ=="))
	R("fs/writeFile", obj("path", u("d/dang"), "dataBase64", "YQ=="))
	R("fs/readFile", obj("path", u("d/nowhere")))
	R("fs/writeFile", obj("path", u("d/lnk"), "dataBase64", "aGk="))
	R("fs/readFile", obj("path", u("d/x.txt")))
	R("fs/createDirectory", obj("path", u("m/a/b"), "recursive", false))
	R("fs/createDirectory", obj("path", u("m/a/b")))
	R("fs/createDirectory", obj("path", u("m/a/b"), "recursive", false))
	R("fs/createDirectory", obj("path", u("d/x.txt")))
	R("fs/createDirectory", obj("path", u("d/x.txt/sub")))
	R("fs/createDirectory", obj("path", u("d/dang")))
	cp := func(s, d string, r any) {
		p := obj("sourcePath", u(s), "destinationPath", u(d))
		if r != "absent" {
			p["recursive"] = r
		}
		R("fs/copy", p)
	}
	cp("d/e", "c1", "absent")
	cp("d/e", "c2", false)
	cp("d", "d/e/x", true)
	cp("d/fifo", "c4", true)
	cp("d/lnk", "c5", false)
	cp("d/dang", "c6", false)
	cp("d/x.txt", "existing", false)
	cp("d/e", "existing", true)
	cp("d/nosuch", "c9", false)
	cp("d/x.txt", "nodir/x", false)
	cp("d/e", "f10", true)
	cp("d/x.txt", "c15", nil)
	R("fs/readDirectory", obj("path", u("existing")))
	R("fs/remove", obj("path", u("r/full"), "recursive", false))
	R("fs/remove", obj("path", u("r/empty"), "recursive", false))
	R("fs/remove", obj("path", u("r/nosuch")))
	R("fs/remove", obj("path", u("r/nosuch"), "force", false))
	R("fs/remove", obj("path", u("r/dl")))
	R("fs/remove", obj("path", u("r/f/x")))
	R("fs/remove", obj("path", u("r/nosuch/x")))
	R("fs/remove", obj("path", u("r/f"), "recursive", false, "force", nil))
	R("fs/readDirectory", obj("path", u("r")))
	R("fs/open", obj("handleId", "h", "path", u("f10")))
	for _, ol := range [][2]int{{0, 4}, {8, 2}, {8, 3}, {20, 3}, {0, 0}, {0, 1048577}, {10, 1}, {9, 1}} {
		R("fs/readBlock", obj("handleId", "h", "offset", ol[0], "len", ol[1]))
	}
	reqs = append(reqs, req{"fs/readBlock", obj("handleId", "h", "offset", -1, "len", 1), "the text names the field"})
	R("fs/readBlock", obj("handleId", "nope", "offset", 0, "len", 1))
	R("fs/writeBlock", obj("handleId", "h", "offset", 0, "chunk", "YQ=="))
	R("fs/open", obj("handleId", "h", "path", u("f10")))
	R("fs/open", obj("handleId", "w", "path", u("new"), "mode", "replace"))
	R("fs/writeBlock", obj("handleId", "w", "offset", 5, "chunk", "YQ=="))
	R("fs/readBlock", obj("handleId", "w", "offset", 0, "len", 1))
	R("fs/writeBlock", obj("handleId", "w", "offset", 0, "chunk", ""))
	R("fs/writeBlock", obj("handleId", "nope", "offset", 0, "chunk", "YQ=="))
	R("fs/writeBlock", obj("handleId", "w", "offset", 0, "chunk", "!!"))
	R("fs/open", obj("handleId", "x", "path", u("f10"), "mode", "append"))
	R("fs/open", obj("handleId", "x", "path", u("d")))
	R("fs/open", obj("handleId", "x", "path", u("nosuch")))
	R("fs/open", obj("handleId", "x", "path", u("d"), "mode", "replace"))
	R("fs/close", obj("handleId", "w"))
	R("fs/close", obj("handleId", "w"))
	R("fs/readFile", obj("path", u("new")))
	R("fs/readBlock", json.RawMessage(`{"handleId":"h","offset":18446744073709551615,"len":1}`))
	for _, m := range []string{"readFile", "writeFile", "createDirectory", "getMetadata", "canonicalize", "readDirectory", "remove", "copy", "walk", "open", "readBlock", "writeBlock", "close"} {
		R("fs/"+m, nil)
		R("fs/"+m, obj())
	}

	run := func(cmd *exec.Cmd) []stdioReply {
		build()
		c := startStdio(t, cmd)
		out := make([]stdioReply, len(reqs))
		for i, r := range reqs {
			out[i] = c.send(r.method, r.params)
		}
		return out
	}
	refCmd := exec.Command(ref, "exec-server", "--listen", "stdio")
	refCmd.Env = append(os.Environ(), "CODEX_HOME="+t.TempDir())
	want := run(refCmd)
	got := run(exec.Command(bin, "--listen", "stdio"))
	norm := func(r stdioReply) string {
		if r.Error != nil {
			// The data member (the error's kind) is our extension.
			b, _ := json.Marshal(protocol.Error{Code: r.Error.Code, Message: r.Error.Message})
			return "error " + string(b)
		}
		var m map[string]any
		if json.Unmarshal(r.Result, &m) == nil {
			delete(m, "modifiedAtMs")
			delete(m, "createdAtMs")
			b, _ := json.Marshal(m)
			return string(b)
		}
		return string(r.Result)
	}
	for i, r := range reqs {
		w, g := norm(want[i]), norm(got[i])
		if r.known != "" {
			if (want[i].Error == nil) != (got[i].Error == nil) || (want[i].Error != nil && want[i].Error.Code != got[i].Error.Code) {
				t.Errorf("%s %v (%s):\n ref  %s\n ours %s", r.method, r.params, r.known, w, g)
			}
			continue
		}
		if w != g {
			t.Errorf("%s %s:\n ref  %s\n ours %s", r.method, strings.TrimSpace(string(mustJSON(r.params))), w, g)
		}
	}
}

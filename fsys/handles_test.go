package fsys

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/protocol"
)

// The sequence the reference was probed with, and its answers.
func TestHandlesMatchReference(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir+"/f", []byte("0123456789"))
	os.Mkdir(dir+"/dir", 0o755)
	f := New(Options{})
	h := f.NewHandles()
	defer h.CloseAll()
	F := mustJSON(uri(dir + "/f"))
	for i, tc := range []struct {
		method, params, want string // want: a result, or "error CODE text"
	}{
		{"fs/open", `{"handleId":"h","path":` + string(F) + `}`, `{"handleId":"h"}`},
		{"fs/readBlock", `{"handleId":"h","offset":0,"len":4}`, `{"chunk":"MDEyMw==","eof":false}`},
		{"fs/readBlock", `{"handleId":"h","offset":8,"len":2}`, `{"chunk":"ODk=","eof":false}`},
		{"fs/readBlock", `{"handleId":"h","offset":8,"len":3}`, `{"chunk":"ODk=","eof":true}`},
		{"fs/readBlock", `{"handleId":"h","offset":20,"len":3}`, `{"chunk":"","eof":true}`},
		{"fs/readBlock", `{"handleId":"h","offset":10,"len":1}`, `{"chunk":"","eof":true}`},
		{"fs/readBlock", `{"handleId":"h","offset":9,"len":1}`, `{"chunk":"OQ==","eof":false}`},
		{"fs/readBlock", `{"handleId":"h","offset":0,"len":0}`, "error -32600 file read block length must be between 1 and 1048576"},
		{"fs/readBlock", `{"handleId":"h","offset":0,"len":1048577}`, "error -32600 file read block length must be between 1 and 1048576"},
		{"fs/readBlock", `{"handleId":"h","offset":-1,"len":1}`, "error -32602 "},
		{"fs/readBlock", `{"handleId":"h","offset":0,"len":-1}`, "error -32602 "},
		{"fs/readBlock", `{"handleId":"h","offset":0}`, "error -32602 missing field `len`"},
		{"fs/readBlock", `{"handleId":"h","offset":18446744073709551615,"len":1}`, "error -32600 Invalid argument (os error 22)"},
		{"fs/readBlock", `{"handleId":"nope","offset":0,"len":1}`, "error -32004 unknown file handle `nope`"},
		{"fs/readBlock", `null`, "error -32602 invalid type: null, expected struct FsReadBlockParams"},
		{"fs/writeBlock", `{"handleId":"h","offset":0,"chunk":"YQ=="}`, "error -32603 Bad file descriptor (os error 9)"},
		{"fs/open", `{"handleId":"h","path":` + string(F) + `}`, "error -32600 file handle `h` already exists"},
		{"fs/open", `{"handleId":"w","path":"` + uri(dir+"/new") + `","mode":"replace"}`, `{"handleId":"w"}`},
		{"fs/writeBlock", `{"handleId":"w","offset":5,"chunk":"YQ=="}`, `{}`},
		{"fs/readBlock", `{"handleId":"w","offset":0,"len":1}`, "error -32603 Bad file descriptor (os error 9)"},
		{"fs/writeBlock", `{"handleId":"w","offset":0,"chunk":""}`, "error -32600 file write block length must be between 1 and 1048576"},
		{"fs/writeBlock", `{"handleId":"nope","offset":0,"chunk":""}`, "error -32600 file write block length must be between 1 and 1048576"},
		{"fs/writeBlock", `{"handleId":"nope","offset":0,"chunk":"YQ=="}`, "error -32004 unknown file handle `nope`"},
		{"fs/writeBlock", `{"handleId":"w","offset":0,"chunk":"!!"}`, "error -32602 Invalid symbol 33, offset 0."},
		{"fs/writeBlock", `{"handleId":"w","offset":-1,"chunk":"YQ=="}`, "error -32602 "},
		{"fs/open", `{"handleId":"x","path":` + string(F) + `,"mode":"append"}`, "error -32602 unknown variant `append`, expected `read` or `replace`"},
		{"fs/open", `{"handleId":"x","path":"` + uri(dir+"/dir") + `"}`, "error -32600 path `" + dir + "/dir` is not a file"},
		{"fs/open", `{"handleId":"x","path":"` + uri(dir+"/nosuch") + `"}`, "error -32004 No such file or directory (os error 2)"},
		{"fs/open", `{"handleId":"x","path":"` + uri(dir+"/nod/x") + `","mode":"replace"}`, "error -32004 No such file or directory (os error 2)"},
		{"fs/open", `{"handleId":"x","path":"` + uri(dir+"/dir") + `","mode":"replace"}`, "error -32603 Is a directory (os error 21)"},
		{"fs/open", `{"handleId":"x","path":"file:///dev/null"}`, "error -32600 path `/dev/null` is not a file"},
		{"fs/open", `{"handleId":"x","path":"file:///dev/null","mode":"replace"}`, "error -32600 path `/dev/null` is not a file"},
		{"fs/open", `{"handleId":"","path":` + string(F) + `,"mode":null}`, "error -32602 invalid type: null, expected string or map"},
		{"fs/open", `{}`, "error -32602 missing field `handleId`"},
		{"fs/open", `null`, "error -32602 invalid type: null, expected struct WireFsOpenParams"},
		{"fs/close", `{"handleId":"w"}`, `{}`},
		{"fs/close", `{"handleId":"w"}`, `{}`},
		{"fs/close", `{"handleId":"never"}`, `{}`},
		{"fs/close", `{}`, "error -32602 missing field `handleId`"},
		{"fs/writeBlock", `{"handleId":"w","offset":0,"chunk":"YQ=="}`, "error -32004 unknown file handle `w`"},
		{"fs/open", `{"handleId":"","path":` + string(F) + `}`, `{"handleId":""}`},
		{"fs/readBlock", `{"handleId":"","offset":0,"len":1048576}`, `{"chunk":"MDEyMzQ1Njc4OQ==","eof":true}`},
	} {
		out, e := call(t, f, h, tc.method, json.RawMessage(tc.params))
		got := string(out)
		if e != nil {
			got = fmt.Sprintf("error %d %s", e.Code, e.Message)
		}
		if !strings.HasPrefix(got, tc.want) || (e == nil && got != tc.want) {
			t.Errorf("step %d %s %s:\n got  %s\n want %s", i, tc.method, tc.params, got, tc.want)
		}
	}
	if got, _ := os.ReadFile(dir + "/new"); !bytes.Equal(got, []byte("\x00\x00\x00\x00\x00a")) {
		t.Fatalf("written file %q", got)
	}
}

func TestHandleLimitAndCloseAll(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir+"/f", []byte("x"))
	f := New(Options{MaxHandles: 4})
	h := f.NewHandles()
	for i := range 4 {
		mustCall(t, f, h, protocol.MethodFsOpen, obj("handleId", fmt.Sprint(i), "path", uri(dir+"/f")))
	}
	_, e := call(t, f, h, protocol.MethodFsOpen, obj("handleId", "over", "path", uri(dir+"/f")))
	wantErr(t, e, protocol.CodeInvalidRequest, "too many open file handles: at most 4")
	mustCall(t, f, h, protocol.MethodFsClose, obj("handleId", "0"))
	mustCall(t, f, h, protocol.MethodFsOpen, obj("handleId", "again", "path", uri(dir+"/f")))
	// Another connection has its own table.
	other := f.NewHandles()
	mustCall(t, f, other, protocol.MethodFsOpen, obj("handleId", "1", "path", uri(dir+"/f")))
	other.CloseAll()
	if h.Len() != 4 {
		t.Fatalf("%d handles", h.Len())
	}
	h.CloseAll()
	if h.Len() != 0 {
		t.Fatal("CloseAll left handles")
	}
	_, e = call(t, f, h, protocol.MethodFsReadBlock, obj("handleId", "1", "offset", 0, "len", 1))
	wantErr(t, e, protocol.CodeNotFound, "unknown file handle `1`")
	_, e = call(t, f, h, protocol.MethodFsOpen, obj("handleId", "late", "path", uri(dir+"/f")))
	wantErr(t, e, protocol.CodeInvalidRequest, "connection closed")
	// The default is 128.
	if New(Options{}).NewHandles().max != 128 {
		t.Fatal("default handle limit")
	}
}

// Block reads racing a close never crash and report either data or an
// unknown handle.
func TestReadBlockRacesClose(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir+"/f", pattern(1<<20))
	f := New(Options{})
	h := f.NewHandles()
	defer h.CloseAll()
	for round := range 20 {
		id := fmt.Sprint(round)
		mustCall(t, f, h, protocol.MethodFsOpen, obj("handleId", id, "path", uri(dir+"/f")))
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				_, e := call(t, f, h, protocol.MethodFsReadBlock, obj("handleId", id, "offset", 0, "len", 65536))
				if e != nil && e.Code != protocol.CodeNotFound {
					t.Errorf("read racing close: %v", e)
				}
			})
		}
		mustCall(t, f, h, protocol.MethodFsClose, obj("handleId", id))
		wg.Wait()
	}
}

// A file larger than the whole-file cap goes through blocks.
func TestBlocksMoveAFileOverTheCap(t *testing.T) {
	dir := t.TempDir()
	data := pattern(2<<20 + 17)
	writeTestFile(t, dir+"/src", data)
	f := New(Options{MaxFileBytes: 1 << 20})
	h := f.NewHandles()
	defer h.CloseAll()
	_, e := call(t, f, h, protocol.MethodFsReadFile, obj("path", uri(dir+"/src")))
	wantErr(t, e, protocol.CodeInvalidRequest, "use fs/open")
	mustCall(t, f, h, protocol.MethodFsOpen, obj("handleId", "r", "path", uri(dir+"/src")))
	mustCall(t, f, h, protocol.MethodFsOpen, obj("handleId", "w", "path", uri(dir+"/dst"), "mode", "replace"))
	for off := 0; ; off += protocol.FsMaxBlockLen {
		out := mustCall(t, f, h, protocol.MethodFsReadBlock, obj("handleId", "r", "offset", off, "len", protocol.FsMaxBlockLen))
		res := decodeResult[protocol.FsReadBlockResult](t, out)
		if len(res.Chunk) > 0 {
			mustCall(t, f, h, protocol.MethodFsWriteBlock, protocol.FsWriteBlockParams{HandleID: "w", Offset: uint64(off), Chunk: res.Chunk})
		}
		if res.EOF {
			break
		}
	}
	mustCall(t, f, h, protocol.MethodFsClose, obj("handleId", "w"))
	if got, _ := os.ReadFile(dir + "/dst"); !bytes.Equal(got, data) {
		t.Fatalf("copy through blocks differs (%d bytes)", len(got))
	}
}

// FuzzBlockOffsets throws arbitrary offsets and lengths at fs/readBlock and
// fs/writeBlock: every answer is a result or a -32602/-32600/-32603 error,
// reads return at most len bytes, and nothing is written outside the
// test's file.
func FuzzBlockOffsets(f *testing.F) {
	f.Add(uint64(0), int64(1), uint16(1))
	f.Add(uint64(9), int64(1048576), uint16(0))
	f.Add(uint64(1<<63), int64(1), uint16(1))
	f.Add(uint64(1<<63-1), int64(0), uint16(3))
	f.Add(uint64(1<<40), int64(-1), uint16(100))
	dir := f.TempDir()
	writeTestFile(f, dir+"/r", pattern(4096))
	fs := New(Options{})
	h := fs.NewHandles()
	mustCall(f, fs, h, protocol.MethodFsOpen, obj("handleId", "r", "path", uri(dir+"/r")))
	mustCall(f, fs, h, protocol.MethodFsOpen, obj("handleId", "w", "path", uri(dir+"/w"), "mode", "replace"))
	f.Cleanup(h.CloseAll)
	f.Fuzz(func(t *testing.T, off uint64, n int64, wlen uint16) {
		out, e := call(t, fs, h, protocol.MethodFsReadBlock, json.RawMessage(fmt.Sprintf(`{"handleId":"r","offset":%d,"len":%d}`, off, n)))
		switch {
		case e != nil:
			if e.Code != protocol.CodeInvalidParams && e.Code != protocol.CodeInvalidRequest && e.Code != protocol.CodeInternal {
				t.Fatalf("readBlock(%d,%d): %v", off, n, e)
			}
		default:
			res := decodeResult[protocol.FsReadBlockResult](t, out)
			if int64(len(res.Chunk)) > n || (off >= 4096 && len(res.Chunk) != 0) {
				t.Fatalf("readBlock(%d,%d) returned %d bytes", off, n, len(res.Chunk))
			}
			if off < 4096 && !bytes.Equal(res.Chunk, pattern(4096)[off:min(4096, off+uint64(len(res.Chunk)))]) {
				t.Fatalf("readBlock(%d,%d) wrong data", off, n)
			}
		}
		// Writes: small offsets only, so the fuzzer cannot fill the disk
		// with a sparse file's metadata.
		woff := off % (1 << 30)
		_, e = call(t, fs, h, protocol.MethodFsWriteBlock, protocol.FsWriteBlockParams{HandleID: "w", Offset: woff, Chunk: make([]byte, wlen)})
		if wlen == 0 {
			wantErr(t, e, protocol.CodeInvalidRequest, "file write block length")
		} else if e != nil {
			t.Fatalf("writeBlock(%d,%d): %v", woff, wlen, e)
		}
	})
}

// TestOpenReplaceEmpties: fs/open replace leaves the file empty with its
// modification time moved, as the reference's O_TRUNC does, whether the
// file is new, had bytes, or was empty already. An empty file is not
// truncated (ext4 would write it back at close, in the server's CPU), so
// its time is moved explicitly: the empty case fails without that.
func TestOpenReplaceEmpties(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	writeTestFile(t, dir+"/full", pattern(5000))
	writeTestFile(t, dir+"/empty", nil)
	for _, name := range []string{"full", "empty"} {
		if err := os.Chtimes(dir+"/"+name, old, old); err != nil {
			t.Fatal(err)
		}
	}
	f := New(Options{})
	h := f.NewHandles()
	defer h.CloseAll()
	for _, name := range []string{"new", "full", "empty"} {
		p := dir + "/" + name
		mustCall(t, f, h, protocol.MethodFsOpen, obj("handleId", name, "path", uri(p), "mode", "replace"))
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st.Size() != 0 {
			t.Errorf("%s: %d bytes after fs/open replace, want 0", name, st.Size())
		}
		if !st.ModTime().After(old.Add(time.Hour)) {
			t.Errorf("%s: modification time %v not moved by fs/open replace (was %v)", name, st.ModTime(), old)
		}
		mustCall(t, f, h, protocol.MethodFsWriteBlock, protocol.FsWriteBlockParams{HandleID: name, Offset: 0, Chunk: []byte("ab")})
		mustCall(t, f, h, protocol.MethodFsClose, obj("handleId", name))
		if got, _ := os.ReadFile(p); string(got) != "ab" {
			t.Errorf("%s: %q after a block, want \"ab\"", name, got)
		}
	}
}

package fsys

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	big := pattern(3 << 20)
	writeTestFile(t, filepath.Join(dir, "text.txt"), []byte("hello world\n"))
	writeTestFile(t, filepath.Join(dir, "bin"), allBytes())
	writeTestFile(t, filepath.Join(dir, "empty"), nil)
	writeTestFile(t, filepath.Join(dir, "big"), big)
	writeTestFile(t, filepath.Join(dir, ".hidden"), []byte("h"))
	writeTestFile(t, filepath.Join(dir, "name with space#%?.txt"), []byte("odd"))
	os.Symlink("text.txt", filepath.Join(dir, "link"))
	os.Symlink("nowhere", filepath.Join(dir, "dangling"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	mkfifo(t, filepath.Join(dir, "fifo"))

	f := New(Options{})
	tests := []struct {
		name string
		path string // a URI
		want []byte
		code int
		msg  string
	}{
		{"text", uri(dir + "/text.txt"), []byte("hello world\n"), 0, ""},
		{"binary 0..255", uri(dir + "/bin"), allBytes(), 0, ""},
		{"empty", uri(dir + "/empty"), []byte{}, 0, ""},
		{"3 MiB", uri(dir + "/big"), big, 0, ""},
		{"hidden", uri(dir + "/.hidden"), []byte("h"), 0, ""},
		{"escaped name", uri(dir + "/name with space#%?.txt"), []byte("odd"), 0, ""},
		{"percent-decoded", "file://" + dir + "/%74ext.txt", []byte("hello world\n"), 0, ""},
		{"localhost", "file://localhost" + dir + "/text.txt", []byte("hello world\n"), 0, ""},
		{"dot segments", "file://" + dir + "/sub/../nosuch/../text.txt/.", []byte("hello world\n"), 0, ""},
		{"symlink followed", uri(dir + "/link"), []byte("hello world\n"), 0, ""},
		{"proc pseudo file", "file:///proc/version", nil, 0, ""},
		{"dangling link", uri(dir + "/dangling"), nil, protocol.CodeNotFound, "No such file or directory (os error 2)"},
		{"missing", uri(dir + "/nosuch"), nil, protocol.CodeNotFound, "No such file or directory (os error 2)"},
		{"directory", uri(dir + "/sub"), nil, protocol.CodeInvalidRequest, "path `" + dir + "/sub` is not a file"},
		{"under a file", uri(dir + "/text.txt/x"), nil, protocol.CodeInternal, "Not a directory (os error 20)"},
		{"fifo does not block", uri(dir + "/fifo"), nil, protocol.CodeInvalidRequest, "is not a file"},
		{"char device", "file:///dev/null", nil, protocol.CodeInvalidRequest, "path `/dev/null` is not a file"},
		{"native path", dir + "/text.txt", nil, protocol.CodeInvalidParams, "invalid URI: relative URL without a base"},
		{"relative", "text.txt", nil, protocol.CodeInvalidParams, "invalid URI"},
		{"other scheme", "http://x/y", nil, protocol.CodeInvalidParams, "unsupported path URI scheme `http`"},
		{"foreign host", "file://host" + dir + "/text.txt", nil, protocol.CodeInvalidRequest, "is invalid on 'linux'"},
		{"NUL byte", "file://" + dir + "/a%00b", nil, protocol.CodeInvalidParams, ""},
		{"invalid UTF-8", "file://" + dir + "/%FF", nil, protocol.CodeInvalidParams, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var out json.RawMessage
			var e *protocol.Error
			go func() {
				defer close(done)
				out, e = call(t, f, nil, protocol.MethodFsReadFile, obj("path", tc.path))
			}()
			select {
			case <-done:
			case <-time.After(60 * time.Second): // a hang guard: -race under load reads 3 MiB slowly
				t.Fatal("fs/readFile blocked")
			}
			if tc.code != 0 {
				wantErr(t, e, tc.code, tc.msg)
				return
			}
			if e != nil {
				t.Fatalf("unexpected error %v", e)
			}
			res := decodeResult[protocol.FsReadFileResult](t, out)
			if tc.want == nil {
				if len(res.DataBase64) == 0 {
					t.Fatal("empty read of a pseudo file")
				}
				return
			}
			if !bytes.Equal(res.DataBase64, tc.want) {
				t.Fatalf("got %d bytes, want %d", len(res.DataBase64), len(tc.want))
			}
		})
	}
	t.Run("empty is an empty string", func(t *testing.T) {
		out := mustCall(t, f, nil, protocol.MethodFsReadFile, obj("path", uri(dir+"/empty")))
		if string(out) != `{"dataBase64":""}` {
			t.Fatalf("got %s", out)
		}
	})
}

func TestReadFileParams(t *testing.T) {
	f := New(Options{})
	for _, tc := range []struct {
		params string
		code   int
		msg    string
	}{
		{`null`, protocol.CodeInvalidParams, "invalid type: null, expected struct WireFsReadFileParams"},
		{`{}`, protocol.CodeInvalidParams, "missing field `path`"},
		{`{"path":5}`, protocol.CodeInvalidParams, "invalid type: number"},
		{`[]`, protocol.CodeInvalidParams, "invalid type: sequence"},
		{`{"path":"file:///nonexistent-fsys-test","extra":1}`, protocol.CodeNotFound, ""},
		{`{"path":"file:///nonexistent-fsys-test","sandbox":null}`, protocol.CodeNotFound, ""},
		{`{"path":"file:///nonexistent-fsys-test","sandbox":{}}`, protocol.CodeInvalidParams, "missing field `permissions`"},
		{`{"path":"file:///nonexistent-fsys-test","sandbox":{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}}`, protocol.CodeNotFound, ""},
		// Full-disk read: runs here, sandbox or not.
		{`{"path":"file:///nonexistent-fsys-test","sandbox":{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}}`, protocol.CodeNotFound, ""},
	} {
		_, e := call(t, f, nil, protocol.MethodFsReadFile, json.RawMessage(tc.params))
		wantErr(t, e, tc.code, tc.msg)
	}
}

func TestReadFileCap(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir+"/f", make([]byte, 1001))
	f := New(Options{MaxFileBytes: 1000})
	_, e := call(t, f, nil, protocol.MethodFsReadFile, obj("path", uri(dir+"/f")))
	wantErr(t, e, protocol.CodeInvalidRequest, "over the fs/readFile limit of 1000 bytes; use fs/open")
	writeTestFile(t, dir+"/g", make([]byte, 1000))
	mustCall(t, f, nil, protocol.MethodFsReadFile, obj("path", uri(dir+"/g")))
	// A pseudo file has no size to check up front; the cap applies while
	// reading.
	small := New(Options{MaxFileBytes: 10})
	_, e = call(t, small, nil, protocol.MethodFsReadFile, obj("path", "file:///proc/cpuinfo"))
	wantErr(t, e, protocol.CodeInvalidRequest, "over the fs/readFile limit of 10 bytes")
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir+"/existing", []byte("old content that is longer"))
	os.Symlink("target", dir+"/dangling")
	os.Symlink("existing", dir+"/link")
	os.Mkdir(dir+"/sub", 0o755)
	big := pattern(3 << 20)
	f := New(Options{})
	tests := []struct {
		name  string
		path  string
		data  any // []byte (encoded here) or a JSON string literal
		check string
		want  []byte
		code  int
		msg   string
	}{
		{"create text", dir + "/new.txt", []byte("hi\n"), dir + "/new.txt", []byte("hi\n"), 0, ""},
		{"binary", dir + "/bin", allBytes(), dir + "/bin", allBytes(), 0, ""},
		{"empty", dir + "/empty", []byte{}, dir + "/empty", []byte{}, 0, ""},
		{"3 MiB", dir + "/big", big, dir + "/big", big, 0, ""},
		{"truncates", dir + "/existing2", []byte("x"), "", nil, 0, ""},
		{"through a link", dir + "/link", []byte("short"), dir + "/existing", []byte("short"), 0, ""},
		{"dangling link creates its target", dir + "/dangling", []byte("t"), dir + "/target", []byte("t"), 0, ""},
		{"escaped slash", dir + "/esc", json.RawMessage(`"YW\/j"`), dir + "/esc", []byte{0x61, 0x6f, 0xe3}, 0, ""},
		{"directory", dir + "/sub", []byte("x"), "", nil, protocol.CodeInternal, "Is a directory (os error 21)"},
		{"parent missing", dir + "/nodir/x", []byte("x"), "", nil, protocol.CodeNotFound, "No such file or directory (os error 2)"},
		{"under a file", dir + "/existing/x", []byte("x"), "", nil, protocol.CodeInternal, "Not a directory (os error 20)"},
		{"char device", "/dev/null", []byte("x"), "", nil, protocol.CodeInvalidRequest, "path `/dev/null` is not a file"},
		{"bad padding", dir + "/b1", json.RawMessage(`"abc"`), "", nil, protocol.CodeInvalidRequest, "fs/writeFile requires valid base64 dataBase64: Invalid padding"},
		{"bad symbol", dir + "/b2", json.RawMessage(`"!!!!"`), "", nil, protocol.CodeInvalidRequest, "fs/writeFile requires valid base64 dataBase64: Invalid symbol 33, offset 0."},
		{"newline", dir + "/b3", json.RawMessage(`"YWJj\nZA=="`), "", nil, protocol.CodeInvalidRequest, "Invalid symbol 10, offset 4."},
		{"null data", dir + "/b4", json.RawMessage(`null`), "", nil, protocol.CodeInvalidParams, "invalid type: null, expected a string"},
		{"number data", dir + "/b5", json.RawMessage(`5`), "", nil, protocol.CodeInvalidParams, "invalid type: number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var data json.RawMessage
			switch d := tc.data.(type) {
			case []byte:
				data, _ = json.Marshal(b64(d))
			case json.RawMessage:
				data = d
			}
			params := json.RawMessage(`{"path":` + string(mustJSON(uri(tc.path))) + `,"dataBase64":` + string(data) + `}`)
			out, e := call(t, f, nil, protocol.MethodFsWriteFile, params)
			if tc.code != 0 {
				wantErr(t, e, tc.code, tc.msg)
				if _, err := os.Stat(tc.path); strings.HasPrefix(tc.path, dir+"/b") && err == nil {
					t.Fatal("a file was created for invalid data")
				}
				return
			}
			if e != nil {
				t.Fatalf("unexpected error %v", e)
			}
			if string(out) != `{}` {
				t.Fatalf("result %s", out)
			}
			if tc.check != "" {
				got, err := os.ReadFile(tc.check)
				if err != nil || !bytes.Equal(got, tc.want) {
					t.Fatalf("file holds %d bytes (%v), want %d", len(got), err, len(tc.want))
				}
			}
		})
	}
	t.Run("params", func(t *testing.T) {
		for _, tc := range []struct {
			params string
			code   int
			msg    string
		}{
			{`null`, protocol.CodeInvalidParams, "invalid type: null, expected struct WireFsWriteFileParams"},
			{`{}`, protocol.CodeInvalidParams, "missing field `path`"},
			{`{"dataBase64":"!"}`, protocol.CodeInvalidParams, "missing field `path`"},
			{`{"path":"file:///x"}`, protocol.CodeInvalidParams, "missing field `dataBase64`"},
			{`{"path":"relative","dataBase64":"!"}`, protocol.CodeInvalidParams, "invalid URI: relative URL without a base"},
			{`{"path":"file:///nonexistent-fsys/x","dataBase64":"!"}`, protocol.CodeInvalidRequest, "Invalid symbol 33, offset 0."},
			{`{"path":"file:///nonexistent-fsys/x","data\u0042ase64":"!"}`, protocol.CodeInvalidRequest, "Invalid symbol 33, offset 0."},
			{`"str"`, protocol.CodeInvalidParams, "invalid type: string"},
		} {
			_, e := call(t, f, nil, protocol.MethodFsWriteFile, json.RawMessage(tc.params))
			wantErr(t, e, tc.code, tc.msg)
		}
		// An empty view: confined, where nothing exists; without a
		// sandbox, refused naming what is missing.
		_, e := call(t, f, nil, protocol.MethodFsWriteFile, json.RawMessage(`{"path":"file:///nonexistent-fsys/x","dataBase64":"YQ==","sandbox":{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"restricted","entries":[]}},"windowsSandboxLevel":"disabled"}}`))
		if s := probeSandbox(); s.Available {
			wantErr(t, e, protocol.CodeNotFound, "No such file or directory")
		} else {
			wantErr(t, e, protocol.CodeInternal, "not available on this server: missing "+s.Missing)
		}
	})
}

// TestWriteFileOverItself writes files of sizes around the preallocation
// threshold over one another: each leaves exactly its bytes (a shorter one
// truncates, a preallocated one has its written size, not more).
func TestWriteFileOverItself(t *testing.T) {
	path := t.TempDir() + "/f"
	f := New(Options{})
	for _, n := range []int{3 << 20, 10, preallocMin, 0, preallocMin - 1, 2<<20 + 5, 1} {
		want := pattern(n)
		params := json.RawMessage(`{"path":` + string(mustJSON(uri(path))) + `,"dataBase64":"` + b64(want) + `"}`)
		if _, e := call(t, f, nil, protocol.MethodFsWriteFile, params); e != nil {
			t.Fatalf("%d bytes: %v", n, e)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("after writing %d bytes the file holds %d (%v)", n, len(got), err)
		}
	}
}

// Writing nothing over an empty file truncates it all the same (as the
// reference's O_TRUNC): its modification time moves.
func TestWriteFileEmptyOverEmptyTouches(t *testing.T) {
	path := t.TempDir() + "/f"
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	f := New(Options{})
	if _, e := call(t, f, nil, protocol.MethodFsWriteFile, obj("path", uri(path), "dataBase64", "")); e != nil {
		t.Fatal(e)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !st.ModTime().After(old) {
		t.Fatalf("modification time still %v after writing nothing over the empty file", st.ModTime())
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestWriteFileFIFONeverBlocks(t *testing.T) {
	dir := t.TempDir()
	fifo := dir + "/fifo"
	mkfifo(t, fifo)
	f := New(Options{})
	run := func() *protocol.Error {
		done := make(chan *protocol.Error, 1)
		go func() {
			_, e := call(t, f, nil, protocol.MethodFsWriteFile, obj("path", uri(fifo), "dataBase64", "YQ=="))
			done <- e
		}()
		select {
		case e := <-done:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("fs/writeFile blocked on a FIFO")
			return nil
		}
	}
	// No reader: the non-blocking open fails with ENXIO.
	wantErr(t, run(), protocol.CodeInvalidRequest, "is not a file")
	// With a reader: the open succeeds and fstat refuses it.
	r, err := os.OpenFile(fifo, os.O_RDONLY|0o4000 /* O_NONBLOCK */, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wantErr(t, run(), protocol.CodeInvalidRequest, "is not a file")
	buf := make([]byte, 8)
	if n, _ := r.Read(buf); n != 0 {
		t.Fatalf("%d bytes reached the FIFO", n)
	}
}

func TestWriteFileCap(t *testing.T) {
	dir := t.TempDir()
	f := New(Options{MaxFileBytes: 10})
	_, e := call(t, f, nil, protocol.MethodFsWriteFile, obj("path", uri(dir+"/f"), "dataBase64", b64(make([]byte, 11))))
	wantErr(t, e, protocol.CodeInvalidRequest, "over the fs/writeFile limit of 10 bytes")
	if _, err := os.Stat(dir + "/f"); err == nil {
		t.Fatal("over-cap write created the file")
	}
	mustCall(t, f, nil, protocol.MethodFsWriteFile, obj("path", uri(dir+"/f"), "dataBase64", b64(make([]byte, 10))))
	// Far over the cap: refused from the encoded length, before decoding.
	_, e = call(t, f, nil, protocol.MethodFsWriteFile, obj("path", uri(dir+"/f"), "dataBase64", strings.Repeat("A", 1000)))
	wantErr(t, e, protocol.CodeInvalidRequest, "over the fs/writeFile limit")
}

// A 64 MiB fs/readFile through Call and the frame encoder must not allocate
// more than about three times the file (file buffer + base64 frame).
func TestReadFileMemoryBound(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("64 MiB; allocation counts differ under the race detector")
	}
	const size = 64 << 20
	dir := t.TempDir()
	writeTestFile(t, dir+"/big", pattern(size))
	f := New(Options{})
	params := json.RawMessage(`{"path":` + string(mustJSON(uri(dir+"/big"))) + `}`)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := f.Call(context.Background(), nil, protocol.MethodFsReadFile, params)
	if err != nil {
		t.Fatal(err)
	}
	frame := res.(interface{ AppendJSON([]byte) []byte }).AppendJSON(make([]byte, 0, 1024))
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("fs/readFile of 64 MiB allocated %.1f MiB (%.2fx)", float64(alloc)/(1<<20), float64(alloc)/size)
	if alloc > 3*size {
		t.Fatalf("allocated %d bytes for a %d-byte file", alloc, size)
	}
	if len(frame) != len(`{"dataBase64":""}`)+base64.StdEncoding.EncodedLen(size) {
		t.Fatalf("frame of %d bytes", len(frame))
	}
}

func TestWriteFileMemoryBound(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("64 MiB; allocation counts differ under the race detector")
	}
	const size = 64 << 20
	dir := t.TempDir()
	params := json.RawMessage(`{"path":` + string(mustJSON(uri(dir+"/big"))) + `,"dataBase64":"` + b64(pattern(size)) + `"}`)
	f := New(Options{})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := f.Call(context.Background(), nil, protocol.MethodFsWriteFile, params); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("fs/writeFile of 64 MiB allocated %.1f MiB (%.2fx)", float64(alloc)/(1<<20), float64(alloc)/size)
	if alloc > size+size/8 {
		t.Fatalf("allocated %d bytes for a %d-byte write", alloc, size)
	}
	got, err := os.ReadFile(dir + "/big")
	if err != nil || !bytes.Equal(got, pattern(size)) {
		t.Fatalf("written file differs (%v)", err)
	}
}

// Files of several encoding chunks (the last one partial, with padding)
// come back intact inside a complete response frame, whatever the length of
// the frame's prefix.
func TestReadFileChunkedEncoding(t *testing.T) {
	smallChunks(t)
	dir := t.TempDir()
	f := New(Options{})
	for _, size := range []int{1, 2, 3, encChunk - 1, encChunk, encChunk + 1, 2*encChunk + 2} {
		data := pattern(size)
		p := fmt.Sprintf("%s/f%d", dir, size)
		writeTestFile(t, p, data)
		res, err := f.Call(context.Background(), nil, protocol.MethodFsReadFile, json.RawMessage(`{"path":"`+uri(p)+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{`7`, `"` + strings.Repeat("x", 300) + `"`} {
			frame, err := jsonrpc.AppendResponse(jsonrpc.GetBuffer(), json.RawMessage(id), res)
			if err != nil {
				t.Fatal(err)
			}
			var msg struct {
				ID     json.RawMessage           `json:"id"`
				Result protocol.FsReadFileResult `json:"result"`
			}
			if err := json.Unmarshal(frame, &msg); err != nil {
				t.Fatalf("size %d: bad frame: %v", size, err)
			}
			if string(msg.ID) != id || !bytes.Equal(msg.Result.DataBase64, data) {
				t.Fatalf("size %d, id %.10s: wrong frame", size, id)
			}
		}
	}
}

// A file that changes size between fstat and the read is read to EOF.
func TestReadFileThatChangesSize(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/f"
	writeTestFile(t, p, pattern(100))
	for _, newSize := range []int{50, 200} {
		file, st, err := openRegular(p, os.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		writeTestFile(t, p, pattern(newSize))
		if _, err := readEncoded(context.Background(), file, st.Size()); err != errChanged {
			t.Fatalf("size 100 -> %d: %v, want errChanged", newSize, err)
		}
		file.Close()
		writeTestFile(t, p, pattern(100))
	}
}

// smallChunks makes the parallel encoder work in chunks of a few KiB for
// the rest of the test, so many-chunk paths are cheap to exercise. (The
// parallel decoder is internal/b64.Decode's, tested there.)
func smallChunks(t *testing.T) {
	old := encChunk
	encChunk = 3 << 10
	t.Cleanup(func() { encChunk = old })
}

// A Unix socket is neither read, written, opened nor copied; nothing blocks.
func TestSocketIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	sock := dir + "/s.sock"
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skip(err)
	}
	defer l.Close()
	f := New(Options{})
	h := f.NewHandles()
	defer h.CloseAll()
	for _, tc := range []struct {
		method string
		params any
		msg    string
	}{
		{protocol.MethodFsReadFile, obj("path", uri(sock)), "is not a file"},
		{protocol.MethodFsWriteFile, obj("path", uri(sock), "dataBase64", "YQ=="), "is not a file"},
		{protocol.MethodFsOpen, obj("handleId", "r", "path", uri(sock)), "is not a file"},
		{protocol.MethodFsOpen, obj("handleId", "w", "path", uri(sock), "mode", "replace"), "is not a file"},
		{protocol.MethodFsCopy, obj("sourcePath", uri(sock), "destinationPath", uri(dir+"/c"), "recursive", false), "only supports regular files, directories, and symlinks"},
	} {
		_, e := call(t, f, h, tc.method, tc.params)
		wantErr(t, e, protocol.CodeInvalidRequest, tc.msg)
	}
	out := mustCall(t, f, nil, protocol.MethodFsGetMetadata, obj("path", uri(sock)))
	if m := decodeResult[protocol.FsMetadata](t, out); m.IsFile || m.IsDirectory {
		t.Fatalf("socket metadata %+v", m)
	}
}

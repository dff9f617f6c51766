package fsys

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// TestSandboxedFileStreamingParity is what the sandboxedFileStreaming
// capability promises: a streamed read (fs/open with `sandbox`, then
// fs/readBlock until eof, then fs/close: what codex does for an MCP Apps
// file upload) gives exactly what fs/readFile gives under the same policy,
// for every policy and path here: the same bytes, or the same error code
// and text. A path the policy hides is never opened, so no handle exists
// to read blocks from.
func TestSandboxedFileStreamingParity(t *testing.T) {
	x := newSandboxFixture(t)
	w, o := x.work, x.out
	big := bytes.Repeat([]byte("0123456789abcdef"), (5<<20)/16+7) // 5 MiB and a bit: several blocks
	writeTestFile(t, w+"/big.bin", big)
	writeTestFile(t, w+"/app.env", []byte("TOKEN=x"))
	writeTestFile(t, w+"/denied.txt", []byte("denied"))
	writeTestFile(t, o+"/readable.txt", []byte("readable"))

	policies := []struct {
		name string
		pol  json.RawMessage
	}{
		{"codex workspace-write", x.pol},
		{"workspace read, one outside file read", restricted(w, entry(w, "read"), entry(o+"/readable.txt", "read"))},
		{"root read, deny a file and a glob", restricted(w, rootRead, entry(w+"/denied.txt", "deny"), denyEnvGlob)},
		{"root read, deny the outside dir", restricted(w, rootRead, entry(o, "deny"))},
	}
	paths := []string{
		w + "/big.bin", w + "/app.env", w + "/denied.txt", w + "/sub", w + "/missing",
		w + "/linkfile", o + "/secret.txt", o + "/readable.txt",
	}
	// Anchors: outcomes that show the policy was applied at all (a server
	// ignoring `sandbox` on both paths would be in parity too).
	type outcome struct {
		code int
		msg  string
	}
	anchors := map[string]outcome{
		"workspace read, one outside file read: " + o + "/secret.txt": {protocol.CodeNotFound, enoent},
		"workspace read, one outside file read: " + w + "/linkfile":   {protocol.CodeNotFound, enoent},
		"root read, deny a file and a glob: " + w + "/denied.txt":     {protocol.CodeInvalidRequest, eacces},
		"root read, deny a file and a glob: " + w + "/app.env":        {protocol.CodeInvalidRequest, eacces},
		"root read, deny the outside dir: " + w + "/linkfile":         {protocol.CodeInvalidRequest, eacces},
	}
	n := 0
	for _, pc := range policies {
		for _, p := range paths {
			n++
			whole, wholeErr := x.readFile(t, pc.pol, p)
			streamed, streamErr := x.streamRead(t, pc.pol, p, fmt.Sprintf("h%d", n))
			what := pc.name + ": " + p
			switch {
			case (wholeErr == nil) != (streamErr == nil):
				t.Errorf("%s: fs/readFile %v, streamed %v", what, describe(wholeErr), describe(streamErr))
			case wholeErr != nil:
				if wholeErr.Code != streamErr.Code || wholeErr.Message != streamErr.Message {
					t.Errorf("%s: fs/readFile %s, streamed %s", what, describe(wholeErr), describe(streamErr))
				}
			case !bytes.Equal(whole, streamed):
				t.Errorf("%s: fs/readFile gave %d bytes, streamed %d, not the same", what, len(whole), len(streamed))
			}
			if a, ok := anchors[what]; ok && (streamErr == nil || streamErr.Code != a.code || streamErr.Message != a.msg) {
				t.Errorf("%s: streamed %s, want %d %q", what, describe(streamErr), a.code, a.msg)
			}
			if strings.HasSuffix(p, "big.bin") && !bytes.Equal(streamed, big) {
				t.Errorf("%s: the streamed read is not the file (%d bytes of %d)", what, len(streamed), len(big))
			}
		}
	}
	if n := x.h.Len(); n != 0 {
		t.Errorf("%d handles left open", n)
	}
}

func describe(e *protocol.Error) string {
	if e == nil {
		return "ok"
	}
	return fmt.Sprintf("%d %q", e.Code, e.Message)
}

// readFile is fs/readFile of p under pol.
func (x *sbFixture) readFile(t *testing.T, pol json.RawMessage, p string) ([]byte, *protocol.Error) {
	t.Helper()
	out, e := x.call(t, pol, protocol.MethodFsReadFile, "path", uri(p))
	if e != nil {
		return nil, e
	}
	var r struct {
		DataBase64 string `json:"dataBase64"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	data, err := base64.StdEncoding.DecodeString(r.DataBase64)
	if err != nil {
		t.Fatal(err)
	}
	return data, nil
}

// streamRead is fs/open of p under pol, fs/readBlock of 1 MiB blocks until
// eof, and fs/close.
func (x *sbFixture) streamRead(t *testing.T, pol json.RawMessage, p, id string) ([]byte, *protocol.Error) {
	t.Helper()
	if _, e := x.call(t, pol, protocol.MethodFsOpen, "handleId", id, "path", uri(p)); e != nil {
		return nil, e
	}
	defer mustCall(t, x.f, x.h, protocol.MethodFsClose, obj("handleId", id))
	var data []byte
	for off := 0; ; {
		out, e := call(t, x.f, x.h, protocol.MethodFsReadBlock, obj("handleId", id, "offset", off, "len", protocol.FsMaxBlockLen))
		if e != nil {
			return nil, e
		}
		res := decodeResult[protocol.FsReadBlockResult](t, out)
		data = append(data, res.Chunk...)
		off += len(res.Chunk)
		if res.EOF {
			return data, nil
		}
		if off > 64<<20 {
			t.Fatalf("%s: no eof after %d bytes", p, off)
		}
	}
}

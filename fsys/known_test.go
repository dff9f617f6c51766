package fsys

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/execgo/exec-server/jsonrpc"
)

// The payload span the transport's decoder validated (jsonrpc's Bulk,
// WithKnown) is passed over without a scan; the bytes written are the
// same. The params are read from a whole message as the server gets them.
func TestWriteWithKnownPayload(t *testing.T) {
	dir := t.TempDir()
	f := New(Options{})
	hs := f.NewHandles()
	data := pattern(3 << 16)
	for _, method := range []string{"fs/writeFile", "fs/writeBlock"} {
		path := filepath.Join(dir, "k.bin")
		var params string
		if method == "fs/writeFile" {
			params = `{"path":"` + uri(path) + `","dataBase64":"` + b64(data) + `"}`
		} else {
			mustCall(t, f, hs, "fs/open", obj("handleId", "h", "path", uri(path), "mode", "replace"))
			params = `{"handleId":"h","offset":0,"chunk":"` + b64(data) + `"}`
		}
		msg, err := jsonrpc.Decode([]byte(`{"id":1,"method":"`+method+`","params":`+params+`}`), jsonrpc.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Bulk) != len(b64(data)) {
			t.Fatalf("%s: the decoder found no bulk string", method)
		}
		if _, perr := callCtx(t, WithKnown(context.Background(), msg.Bulk), f, hs, method, json.RawMessage(msg.Params)); perr != nil {
			t.Fatalf("%s: %v", method, perr)
		}
		if method == "fs/writeBlock" {
			mustCall(t, f, hs, "fs/close", obj("handleId", "h"))
		}
		got, _ := os.ReadFile(path)
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: wrote %d bytes that differ from the %d sent", method, len(got), len(data))
		}
	}
}

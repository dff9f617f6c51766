package fsys

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkDecodeWriteFile measures fs/writeFile's params decoding with a
// 1 MiB payload: the member walk must pass over the base64 once, and only
// the small members reach encoding/json.
func BenchmarkDecodeWriteFile(b *testing.B) {
	data := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("0123456789abcdef", 1<<16)))
	raw := json.RawMessage(`{"path":"file:///tmp/x","dataBase64":"` + data + `","sandbox":null}`)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		p, err := decodeWriteFile(raw, nil)
		if err != nil || len(p.Data) != len(data) {
			b.Fatal(err)
		}
	}
}

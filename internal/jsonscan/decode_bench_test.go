package jsonscan

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// BenchmarkDecodeParams decodes the params of the hot methods: a small
// process/read, a process/start with nested values, and a process/write
// carrying 64 KiB of base64 (the member scan must stay cheap beside the
// base64 decoding).
func BenchmarkDecodeParams(b *testing.B) {
	chunk := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("0123456789abcdef", 4096)))
	cases := []struct {
		name     string
		raw      string
		newV     func() any
		required []string
	}{
		{"read", `{"processId":"proc-17","afterSeq":42,"maxBytes":65536,"waitMs":1000}`,
			func() any { return new(protocol.ReadParams) }, []string{"processId"}},
		{"start", `{"processId":"p1","argv":["bash","-c","echo hi"],"cwd":"file:///tmp","env":{"PATH":"/usr/bin:/bin","HOME":"/root"},"tty":false,"envPolicy":{"inherit":"core"},"sandbox":null}`,
			func() any { return new(protocol.StartParams) }, []string{"processId", "argv", "cwd", "env", "tty"}},
		{"write64k", `{"processId":"p1","chunk":"` + chunk + `","writeId":"w1"}`,
			func() any { return new(protocol.WriteParams) }, []string{"processId", "chunk"}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			raw := []byte(c.raw)
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := DecodeParams(raw, c.newV(), "X", c.required...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package server

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
)

// BenchmarkDecodeRequestParams measures what the server does to a request's
// params before a handler runs (the message envelope is jsonrpc's): the
// member walk, the checks of particular members (rows and cols), and the
// decoding. Each method's params should be walked once.
func BenchmarkDecodeRequestParams(b *testing.B) {
	chunk := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("0123456789abcdef", 4096)))
	cases := []struct {
		name   string
		raw    string
		decode func(json.RawMessage) (any, error)
	}{
		{"start", `{"processId":"p1","argv":["bash","-c","echo hi"],"cwd":"file:///tmp","env":{"PATH":"/usr/bin:/bin","HOME":"/root"},"tty":true,"rows":40,"cols":120,"envPolicy":{"inherit":"core"},"sandbox":null}`, decodeStart},
		{"read", `{"processId":"proc-17","afterSeq":42,"maxBytes":65536,"waitMs":1000}`, decodeRead},
		{"write64k", `{"processId":"p1","chunk":"` + chunk + `","writeId":"w1"}`, decodeInto[protocol.WriteParams]("WriteParams", "processId", "chunk")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			raw := json.RawMessage(c.raw)
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.decode(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The whole message: jsonrpc's envelope decoding, then the params.
		b.Run(c.name+"/message", func(b *testing.B) {
			msg := []byte(`{"id":1,"method":"m","params":` + c.raw + `}`)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				m, err := jsonrpc.Decode(msg, jsonrpc.DefaultLimits)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.decode(m.Params); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

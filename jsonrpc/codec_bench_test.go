package jsonrpc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"testing"
)

// Hot paths of the codec: decoding requests, encoding responses and the
// process/output notification that dominates bulk traffic, and the base64
// of a 64 KiB output chunk inside it.

var benchRequests = []struct {
	name string
	msg  string
}{
	{"start", `{"id":17,"method":"process/start","params":{"processId":"p-000017","argv":["/bin/sh","-c","echo hi"],"cwd":"file:///tmp/work","env":{"PATH":"/usr/bin:/bin","HOME":"/root","LANG":"C.UTF-8"},"tty":false,"pipeStdin":true}}`},
	{"read", `{"id":"r-1","method":"process/read","params":{"processId":"p-000017","afterSeq":42,"maxBytes":65536,"waitMs":1000}}`},
	{"write1", `{"id":99,"method":"process/write","params":{"processId":"tty","chunk":"eA==","writeId":"123"}}`},
}

func BenchmarkDecode(b *testing.B) {
	for _, r := range benchRequests {
		b.Run(r.name, func(b *testing.B) {
			data := []byte(r.msg)
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Decode(data, DefaultLimits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeWriteBlock: a 1 MiB fs/writeBlock request (1.4 MB of
// base64 in one string value) goes through the limit prescan and decoding.
func BenchmarkDecodeWriteBlock(b *testing.B) {
	chunk := base64.StdEncoding.EncodeToString(make([]byte, 1<<20))
	data := []byte(`{"id":5,"method":"fs/writeBlock","params":{"handleId":"h","offset":1048576,"chunk":"` + chunk + `"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Decode(data, DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendResponse(b *testing.B) {
	id := json.RawMessage(`17`)
	res := &testStart{ProcessID: "p-000017", SandboxType: "none"}
	b.ReportAllocs()
	buf := GetBuffer()
	for b.Loop() {
		var err error
		buf, err = AppendResponse(buf[:0], id, res)
		if err != nil {
			b.Fatal(err)
		}
	}
	PutBuffer(buf)
}

var outputSizes = []int{1, 4096, 64 << 10}

// BenchmarkOutputNotification compares the reflective encoder with the
// hand-written one the server uses for process/output (same bytes out).
func BenchmarkOutputNotification(b *testing.B) {
	for _, n := range outputSizes {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i)
		}
		b.Run("reflect/"+strconv.Itoa(n), func(b *testing.B) {
			ev := &testOutput{ProcessID: "p-000017", Seq: 12345, Stream: "stdout", Chunk: data}
			b.ReportAllocs()
			b.SetBytes(int64(n))
			buf := GetBuffer()
			for b.Loop() {
				var err error
				buf, err = AppendNotification(buf[:0], "process/output", ev)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("direct/"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			buf := GetBuffer()
			for b.Loop() {
				buf = appendOutput(buf[:0], "p-000017", 12345, "stdout", data)
			}
		})
	}
}

// appendOutput mirrors server.encodeEvent for process/output.
func appendOutput(dst []byte, id string, seq uint64, stream string, data []byte) []byte {
	dst = append(dst, `{"method":"process/output","params":{"processId":`...)
	dst = AppendString(dst, id)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"stream":"`...)
	dst = append(dst, stream...)
	dst = append(dst, `","chunk":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, data)
	return append(dst, `"}}`...)
}

func TestAppendOutputMatchesReflect(t *testing.T) {
	data := []byte("hello\x00\xff world")
	want, err := AppendNotification(nil, "process/output", &testOutput{ProcessID: "p", Seq: 3, Stream: "pty", Chunk: data})
	if err != nil {
		t.Fatal(err)
	}
	if got := appendOutput(nil, "p", 3, "pty", data); string(got) != string(want) {
		t.Fatalf("direct encoding %s\nreflect encoding %s", got, want)
	}
}

// BenchmarkBase64 is the base64 of one 64 KiB output chunk (the server's
// largest) both ways, and of a 1 MiB block.
func BenchmarkBase64(b *testing.B) {
	for _, n := range []int{64 << 10, 1 << 20} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i * 7)
		}
		enc := base64.StdEncoding.EncodeToString(data)
		b.Run("encode/"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			dst := make([]byte, 0, base64.StdEncoding.EncodedLen(n))
			for b.Loop() {
				dst = base64.StdEncoding.AppendEncode(dst[:0], data)
			}
		})
		b.Run("decode/"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			src := []byte(enc)
			dst := make([]byte, n)
			for b.Loop() {
				if _, err := base64.StdEncoding.Decode(dst, src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStringScan measures the ways of finding the end of a 1.4 MB
// JSON string (a 1 MiB block's base64), the inner loop of every pass over
// a large message: bytes.IndexAny with two bytes falls back to a per-byte
// set lookup, while bytes.IndexByte is vectorised; json.Valid is the
// validation pass Decode makes on top of its own scan.
func BenchmarkStringScan(b *testing.B) {
	s := []byte(`"` + base64.StdEncoding.EncodeToString(make([]byte, 1<<20)) + `"`)
	body := s[1:]
	b.Run("IndexAny", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			if bytes.IndexAny(body, "\"\\") != len(body)-1 {
				b.Fatal("end not found")
			}
		}
	})
	b.Run("IndexByte", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			end := bytes.IndexByte(body, '"')
			if end != len(body)-1 || bytes.IndexByte(body[:end], '\\') >= 0 {
				b.Fatal("end not found")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			if !json.Valid(s) {
				b.Fatal("invalid")
			}
		}
	})
}

// Shapes of the exec-server's messages, for realistic encodings (jsonrpc
// imports nothing of the project, not even in tests).
type (
	testStart struct {
		ProcessID   string `json:"processId"`
		SandboxType string `json:"sandboxType"`
	}
	testOutput struct {
		ProcessID string `json:"processId"`
		Seq       uint64 `json:"seq"`
		Stream    string `json:"stream"`
		Chunk     []byte `json:"chunk"`
	}
	testClosed struct {
		ProcessID string `json:"processId"`
		Seq       uint64 `json:"seq"`
	}
)

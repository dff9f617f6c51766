package jsonscan

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/test/jsontest"
	"github.com/execgo/exec-server/protocol"
)

// fuzzParams lists every params struct with the required fields the server
// passes to DecodeParams (process methods, as in server/dispatch.go) or, for
// the rest, every field that is not omitempty.
var fuzzParams = []struct {
	name     string
	newV     func() any
	required []string
}{
	{"InitializeParams", func() any { return new(protocol.InitializeParams) }, []string{"clientName"}},
	{"ExecParams", func() any { return new(protocol.StartParams) }, []string{"processId", "argv", "cwd", "env", "tty"}},
	{"ReadParams", func() any { return new(protocol.ReadParams) }, []string{"processId"}},
	{"WriteParams", func() any { return new(protocol.WriteParams) }, []string{"processId", "chunk"}},
	{"SignalParams", func() any { return new(protocol.SignalParams) }, []string{"processId", "signal"}},
	{"TerminateParams", func() any { return new(protocol.TerminateParams) }, []string{"processId"}},
	{"FsReadFileParams", func() any { return new(protocol.FsReadFileParams) }, nil},
	{"FsWriteFileParams", func() any { return new(protocol.FsWriteFileParams) }, nil},
	{"FsCreateDirectoryParams", func() any { return new(protocol.FsCreateDirectoryParams) }, nil},
	{"FsGetMetadataParams", func() any { return new(protocol.FsGetMetadataParams) }, nil},
	{"FsCanonicalizeParams", func() any { return new(protocol.FsCanonicalizeParams) }, nil},
	{"FsReadDirectoryParams", func() any { return new(protocol.FsReadDirectoryParams) }, nil},
	{"FsRemoveParams", func() any { return new(protocol.FsRemoveParams) }, nil},
	{"FsCopyParams", func() any { return new(protocol.FsCopyParams) }, nil},
	{"FsWalkParams", func() any { return new(protocol.FsWalkParams) }, nil},
	{"FsOpenParams", func() any { return new(protocol.FsOpenParams) }, nil},
	{"FsReadBlockParams", func() any { return new(protocol.FsReadBlockParams) }, nil},
	{"FsWriteBlockParams", func() any { return new(protocol.FsWriteBlockParams) }, nil},
	{"FsCloseParams", func() any { return new(protocol.FsCloseParams) }, nil},
}

// requiredByTag returns the JSON names of the fields that are not
// omitempty: what the wire requires.
func requiredByTag(v any) []string {
	var out []string
	t := reflect.TypeOf(v).Elem()
	for i := 0; i < t.NumField(); i++ {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && !strings.Contains(opts, "omitempty") {
			out = append(out, name)
		}
	}
	return out
}

// FuzzDecodeParams decodes hostile params into every params struct (sel
// picks one; a run covers them all). It must never panic; every failure is
// an -32602 *protocol.Error; and whatever it accepts must survive a re-encoding: the
// server must be able to describe what it accepted.
func FuzzDecodeParams(f *testing.F) {
	seeds := []string{
		`{"clientName":"x"}`, `{"clientName":"x","resumeSessionId":"0-1"}`,
		`{"processId":"p1","argv":["bash","-c","echo hi"],"cwd":"file:///tmp","env":{"PATH":"/usr/bin:/bin"},"tty":false}`,
		`{"processId":"p1","argv":["sh"],"cwd":"file:///","env":{},"tty":true,"pipeStdin":true,"arg0":"x","envPolicy":{"inherit":"core"},"sandbox":null}`,
		`{"processId":"p","afterSeq":0,"maxBytes":65536,"waitMs":100}`, `{"processId":"p","afterSeq":-1}`,
		`{"processId":"p","chunk":"aGkK","writeId":"w1"}`, `{"processId":"p","chunk":"!!"}`, `{"processId":"p","chunk":"aGk"}`,
		`{"processId":"p","signal":"interrupt"}`, `{"processId":"p","signal":"kill"}`,
		`{"path":"file:///tmp/a"}`, `{"path":"file:///tmp/a","dataBase64":"aGkK"}`,
		`{"path":"file:///tmp/a","recursive":null,"force":true}`,
		`{"sourcePath":"file:///a","destinationPath":"file:///b","recursive":true}`,
		`{"path":"file:///","options":{"maxDepth":64,"maxDirectories":10000,"maxEntries":50000,"followDirectorySymlinks":false}}`,
		`{"handleId":"h","path":"file:///tmp/a","mode":"replace"}`, `{"handleId":"h","offset":0,"len":1048576}`,
		`{"handleId":"h","offset":-1,"len":1e3}`,
		`null`, `{}`, `[]`, `"x"`, `5`, `{"processId":5}`, `{"processId":null}`, `{"argv":[1]}`, `{"env":{"a":1}}`,
		`{"processId":"p","processId":"q"}`, `{"processId":"\ud800"}`, `{"x":{"y":[[[[[[]]]]]]}}`,
		`{"maxBytes":18446744073709551616}`, `{"tty":"yes"}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), []byte(s))
	}
	// Keys that differ from a field's name only by case, for a chosen type.
	f.Add(uint8(2), []byte(`{"processId":"x","ProcessId":"y","AFTERSEQ":3}`))                      // protocol.ReadParams
	f.Add(uint8(7), []byte(`{"path":"file:///a","PATH":"b","dataBase64":"","DataBase64":"aGk="}`)) // protocol.FsWriteFileParams
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		p := fuzzParams[int(sel)%len(fuzzParams)]
		v := p.newV()
		required := p.required
		if required == nil {
			required = requiredByTag(v)
		}
		err := DecodeParams(data, v, p.name, required...)
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams {
				t.Fatalf("%s: error %T %v is not -32602", p.name, err, err)
			}
			if pe.Message == "" {
				t.Fatalf("%s: empty error message", p.name)
			}
			return
		}
		if jsontest.HasDuplicateKeys(data) {
			// The reference refuses a message with a repeated object key
			// before any params decoder sees it ("duplicate JSON object
			// key"); DecodeParams checks required fields on the first
			// occurrence and decodes the last, so such input is out of
			// its contract and is left to the message decoder.
			return
		}
		again, merr := json.Marshal(v)
		if merr != nil {
			t.Fatalf("%s: accepted %q but cannot re-encode it: %v", p.name, data, merr)
		}
		if want, ok := exactOracle(data, p.newV); ok && string(want) != string(again) {
			t.Fatalf("%s: %q decoded as %s; with only the exactly named members it is %s", p.name, data, again, want)
		}
		w := p.newV()
		if err := DecodeParams(again, w, p.name, required...); err != nil {
			t.Fatalf("%s: accepted %q, refuses its re-encoding %q: %v", p.name, data, again, err)
		}
		third, _ := json.Marshal(w)
		if string(third) != string(again) {
			t.Fatalf("%s: re-encoding is not stable: %q then %q", p.name, again, third)
		}
	})
}

// FuzzDecodeNoParams covers the decoder of param-less methods.
func FuzzDecodeNoParams(f *testing.F) {
	for _, s := range []string{``, `null`, `{}`, ` { } `, `[]`, `{"a":1}`, `5`, `"x"`, `{`, `{}{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := DecodeNoParams(data)
		if err == nil {
			return
		}
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams {
			t.Fatalf("error %T %v is not -32602", err, err)
		}
	})
}

// exactOracle decodes data the slow, obvious way that serde's exact member
// matching implies: keep only the top-level members whose (unescaped) name
// is exactly a field's, then let encoding/json decode that. It answers only
// for types without nested structs (their inner keys would still fold).
func exactOracle(data []byte, newV func() any) ([]byte, bool) {
	v := newV()
	t := reflect.TypeOf(v).Elem()
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		ft := t.Field(i).Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			return nil, false
		}
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names[name] = true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return nil, false
	}
	for k := range m {
		if !names[k] {
			delete(m, k)
		}
	}
	only, err := json.Marshal(m)
	if err != nil || json.Unmarshal(only, v) != nil {
		return nil, false
	}
	out, err := json.Marshal(v)
	return out, err == nil
}

// FuzzDecodeBulk covers the payload kept out of encoding/json: a
// process/write chunk of at least bulkMin characters is decoded apart from
// the other members. Whatever DecodeParams accepts, the obvious decoding
// (exactOracle: encoding/json with protocol.Base64's own UnmarshalJSON)
// accepts with the same result; a refusal is -32602.
func FuzzDecodeBulk(f *testing.F) {
	f.Add(`{"processId":"p",`, "YWJj", 300, `,"writeId":"w"}`)
	f.Add(`{"processId":5,`, "YWJj", 300, `}`)
	f.Add(`{"Chunk":"x","processId":"p",`, "YW==", 256, `}`)
	f.Add(`{"processId":"p",`, "YWJj", 300, `,"chunk":"YQ=="}`)
	f.Add(`{"processId":"p",`, "!!!!", 260, `}`)
	f.Fuzz(func(t *testing.T, prefix, unit string, n int, suffix string) {
		if n < 0 || n > 4096 || len(unit) == 0 || len(unit) > 16 {
			return
		}
		data := []byte(prefix + `"chunk":"` + strings.Repeat(unit, n) + `"` + suffix)
		var got protocol.WriteParams
		err := DecodeParams(data, &got, "WriteParams", "processId", "chunk")
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams {
				t.Fatalf("error %T %v is not -32602", err, err)
			}
			return
		}
		want, ok := exactOracle(data, func() any { return new(protocol.WriteParams) })
		if !ok {
			t.Fatalf("accepted %.200q, which the obvious decoding refuses", data)
		}
		out, _ := json.Marshal(&got)
		if string(out) != string(want) {
			t.Fatalf("%.200q decoded as %.200s, want %.200s", data, out, want)
		}
	})
}

// FuzzDecodeCut: cutting a member changes nothing but that member, which
// comes back as found.
func FuzzDecodeCut(f *testing.F) {
	for _, s := range []string{`{"path":"p","dataBase64":"QUJD"}`, `{"dataBase64":null,"path":"p"}`, `{"path":"p","data\u0042ase64":"x\"y"}`,
		`{"path":"p","dataBase64":5}`, `{"Path":"p","dataBase64":"a","path":"q"}`, `{"path":"p"}`, `{`} {
		f.Add([]byte(s))
	}
	type params struct {
		Path string `json:"path"`
		Data string `json:"dataBase64"`
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p params
		cut, err := Decode(data, &p, Spec{Type: "P", Required: []string{"path"}, Cut: []string{"dataBase64"}})
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams {
				t.Fatalf("error %T %v is not -32602", err, err)
			}
			return
		}
		var whole params
		if err := DecodeParams(data, &whole, "P", "path"); err != nil {
			// Only a refused dataBase64 value may differ, and only when
			// it was cut (a string, which the cut skips).
			if len(cut[0]) == 0 || cut[0][0] != '"' {
				t.Fatalf("%q: accepted with the cut, refused without: %v", data, err)
			}
			return
		}
		if p.Path != whole.Path || p.Data != "" && p.Data != whole.Data {
			t.Fatalf("%q: %+v with the cut, %+v without", data, p, whole)
		}
		if cut[0] != nil && cut[0][0] == '"' {
			var s string
			if json.Unmarshal(cut[0], &s) != nil || s != whole.Data {
				t.Fatalf("%q: cut %s, decoded without the cut %q", data, cut[0], whole.Data)
			}
		}
	})
}

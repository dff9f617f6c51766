package jsonrpc

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/execgo/exec-server/internal/test/jsontest"
)

// fuzzLimits are small so that the depth and value limits are reachable by
// the fuzzer within a few seconds.
var fuzzLimits = Limits{MaxDepth: 8, MaxValues: 64}

// FuzzDecode checks the message decoder against hostile bytes: it must never
// panic, must return exactly one of a message or a *DecodeError, must agree
// with encoding/json about validity and about the id and method it found,
// and must never accept a message beyond its limits.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"method":"initialize","params":{"clientName":"x"}}`,
		`{"method":"initialized","params":{}}`,
		`{"id":"s","method":"process/read","params":{"processId":"p","afterSeq":0,"waitMs":100}}`,
		`{"id":9223372036854775807,"method":"m"}`,
		`{"id":9223372036854775808,"method":"m"}`,
		`{"id":-1,"method":"m","jsonrpc":"2.0"}`,
		`{"id":1.5,"method":"m"}`,
		`{"id":null,"method":"m"}`,
		`{"id":1,"result":{}}`,
		`{"id":1,"error":{"code":1,"message":"x"}}`,
		`{"id":10}`, `{"foo":1}`, `{}`, `[]`, `[{"id":1,"method":"m"}]`, `42`, `"str"`, `not json`, `{bad`,
		"{\"id\":1,\"method\":\"m\"}\n{\"id\":2,\"method\":\"m\"}",
		`{"method":5}`, `{"method":"a","method":"b","id":1}`, `{"id":1,"method":"m","params":{"env":{},"env":null}}`,
		`{"id":1,"method":"m","params":{"a":{"k":1,"\u006b":2}}}`, `{"id":1,"method":"\u0061"}`,
		`{"id":1,"method":"m","params":[[[[[[[[[[1]]]]]]]]]]}`,
		`{"id":1,"method":"m","params":"\"}{[[[["}`,
		"  \r\n{\"id\":1 , \"method\" : \"m\" }\r\n",
		"\xef\xbb\xbf{\"id\":1,\"method\":\"m\"}",
		`{"id":"\ud800","method":"m"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		m, err := Decode(data, fuzzLimits)
		if !bytes.Equal(orig, data) {
			t.Fatalf("Decode modified its input")
		}
		if (m == nil) == (err == nil) {
			t.Fatalf("Decode returned message %v and error %v", m, err)
		}
		if err != nil {
			if _, ok := err.(*DecodeError); !ok {
				t.Fatalf("error %T %v is not a *DecodeError", err, err)
			}
			if len(err.Error()) > 256 {
				t.Fatalf("error text of %d bytes: an error must not echo the input", len(err.Error()))
			}
			return
		}
		trimmed := bytes.TrimSpace(data)
		if !json.Valid(trimmed) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		var v any
		if err := json.Unmarshal(trimmed, &v); err != nil {
			t.Fatalf("accepted %q that encoding/json refuses: %v", data, err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("accepted a non-object %q", data)
		}
		// Regression (found by FuzzDecodeParams): a repeated key let a
		// params decoder check one value and use another; the reference
		// refuses such messages outright.
		if jsontest.HasDuplicateKeys(trimmed) {
			t.Fatalf("accepted %q, which repeats an object key", data)
		}
		depth, values := measure(v)
		if depth > fuzzLimits.MaxDepth || values > fuzzLimits.MaxValues {
			t.Fatalf("accepted depth %d, %d values over limits %+v", depth, values, fuzzLimits)
		}
		switch m.Kind {
		case KindRequest:
			if !validID(m.ID) {
				t.Fatalf("request id %q is neither a string nor an int64", m.ID)
			}
		case KindNotification:
			if m.ID != nil {
				t.Fatalf("notification with id %q", m.ID)
			}
		case KindResponse:
			if m.ID == nil {
				t.Fatalf("response without id")
			}
		default:
			t.Fatalf("unknown kind %d", m.Kind)
		}
		// Keys written with escapes are matched on their raw bytes, so the
		// comparison with encoding/json holds only for escape-free input.
		if bytes.IndexByte(data, '\\') >= 0 {
			return
		}
		if m.Kind != KindResponse {
			if got, _ := obj["method"].(string); got != m.Method {
				t.Fatalf("method %q, encoding/json says %q", m.Method, got)
			}
		}
		if m.ID != nil {
			var want any
			if err := json.Unmarshal(m.ID, &want); err != nil || !jsonEqual(want, obj["id"]) {
				t.Fatalf("id %q, encoding/json says %v", m.ID, obj["id"])
			}
		}
	})
}

func validID(raw []byte) bool {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		return json.Unmarshal(raw, &s) == nil
	}
	_, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil
}

func jsonEqual(a, b any) bool {
	// Numbers compare as numbers: an id of -0 is echoed as 0, as the
	// reference does (found by FuzzDecode).
	if x, ok := a.(float64); ok {
		y, ok := b.(float64)
		return ok && x == y
	}
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// measure returns the nesting depth of arrays and objects and the number of
// JSON values in v, counted as the decoder's limits count them.
func measure(v any) (depth, values int) {
	switch t := v.(type) {
	case map[string]any:
		d := 0
		n := 1
		for _, e := range t {
			ed, en := measure(e)
			d = max(d, ed)
			n += en
		}
		return d + 1, n
	case []any:
		d := 0
		n := 1
		for _, e := range t {
			ed, en := measure(e)
			d = max(d, ed)
			n += en
		}
		return d + 1, n
	}
	return 0, 1
}

package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeKinds(t *testing.T) {
	tests := []struct {
		in     string
		kind   Kind
		id     string
		method string
		params string
	}{
		{`{"id":1,"method":"initialize","params":{"clientName":"x"}}`, KindRequest, `1`, "initialize", `{"clientName":"x"}`},
		{`{"method":"initialized"}`, KindNotification, ``, "initialized", ``},
		{`{"method":"initialized","params":{}}`, KindNotification, ``, "initialized", `{}`},
		{`{"params":null,"method":"m","id":"abc"}`, KindRequest, `"abc"`, "m", `null`},
		{`{"jsonrpc":"2.0","id":2,"method":"m"}`, KindRequest, `2`, "m", ``},
		{`{"jsonrpc":"2.0","method":"n","params":[1]}`, KindNotification, ``, "n", `[1]`},
		{` {"id":3,"method":"m","trace":{"traceparent":"00-x"}} `, KindRequest, `3`, "m", ``},
		{"\t{ \"id\" : 4 ,\n \"method\" : \"m\" , \"params\" : { \"a\" : [ 1 , 2 ] } }\r\n", KindRequest, `4`, "m", `{ "a" : [ 1 , 2 ] }`},
		{`{"id":5,"result":{"a":1}}`, KindResponse, `5`, "", ``},
		{`{"id":6,"error":{"code":1,"message":"x"}}`, KindResponse, `6`, "", ``},
		{`{"error":{"code":1,"message":"x"},"id":"s"}`, KindResponse, `"s"`, "", ``},
		{`{"id":7,"result":null}`, KindResponse, `7`, "", ``},
		{`{"id":8,"method":"m\u002fx"}`, KindRequest, `8`, "m/x", ``},
		{`{"id":9,"method":"a\"b"}`, KindRequest, `9`, `a"b`, ``},
	}
	for _, tt := range tests {
		m, err := Decode([]byte(tt.in), DefaultLimits)
		if err != nil {
			t.Errorf("Decode(%s): %v", tt.in, err)
			continue
		}
		if m.Kind != tt.kind || string(m.ID) != tt.id || m.Method != tt.method || string(m.Params) != tt.params {
			t.Errorf("Decode(%s) = {kind %d id %q method %q params %q}, want {kind %d id %q method %q params %q}",
				tt.in, m.Kind, m.ID, m.Method, m.Params, tt.kind, tt.id, tt.method, tt.params)
		}
	}
}

func TestDecodeIDs(t *testing.T) {
	good := []string{`"x"`, `""`, `"with \"quotes\""`, `"é"`, `0`, `1`, `-1`, `-42`, `9007199254740993`,
		`9223372036854775807`, `-9223372036854775808`}
	for _, id := range good {
		m, err := Decode([]byte(`{"id":`+id+`,"method":"m"}`), DefaultLimits)
		if err != nil {
			t.Errorf("id %s: %v", id, err)
			continue
		}
		// Echoed verbatim, with its JSON type.
		if string(m.ID) != id {
			t.Errorf("id %s decoded as %s", id, m.ID)
		}
	}
	// Echoed as the reference echoes them (it re-encodes the id).
	for in, want := range map[string]string{
		`-0`:                              `0`,
		`"\u0041"`:                        `"A"`,
		`"\u00e9"`:                        `"é"`,
		`"\/"`:                            `"/"`,
		`"a\"b\\c"`:                       `"a\"b\\c"`,
		`"\u2028\b\f\u001F\u007f\/\"é\n"`: "\"\u2028\\b\\f\\u001f\x7f/\\\"é\\n\"",
	} {
		m, err := Decode([]byte(`{"id":`+in+`,"method":"m"}`), DefaultLimits)
		if err != nil || string(m.ID) != want {
			t.Errorf("id %s: decoded as %s (%v), want %s", in, m.ID, err, want)
		}
	}
	bad := []string{`null`, `1.5`, `1e3`, `1E3`, `-0.0`, `true`, `false`, `{}`, `{"a":1}`, `[]`, `[1]`,
		`9223372036854775808`, `-9223372036854775809`, `18446744073709551616`, `99999999999999999999999`}
	for _, id := range bad {
		_, err := Decode([]byte(`{"id":`+id+`,"method":"m"}`), DefaultLimits)
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("id %s: err = %v, want *DecodeError", id, err)
			continue
		}
		if de.Detail != "data did not match any variant of untagged enum RequestId" {
			t.Errorf("id %s: detail %q", id, de.Detail)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	deepObj := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	many := func(n int) string {
		return `{"id":1,"method":"m","params":[` + strings.TrimSuffix(strings.Repeat("0,", n), ",") + `]}`
	}
	tests := []struct {
		name string
		in   string
		want string // substring of the detail
	}{
		{"not json", `not json`, ""},
		{"unterminated", `{"id":1,"method":"m"`, ""},
		{"bad key", `{bad`, ""},
		{"empty", ``, ""},
		{"blank", "  \n", ""},
		{"number", `42`, "expected a JSON-RPC object"},
		{"string", `"s"`, "expected a JSON-RPC object"},
		{"empty array", `[]`, "expected a JSON-RPC object"},
		{"batch", `[{"id":1,"method":"m"}]`, "expected a JSON-RPC object"},
		{"null", `null`, "expected a JSON-RPC object"},
		{"true", `true`, "expected a JSON-RPC object"},
		{"trailing object", `{"id":1,"method":"m"} {"id":2,"method":"m"}`, ""},
		{"trailing garbage", `{"id":1,"method":"m"}x`, ""},
		{"trailing on next line", "{\"id\":1,\"method\":\"m\"}\n{}", ""},
		{"deep array", deep, "recursion limit exceeded at line 1 column"},
		{"deep object", deepObj, "recursion limit exceeded"},
		{"deep params", `{"id":1,"method":"m","params":` + deep + `}`, "recursion limit exceeded"},
		{"deep on line 3", "\n\n" + deep, "recursion limit exceeded at line 3 column"},
		{"too many values", many(262145), "JSON-RPC message exceeds the limit of 262144 JSON values at line 1 column"},
		{"too many object members", `{"id":1,"method":"m","params":{` + manyKeys(262145) + `}}`, "exceeds the limit of 262144 JSON values"},
		// Texts as the reference's (observed).
		{"method not a string", `{"id":1,"method":5}`, "invalid type: number, expected a string"},
		{"notification method not a string", `{"method":5}`, "invalid type: number, expected a string"},
		{"method null", `{"method":null}`, "invalid type: null, expected a string"},
		{"id only", `{"id":10}`, "missing field `error`"},
		{"empty object", `{}`, "missing field `error`"},
		{"result without id", `{"result":1}`, "missing field `id`"},
		{"error without id", `{"error":{"code":1,"message":"x"}}`, "missing field `id`"},
		{"unrelated", `{"foo":1}`, "missing field `error`"},
		{"response with a null id", `{"id":null,"result":1}`, "data did not match any variant of untagged enum RequestId"},
		{"response with a float id", `{"id":1.5,"result":1}`, "data did not match any variant of untagged enum RequestId"},
		{"bad id, nothing else", `{"id":true}`, "data did not match any variant of untagged enum RequestId"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode([]byte(tt.in), DefaultLimits)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode = %+v, %v; want *DecodeError", m, err)
			}
			if de.Detail == "" || !strings.Contains(de.Detail, tt.want) {
				t.Errorf("detail %q, want it to contain %q", de.Detail, tt.want)
			}
		})
	}
}

// manyKeys returns n object members with distinct keys.
func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strconv.Itoa(i) + `":0`)
	}
	return b.String()
}

func TestDecodeDuplicateKeys(t *testing.T) {
	// The reference refuses a duplicate key anywhere in a message
	// (answered with id -1); texts and columns as observed on it.
	bad := []struct {
		in, detail string
	}{
		{`{"id":2,"id":3,"method":"environment/status"}`, "duplicate JSON object key `id` at line 1 column 12"},
		{`{"id":4,"method":"environment/status","method":"x"}`, "duplicate JSON object key `method` at line 1 column 46"},
		{`{"id":5,"method":"environment/status","params":{},"params":null}`, "duplicate JSON object key `params` at line 1 column 58"},
		{`{"id":5,"method":"environment/status","params":{"a":1,"a":2}}`, "duplicate JSON object key `a` at line 1 column 57"},
		{`{"id":7,"method":"environment/status","x":[{"a":1,"a":2}]}`, "duplicate JSON object key `a` at line 1 column 53"},
		{`{"id":9,"method":"environment/status","p\u0061rams":{}, "params":{}}`, "duplicate JSON object key `params` at line 1 column 64"},
		{`{"a":{"b":1},"b":2,"a":3}`, "duplicate JSON object key `a`"},
		{"{\"id\":1,\n\"id\":2}", "duplicate JSON object key `id` at line 2 column 4"},
		{`{"id":1,"method":"m","params":{` + manyKeys(40) + `,"k7":1}}`, "duplicate JSON object key `k7`"},
		{`{"id":1,"method":"m","params":{` + manyKeys(40) + `,"x":{` + manyKeys(20) + `},"k39":1}}`, "duplicate JSON object key `k39`"},
	}
	for _, tt := range bad {
		_, err := Decode([]byte(tt.in), DefaultLimits)
		var de *DecodeError
		if !errors.As(err, &de) || !strings.Contains(de.Detail, tt.detail) {
			t.Errorf("Decode(%.60s) = %v, want %q", tt.in, err, tt.detail)
		}
	}
	// A long key is not echoed whole; invalid JSON is a syntax error even
	// with a duplicate in it.
	long := strings.Repeat("é", 500)
	_, err := Decode([]byte(`{"id":1,"method":"m","params":{"`+long+`":1,"`+long+`":2}}`), DefaultLimits)
	if err == nil || !strings.HasPrefix(err.Error(), "duplicate JSON object key `éé") || len(err.Error()) > 200 || !utf8.ValidString(err.Error()) {
		t.Errorf("long duplicate key: %.300v", err)
	}
	_, err = Decode([]byte(`{"id":1,"id":2,"method":"m"`), DefaultLimits)
	if err == nil || strings.Contains(err.Error(), "duplicate") {
		t.Errorf("unterminated object with a duplicate: %v, want a syntax error", err)
	}
	_, err = Decode([]byte(`[{"a":1,"a":2}]`), DefaultLimits)
	if err == nil || !strings.Contains(err.Error(), "duplicate JSON object key `a`") {
		t.Errorf("duplicate in an array: %v", err)
	}
	good := []string{
		`{"id":1,"method":"m","params":[{"a":1},{"a":2}]}`,
		`{"id":1,"method":"m","params":{"a":{"a":{"a":1}}}}`,
		`{"id":1,"method":"m","params":{"x":{"a":1},"a":2}}`,
		`{"id":1,"method":"m","params":{"a":"\"a\":1","b":"a"}}`,
		`{"id":1,"method":"m","params":{"A":1,"a":2}}`,
		`{"id":1,"method":"m","params":{` + manyKeys(1000) + `}}`,
		`{"id":1,"method":"m","params":{` + manyKeys(30) + `,"x":{` + manyKeys(30) + `},"y":[{` + manyKeys(30) + `}]}}`,
	}
	for _, in := range good {
		if _, err := Decode([]byte(in), DefaultLimits); err != nil {
			t.Errorf("Decode(%.60s): %v", in, err)
		}
	}
}

func TestDecodeValueLimitPosition(t *testing.T) {
	// Columns the reference reported for the same inputs: values are
	// counted where they start, object keys are not values.
	rep := func(s string, n int, sep string) string {
		return strings.Repeat(s+sep, n-1) + s
	}
	members := func(n int) string { // "k0":0,"k1":0,...
		b := make([]byte, 0, n*12)
		for i := range n {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `"k`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `":0`...)
		}
		return string(b)
	}
	tests := []struct {
		in  string
		col int
	}{
		{"[" + rep("0", 262150, ",") + "]", 524287},
		{`{"id":4,"method":"a","params":[` + rep("0", 262150, ",") + "]}", 524311},
		{`{"id":7,"method":"a","params":{` + members(262142) + "}}", 3034611},
		{"[" + rep(`"ab"`, 262150, ",") + "]", 1310716},
		// Also observed, left out to keep the test fast: 12345 x 262150
		// in an array, column 1572859; {} x 262150, column 786451; true
		// x 262150 separated by ", " in params, column 1572871.
	}
	for i, tt := range tests {
		_, err := Decode([]byte(tt.in), DefaultLimits)
		want := "JSON-RPC message exceeds the limit of 262144 JSON values at line 1 column " + strconv.Itoa(tt.col)
		if err == nil || err.Error() != want {
			t.Errorf("case %d: %v, want %q", i, err, want)
		}
	}
}

func TestDecodeLimits(t *testing.T) {
	// Exactly at the limits is fine; one more is not.
	lim := Limits{MaxDepth: 4, MaxValues: 10}
	ok := []string{
		`{"id":1,"method":"m","params":[[1]]}`,         // depth 3
		`{"id":1,"method":"m","params":[[[1]]]}`,       // depth 4
		`{"id":1,"method":"m","params":[1,2,3,4,5,6]}`, // 4 + 6 values
		`{"id":1,"method":"m","params":{"k":"]]]]]]]]"}}`,
		`{"id":1,"method":"m","params":"[[[[[[[[[[[[[[[[[[[["}`,
		`{"id":1,"method":"m","params":"\"[[[[[[[[[[[[[[["}`,
	}
	for _, in := range ok {
		if _, err := Decode([]byte(in), lim); err != nil {
			t.Errorf("Decode(%s) with %+v: %v", in, lim, err)
		}
	}
	bad := []string{
		`{"id":1,"method":"m","params":[[[[1]]]]}`,
		`{"id":1,"method":"m","params":[1,2,3,4,5,6,7]}`,
		`{"id":1,"method":"m","params":[true,false,null,1,2,3,4]}`,
	}
	for _, in := range bad {
		var de *DecodeError
		if _, err := Decode([]byte(in), lim); !errors.As(err, &de) {
			t.Errorf("Decode(%s) with %+v = %v, want a *DecodeError", in, lim, err)
		}
	}
	// The zero Limits mean the defaults.
	if _, err := Decode([]byte(strings.Repeat("[", 200)+strings.Repeat("]", 200)), Limits{}); err == nil ||
		!strings.Contains(err.Error(), "recursion limit exceeded") {
		t.Errorf("zero Limits: err = %v, want the default depth limit", err)
	}
}

func TestDecodeAliasesInput(t *testing.T) {
	in := []byte(`{"id":"abc","method":"m","params":{"x":1}}`)
	m, err := Decode(in, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	// Params is a sub-slice of the input, not a copy: big payloads are
	// never duplicated.
	if &m.Params[0] != &in[bytes.Index(in, []byte(`{"x"`))] {
		t.Error("Params does not alias the input buffer")
	}
}

func TestAppendStringRoundTrip(t *testing.T) {
	inputs := []string{
		"", "plain", `"quoted"`, `back\slash`, "new\nline\r\ttab", "\x00\x01\x1f\x7f",
		"<html>&amp;</html>", "é日本語🎉", "\u2028\u2029", "a\u2028b", "\xff", "a\xffb\xfe",
		"\xed\xa0\x80", "\xc3", "\xe6\x97", "\U0010ffff", "\ufffd", "ends with \\",
	}
	var all []byte
	for c := 0; c < 256; c++ {
		all = append(all, byte(c))
	}
	inputs = append(inputs, string(all))
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		inputs = append(inputs, string(b))
	}
	for _, s := range inputs {
		enc := AppendString(nil, s)
		if !json.Valid(enc) {
			t.Errorf("AppendString(%q) = %s: not valid JSON", s, enc)
			continue
		}
		if !utf8.Valid(enc) {
			t.Errorf("AppendString(%q) = %q: not valid UTF-8", s, enc)
		}
		var got string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Errorf("AppendString(%q): %v", s, err)
			continue
		}
		// encoding/json is the model: same decoded text (invalid bytes
		// become U+FFFD).
		ref, _ := json.Marshal(s)
		var want string
		_ = json.Unmarshal(ref, &want)
		if got != want {
			t.Errorf("AppendString(%q) decodes to %q, encoding/json gives %q", s, got, want)
		}
		// Line separators must not appear raw (JavaScript clients).
		if bytes.Contains(enc, []byte("\u2028")) || bytes.Contains(enc, []byte("\u2029")) {
			t.Errorf("AppendString(%q) = %q has a raw U+2028/U+2029", s, enc)
		}
	}
	// Appends to what is there.
	if got := string(AppendString([]byte("x:"), "a\"b")); got != `x:"a\"b"` {
		t.Errorf("AppendString with prefix = %s", got)
	}
	if got := string(AppendString(nil, "\n\u0001\u2028")); got != `"\n\u0001\u2028"` {
		t.Errorf("escapes = %s", got)
	}
}

type appenderResult struct{}

func (a appenderResult) AppendJSON(dst []byte) []byte {
	return append(dst, `{"fast":true}`...)
}

func TestAppendShapes(t *testing.T) {
	type res struct {
		ProcessID string `json:"processId"`
		HTML      string `json:"html"`
	}
	tests := []struct {
		name string
		got  func() ([]byte, error)
		want string
	}{
		{"response int id", func() ([]byte, error) {
			return AppendResponse(nil, json.RawMessage(`7`), res{ProcessID: "p", HTML: "<&>"})
		}, `{"id":7,"result":{"processId":"p","html":"<&>"}}`},
		{"response string id", func() ([]byte, error) {
			return AppendResponse(nil, json.RawMessage(`"a"`), struct{}{})
		}, `{"id":"a","result":{}}`},
		{"response big id", func() ([]byte, error) {
			return AppendResponse(nil, json.RawMessage(`9007199254740993`), nil)
		}, `{"id":9007199254740993,"result":null}`},
		{"response raw", func() ([]byte, error) {
			return AppendResponse(nil, json.RawMessage(`1`), json.RawMessage(`{"raw":1}`))
		}, `{"id":1,"result":{"raw":1}}`},
		{"response appender", func() ([]byte, error) {
			return AppendResponse(nil, json.RawMessage(`1`), appenderResult{})
		}, `{"id":1,"result":{"fast":true}}`},
		{"error", func() ([]byte, error) {
			return AppendError(nil, NoID, Errorf(CodeInvalidRequest, "bad \"x\"\n")), nil
		}, `{"error":{"code":-32600,"message":"bad \"x\"\n"},"id":-1}`},
		{"error string id", func() ([]byte, error) {
			return AppendError(nil, json.RawMessage(`"q"`), &Error{Code: -32004, Message: "gone"}), nil
		}, `{"error":{"code":-32004,"message":"gone"},"id":"q"}`},
		{"notification", func() ([]byte, error) {
			return AppendNotification(nil, "process/closed", testClosed{ProcessID: "p", Seq: 4})
		}, `{"method":"process/closed","params":{"processId":"p","seq":4}}`},
		{"notification output", func() ([]byte, error) {
			return AppendNotification(nil, "process/output", testOutput{ProcessID: "p", Seq: 1, Stream: "stdout", Chunk: []byte("hi\n")})
		}, `{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"aGkK"}}`},
		{"request", func() ([]byte, error) {
			return AppendRequest(nil, json.RawMessage(`3`), "m", map[string]int{"a": 1})
		}, `{"id":3,"method":"m","params":{"a":1}}`},
		{"request no params", func() ([]byte, error) {
			return AppendRequest(nil, json.RawMessage(`3`), "m", nil)
		}, `{"id":3,"method":"m"}`},
		{"appends to a prefix", func() ([]byte, error) {
			return AppendResponse([]byte("PREFIX"), json.RawMessage(`1`), 5)
		}, `PREFIX{"id":1,"result":5}`},
	}
	for _, tt := range tests {
		got, err := tt.got()
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
		if bytes.Contains(got, []byte("jsonrpc")) {
			t.Errorf("%s: a jsonrpc member was emitted", tt.name)
		}
	}
	// An unencodable result is an error, not a broken frame.
	if _, err := AppendResponse(nil, json.RawMessage(`1`), make(chan int)); err == nil {
		t.Error("AppendResponse(chan) did not fail")
	}
	if _, err := AppendNotification(nil, "m", func() {}); err == nil {
		t.Error("AppendNotification(func) did not fail")
	}
}

func TestBufferPool(t *testing.T) {
	b := GetBuffer()
	if len(b) != 0 {
		t.Fatalf("GetBuffer len %d", len(b))
	}
	b = append(b, "dirty"...)
	PutBuffer(b)
	if b2 := GetBuffer(); len(b2) != 0 {
		t.Errorf("reused buffer not empty: %q", b2)
	}
	PutBuffer(make([]byte, 0, 1<<20)) // dropped, must not panic
}

// Decode names a request's longest plain string of 64 KiB or more (Bulk),
// aliasing the message, and nothing when it has an escape or non-ASCII
// bytes or is shorter.
func TestDecodeBulk(t *testing.T) {
	long := strings.Repeat("QUJD", 32<<10) // 128 KiB
	for _, tt := range []struct {
		name, msg string
		want      string
	}{
		{"plain", `{"id":1,"method":"m","params":{"a":"x","data":"` + long + `","b":"` + long[:70<<10] + `"}}`, long},
		{"escape", `{"id":1,"method":"m","params":{"data":"\/` + long + `"}}`, ""},
		{"non-ASCII", `{"id":1,"method":"m","params":{"data":"é` + long + `"}}`, ""},
		{"short", `{"id":1,"method":"m","params":{"data":"` + long[:1000] + `"}}`, ""},
	} {
		data := []byte(tt.msg)
		m, err := Decode(data, Limits{})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if string(m.Bulk) != tt.want {
			t.Errorf("%s: Bulk of %d bytes, want %d", tt.name, len(m.Bulk), len(tt.want))
		}
		if len(m.Bulk) > 0 && &m.Bulk[0] != &data[bytes.Index(data, []byte(long))] {
			t.Errorf("%s: Bulk does not alias the message", tt.name)
		}
	}
}

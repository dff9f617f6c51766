package jsonscan

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// wantError checks that err is a *protocol.Error with the given code whose message
// contains want.
func wantError(t *testing.T, err error, code int, want string) {
	t.Helper()
	var e *protocol.Error
	if !errors.As(err, &e) {
		t.Fatalf("got error %v (%T), want *protocol.Error with code %d", err, err, code)
	}
	if e.Code != code {
		t.Errorf("code = %d, want %d (message %q)", e.Code, code, e.Message)
	}
	if !strings.Contains(e.Message, want) {
		t.Errorf("message = %q, want it to contain %q", e.Message, want)
	}
}

func TestDecodeParams(t *testing.T) {
	type params struct {
		ProcessID string            `json:"processId"`
		AfterSeq  *uint64           `json:"afterSeq,omitempty"`
		Argv      []string          `json:"argv"`
		Env       map[string]string `json:"env"`
		TTY       bool              `json:"tty"`
		Chunk     []byte            `json:"chunk"`
	}
	u := func(v uint64) *uint64 { return &v }
	tests := []struct {
		name     string
		raw      string
		required []string
		want     params
		errMsg   string // non-empty: the call must fail with -32602 and this text
	}{
		{name: "all fields", raw: `{"processId":"p1","afterSeq":7,"argv":["a","b"],"env":{"K":"V"},"tty":true,"chunk":"aGk="}`,
			required: []string{"processId", "argv"},
			want:     params{ProcessID: "p1", AfterSeq: u(7), Argv: []string{"a", "b"}, Env: map[string]string{"K": "V"}, TTY: true, Chunk: []byte("hi")}},
		{name: "whitespace around", raw: " \n{ \"processId\" : \"p\" }\n ", required: []string{"processId"}, want: params{ProcessID: "p"}},
		{name: "extra fields ignored", raw: `{"processId":"p","extra":1,"nested":{"processId":5,"x":[1,{"y":null}]}}`,
			required: []string{"processId"}, want: params{ProcessID: "p"}},
		{name: "empty processId is present", raw: `{"processId":""}`, required: []string{"processId"}, want: params{}},
		{name: "missing required", raw: `{"argv":["x"]}`, required: []string{"processId"}, errMsg: "missing field `processId`"},
		{name: "missing second required", raw: `{"processId":"p"}`, required: []string{"processId", "argv"}, errMsg: "missing field `argv`"},
		{name: "empty object", raw: `{}`, required: []string{"processId"}, errMsg: "missing field `processId`"},
		{name: "required only nested", raw: `{"x":{"processId":"p"}}`, required: []string{"processId"}, errMsg: "missing field `processId`"},
		{name: "required only inside a string", raw: `{"x":"\"processId\":\"p\""}`, required: []string{"processId"}, errMsg: "missing field `processId`"},
		{name: "null counts as absent", raw: `{"processId":null}`, required: []string{"processId"}, errMsg: "missing field `processId`"},
		{name: "null params", raw: `null`, required: []string{"processId"}, errMsg: "invalid type: null, expected struct ReadParams"},
		{name: "absent params", raw: ``, required: []string{"processId"}, errMsg: "invalid type: null, expected struct ReadParams"},
		{name: "array params", raw: `[1]`, errMsg: "invalid type: sequence, expected struct ReadParams"},
		{name: "string params", raw: `"x"`, errMsg: "invalid type: string, expected struct ReadParams"},
		{name: "number params", raw: `12`, errMsg: "invalid type: number, expected struct ReadParams"},
		{name: "bool params", raw: `true`, errMsg: "invalid type: boolean, expected struct ReadParams"},
		{name: "number for string", raw: `{"processId":5}`, required: []string{"processId"}, errMsg: "invalid type: number, expected a string for field `processId`"},
		{name: "string for uint", raw: `{"processId":"p","afterSeq":"x"}`, errMsg: "expected a non-negative integer for field `afterSeq`"},
		{name: "negative uint", raw: `{"processId":"p","afterSeq":-1}`, errMsg: "for field `afterSeq`"},
		{name: "string for bool", raw: `{"tty":"yes"}`, errMsg: "expected a boolean for field `tty`"},
		{name: "number in string array", raw: `{"argv":["a",1]}`, errMsg: "for field `argv`"},
		{name: "number in string map", raw: `{"env":{"a":1}}`, errMsg: "for field `env`"},
		{name: "bad base64", raw: `{"chunk":"!!!!"}`, errMsg: "invalid base64"},
		{name: "syntax error", raw: `{"processId":"p",}`, errMsg: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got params
			err := DecodeParams(json.RawMessage(tt.raw), &got, "ReadParams", tt.required...)
			if tt.errMsg != "" || strings.HasPrefix(tt.name, "syntax") {
				wantError(t, err, protocol.CodeInvalidParams, tt.errMsg)
				return
			}
			if err != nil {
				t.Fatalf("DecodeParams(%s): %v", tt.raw, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecodeParams(%s) = %+v, want %+v", tt.raw, got, tt.want)
			}
		})
	}
}

func TestDecodeParamsEscapedKey(t *testing.T) {
	// "process\u0049d" is the key processId spelled with an escape; it is
	// the same JSON object as {"processId":"p"} and must be accepted.
	var got struct {
		ProcessID string `json:"processId"`
	}
	if err := DecodeParams(json.RawMessage(`{"process\u0049d":"p"}`), &got, "X", "processId"); err != nil {
		t.Fatalf("escaped key: %v", err)
	}
	if got.ProcessID != "p" {
		t.Errorf("processId = %q, want p", got.ProcessID)
	}
}

func TestDecodeNoParams(t *testing.T) {
	tests := []struct {
		raw    string
		errMsg string
	}{
		{``, ""},
		{`null`, ""},
		{` null `, ""},
		{`{}`, ""},
		{` { } `, ""},
		{`{"a":1}`, "invalid type: map, expected unit"},
		{`{"a":null}`, "invalid type: map, expected unit"},
		{`[]`, "invalid type: sequence, expected unit"},
		{`[1,2]`, "invalid type: sequence, expected unit"},
		{`"s"`, "invalid type: string, expected unit"},
		{`1`, "invalid type: number, expected unit"},
		{`false`, "invalid type: boolean, expected unit"},
		{`{"a":`, ""}, // malformed: some -32602
	}
	for _, tt := range tests {
		err := DecodeNoParams(json.RawMessage(tt.raw))
		if tt.errMsg == "" && !strings.HasPrefix(tt.raw, `{"a":`) {
			if err != nil {
				t.Errorf("DecodeNoParams(%q) = %v, want nil", tt.raw, err)
			}
			continue
		}
		t.Run(tt.raw, func(t *testing.T) { wantError(t, err, protocol.CodeInvalidParams, tt.errMsg) })
	}
}

// topLevelKeys reports, for each name, whether the object raw has it at its
// top level with a non-null value: the walk's required-member check alone.
func topLevelKeys(raw []byte, names []string) ([]bool, error) {
	w := memberWalk{scanner: scanner{b: raw}, names: names, present: make([]bool, len(names))}
	w.ws()
	if err := w.object(nil, true, 0); err != nil {
		return nil, err
	}
	return w.present, nil
}

func TestTopLevelKeys(t *testing.T) {
	names := []string{"a", "b", `q"k`}
	tests := []struct {
		raw  string
		want []bool
	}{
		{`{}`, []bool{false, false, false}},
		{` { "a" : 1 , "b" : 2 } `, []bool{true, true, false}},
		{"{\n\t\"a\":\r\n{}}", []bool{true, false, false}},
		{`{"a":null,"b":0}`, []bool{false, true, false}},
		{`{"a":null}`, []bool{false, false, false}},
		{`{"a":"null"}`, []bool{true, false, false}},
		{`{"a":false,"b":""}`, []bool{true, true, false}},
		{`{"x":{"a":1,"b":2}}`, []bool{false, false, false}},
		{`{"x":[{"a":1},"b"],"b":[]}`, []bool{false, true, false}},
		{`{"x":"\"a\":1,\"b\":2","a":[]}`, []bool{true, false, false}},
		{`{"x\"":1,"a":{"b":{"c":[1,2,{"d":"}"}]}}}`, []bool{true, false, false}},
		{`{"q\"k":1}`, []bool{false, false, true}},
		{`{"\u0061":1}`, []bool{true, false, false}},
		{`{"x":"a\\","b":1}`, []bool{false, true, false}},
		{`{"a":-1.5e3,"b":true}`, []bool{true, true, false}},
	}
	for _, tt := range tests {
		got, err := topLevelKeys([]byte(tt.raw), names)
		if err != nil {
			t.Errorf("topLevelKeys(%s): %v", tt.raw, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("topLevelKeys(%s) = %v, want %v", tt.raw, got, tt.want)
		}
	}
}

func TestTopLevelKeysMalformed(t *testing.T) {
	for _, raw := range []string{
		``, `[]`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{a:1}`,
		`{"a":"unterminated}`, `{"a":{"b":1}`, `{"a":[1,2}`, `{"a\`,
		`{"a":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
	} {
		if got, err := topLevelKeys([]byte(raw), []string{"a"}); err == nil {
			t.Errorf("topLevelKeys(%.40s) = %v, nil; want an error", raw, got)
		}
	}
}

func TestCutMember(t *testing.T) {
	cases := []struct{ raw, name, rest, value string }{
		{`{"handleId":"h","offset":0,"chunk":"QUJD"}`, "chunk", `{"handleId":"h","offset":0,"chunk":null}`, `"QUJD"`},
		{`{"chunk":"QUJD","handleId":"h"}`, "chunk", `{"chunk":null,"handleId":"h"}`, `"QUJD"`},
		{` { "a" : {"chunk":1} , "chunk" : "x\"y" } `, "chunk", ` { "a" : {"chunk":1} , "chunk" : null } `, `"x\"y"`},
		{`{"a":1}`, "chunk", `{"a":1}`, ``},
		{`[1]`, "chunk", `[1]`, ``},
		{`{}`, "chunk", `{}`, ``},
		// An escaped key names the member its decoded text spells.
		{`{"handleId":"h","c\u0068unk":"QUJD"}`, "chunk", `{"handleId":"h","c\u0068unk":null}`, `"QUJD"`},
		{`{"Chunk":"QUJD"}`, "chunk", `{"Chunk":"QUJD"}`, ``},
		{`{"a":1,"chunk":}`, "chunk", `{"a":1,"chunk":}`, ``},
	}
	for _, c := range cases {
		rest, value := CutMember([]byte(c.raw), c.name)
		if string(rest) != c.rest || string(value) != c.value {
			t.Errorf("CutMember(%s) = %s, %s; want %s, %s", c.raw, rest, value, c.rest, c.value)
		}
	}
}

// TestDecodeParamsExactNames pins serde's exact member matching (checked
// on the reference with process/read, fs/readFile, initialize and
// process/start): a key that differs from a field's name only by case, or by
// Unicode folding (ſ, K), is an unknown member and ignored, wherever it is
// nested; the correctly spelled key decodes whatever its position.
func TestDecodeParamsExactNames(t *testing.T) {
	type item struct {
		Name string `json:"name"`
	}
	type opts struct {
		MaxDepth uint64 `json:"maxDepth"`
		Kind     string `json:"kind"`
	}
	type params struct {
		ProcessID string            `json:"processId"`
		AfterSeq  *uint64           `json:"afterSeq,omitempty"`
		Env       map[string]string `json:"env,omitempty"`
		Opts      *opts             `json:"opts,omitempty"`
		Items     []item            `json:"items,omitempty"`
		ByKey     map[string]item   `json:"byKey,omitempty"`
		Raw       json.RawMessage   `json:"raw,omitempty"`
		Untagged  string
	}
	u := func(v uint64) *uint64 { return &v }
	tests := []struct {
		name   string
		raw    string
		want   params
		errMsg string
	}{
		{name: "wrong case alone is missing", raw: `{"ProcessId":"x"}`, errMsg: "missing field `processId`"},
		{name: "wrong case spelled with an escape", raw: `{"Process\u0049d":"x"}`, errMsg: "missing field `processId`"},
		{name: "upper case alone", raw: `{"PROCESSID":"x"}`, errMsg: "missing field `processId`"},
		{name: "wrong case before right", raw: `{"ProcessId":"y","processId":"x"}`, want: params{ProcessID: "x"}},
		{name: "wrong case after right", raw: `{"processId":"x","ProcessId":"y"}`, want: params{ProcessID: "x"}},
		{name: "wrong case of another type ignored", raw: `{"PROCESSID":5,"processId":"x","AfterSeq":"zz"}`, want: params{ProcessID: "x"}},
		{name: "right case still type-checked", raw: `{"processId":"x","afterSeq":"zz"}`, errMsg: "for field `afterSeq`"},
		{name: "unicode folding ignored", raw: `{"processId":"x","afterſeq":7,"opts":{"\u212aind":"k"}}`, want: params{ProcessID: "x", Opts: &opts{}}},
		{name: "nested struct", raw: `{"processId":"x","opts":{"MaxDepth":9,"maxDepth":1,"MAXDEPTH":"zz"}}`, want: params{ProcessID: "x", Opts: &opts{MaxDepth: 1}}},
		{name: "structs in a slice", raw: `{"processId":"x","items":[{"Name":"a"},{"name":"b","NAME":1},null]}`, want: params{ProcessID: "x", Items: []item{{}, {Name: "b"}, {}}}},
		{name: "structs in a map; map keys are data", raw: `{"processId":"x","byKey":{"Name":{"name":"b","Name":"a"}},"env":{"PATH":"1","path":"2"}}`,
			want: params{ProcessID: "x", ByKey: map[string]item{"Name": {Name: "b"}}, Env: map[string]string{"PATH": "1", "path": "2"}}},
		{name: "raw members are kept verbatim", raw: `{"processId":"x","raw":{"ProcessId":1}}`, want: params{ProcessID: "x", Raw: json.RawMessage(`{"ProcessId":1}`)}},
		{name: "untagged field by its Go name only", raw: `{"processId":"x","Untagged":"yes","untagged":"no"}`, want: params{ProcessID: "x", Untagged: "yes"}},
		{name: "exact spelling with an escape", raw: `{"process\u0049d":"x","after\u0053eq":3}`, want: params{ProcessID: "x", AfterSeq: u(3)}},
		{name: "null wrong case", raw: `{"processId":"x","Opts":null,"Items":[1]}`, want: params{ProcessID: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got params
			err := DecodeParams(json.RawMessage(tt.raw), &got, "ReadParams", "processId")
			if tt.errMsg != "" {
				wantError(t, err, protocol.CodeInvalidParams, tt.errMsg)
				return
			}
			if err != nil {
				t.Fatalf("DecodeParams(%s): %v", tt.raw, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecodeParams(%s) =\n %+v, want\n %+v", tt.raw, got, tt.want)
			}
		})
	}
}

// TestDecodeParamsExactNamesNoRequired covers a decode without required
// names (the walk then runs for the folding check alone) and a malformed
// object there, which keeps encoding/json's syntax message.
func TestDecodeParamsExactNamesNoRequired(t *testing.T) {
	var got protocol.FsWalkOptions
	if err := DecodeParams(json.RawMessage(`{"MaxDepth":3,"maxEntries":2}`), &got, "WalkOptions"); err != nil {
		t.Fatal(err)
	}
	if got != (protocol.FsWalkOptions{MaxEntries: 2}) {
		t.Errorf("got %+v, want only maxEntries 2", got)
	}
	wantError(t, DecodeParams(json.RawMessage(`{"maxDepth":3,}`), &got, "WalkOptions"), protocol.CodeInvalidParams, "invalid character '}'")
}

func TestEachMember(t *testing.T) {
	var got []string
	err := EachMember([]byte(` { "a" : 1 , "b\"c" : {"x":[1,"}"]} , "d":"e\\" } `), func(key, value []byte) error {
		got = append(got, string(key)+"="+string(value))
		return nil
	})
	want := []string{`a=1`, `b\"c={"x":[1,"}"]}`, `d="e\\"`}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("EachMember = %q, %v; want %q", got, err, want)
	}
	stop := errors.New("stop here")
	n := 0
	if err := EachMember([]byte(`{"a":1,"b":2}`), func(_, _ []byte) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("EachMember did not stop at f's error: %v after %d calls", err, n)
	}
	for _, raw := range []string{``, `[]`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{a:1}`, `{"a":{"b":1}`} {
		if err := EachMember([]byte(raw), func(_, _ []byte) error { return nil }); err == nil {
			t.Errorf("EachMember(%s) = nil, want an error", raw)
		}
	}
}

func TestKeyIs(t *testing.T) {
	for _, c := range []struct {
		key, name string
		want      bool
	}{
		{`processId`, "processId", true},
		{`process\u0049d`, "processId", true},
		{`ProcessId`, "processId", false},
		{`q\"k`, `q"k`, true},
		{`bad\x`, "badx", false},
		{``, "", true},
	} {
		if got := keyIs([]byte(c.key), c.name); got != c.want {
			t.Errorf("keyIs(%s, %q) = %v, want %v", c.key, c.name, got, c.want)
		}
	}
}

package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// TestTermSizeCheck: the rows and cols check (protocol.StartParams and
// ResizeParams implement MemberChecker) runs in the one walk and takes
// precedence over every other params error, as when it ran first.
func TestTermSizeCheck(t *testing.T) {
	tests := []struct {
		raw, want string // want "" = accepted
	}{
		{`{"processId":"p","rows":1,"cols":1000}`, ""},
		{`{"processId":"p","rows":24,"cols":80}`, ""},
		{`{"processId":"p","rows":0,"cols":80}`, "`rows` must be an integer from 1 to 1000, got 0"},
		{`{"processId":"p","rows":24,"cols":1001}`, "`cols` must be an integer from 1 to 1000, got 1001"},
		{`{"processId":"p","rows":65536,"cols":1}`, "`rows` must be an integer from 1 to 1000, got 65536"},
		{`{"processId":"p","rows":-1,"cols":1}`, "got -1"},
		{`{"processId":"p","rows":2.5,"cols":1}`, "got 2.5"},
		{`{"processId":"p","rows":"24","cols":1}`, `got "24"`},
		{`{"processId":"p","r\u006fws":0,"cols":1}`, "`rows` must be"},
		{`{"processId":"p","rows":99999999999999999999999999999999999999}`, "got 99999999999999999999999999999999..."},
		// Before a missing field, an over-long id or a type error.
		{`{"rows":0}`, "`rows` must be"},
		{`{"processId":"` + strings.Repeat("x", 300) + `","rows":0}`, "`rows` must be"},
		{`{"processId":5,"rows":1,"cols":0}`, "`cols` must be"},
		{`{"processId":"p","rows":null,"cols":80}`, "missing field `rows`"},
	}
	for _, tc := range tests {
		var p protocol.ResizeParams
		err := DecodeParams(json.RawMessage(tc.raw), &p, "ResizeParams", "processId", "rows", "cols")
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.raw, err)
			}
			continue
		}
		wantError(t, err, protocol.CodeInvalidParams, tc.want)
	}
	var s protocol.StartParams
	err := DecodeParams(json.RawMessage(`{"processId":"p","argv":["x"],"cwd":"/","env":{},"tty":true,"cols":0}`), &s, "ExecParams")
	wantError(t, err, protocol.CodeInvalidParams, "`cols` must be an integer from 1 to 1000, got 0")
}

// FuzzTermSizeCheck: never panics; whatever is accepted decodes into the
// uint16 fields of ResizeParams within bounds.
func FuzzTermSizeCheck(f *testing.F) {
	for _, s := range []string{`{"rows":1,"cols":1000}`, `{"rows":0}`, `{"rows":65536}`, `{"cols":null}`, `{"rows":1e3}`, `{`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p protocol.ResizeParams
		if DecodeParams(data, &p, "ResizeParams") != nil {
			return
		}
		if p.Rows > protocol.MaxTermSize || p.Cols > protocol.MaxTermSize {
			t.Fatalf("%q accepted as %dx%d", data, p.Rows, p.Cols)
		}
	})
}

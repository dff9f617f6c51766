package protocol

import "testing"

func TestCheckTermSize(t *testing.T) {
	tests := []struct {
		raw, want string // want "" = accepted
	}{
		{`{"rows":1,"cols":1000}`, ""},
		{`{"rows":24}`, ""},
		{`{"rows":null,"cols":null}`, ""},
		{`{}`, ""},
		{`not json`, ""}, // left to DecodeParams
		{`{"rows":0,"cols":80}`, "`rows` must be an integer from 1 to 1000, got 0"},
		{`{"rows":24,"cols":1001}`, "`cols` must be an integer from 1 to 1000, got 1001"},
		{`{"rows":65536}`, "`rows` must be an integer from 1 to 1000, got 65536"},
		{`{"rows":-1}`, "got -1"},
		{`{"rows":2.5}`, "got 2.5"},
		{`{"rows":"24"}`, `got "24"`},
		{`{"r\u006fws":0}`, "`rows` must be"},
		{`{"rows":99999999999999999999999999999999999999}`, "got 99999999999999999999999999999999..."},
	}
	for _, tc := range tests {
		err := CheckTermSize([]byte(tc.raw))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.raw, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted, want %q", tc.raw, tc.want)
			continue
		}
		wantError(t, err, CodeInvalidParams, tc.want)
	}
}

// FuzzCheckTermSize: never panics; whatever it accepts decodes into the
// uint16 fields of ResizeParams within bounds.
func FuzzCheckTermSize(f *testing.F) {
	for _, s := range []string{`{"rows":1,"cols":1000}`, `{"rows":0}`, `{"rows":65536}`, `{"cols":null}`, `{"rows":1e3}`, `{`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if CheckTermSize(data) != nil {
			return
		}
		var p ResizeParams
		if DecodeParams(data, &p, "ResizeParams") != nil {
			return
		}
		if (p.Rows != 0 && p.Rows > MaxTermSize) || (p.Cols != 0 && p.Cols > MaxTermSize) {
			t.Fatalf("%q accepted as %dx%d", data, p.Rows, p.Cols)
		}
	})
}

package fswatch

import (
	"errors"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

func TestDecodeMissingParams(t *testing.T) {
	for _, c := range []struct {
		in, err string
		want    MissingParams
	}{
		{in: `{"watchId":1,"missing":["file:///w/.git"],"present":null}`, want: MissingParams{WatchID: 1, Missing: []string{"/w/.git"}}},
		{in: `{"watchId":18446744073709551615,"missing":[],"present":"file:///w/f"}`, want: MissingParams{WatchID: 1<<64 - 1, Present: "/w/f"}},
		{in: `{"watchId":"x","missing":[]}`, err: `invalid type: string "x", expected u64`},
		{in: `{"watchId":-1,"missing":[]}`, err: "invalid value: integer `-1`, expected u64"},
		{in: `{"watchId":1.5,"missing":[]}`, err: "invalid type: floating point `1.5`, expected u64"},
		{in: `{"watchId":1e3,"missing":[]}`, err: "invalid type: floating point `1000.0`, expected u64"}, // serde's f64 display (internal/serde)
		{in: `{"watchId":true,"missing":[]}`, err: "invalid type: boolean `true`, expected u64"},
		{in: `{"missing":[]}`, err: "missing field `watchId`"},
		{in: `{"watchId":1}`, err: "missing field `missing`"},
		{in: `{"watchId":1,"missing":null}`, err: "invalid type: null, expected a sequence"},
		{in: `{"watchId":1,"missing":[1]}`, err: "invalid type: integer `1`, expected a string"},
		{in: `{"watchId":1,"missing":["/abs"]}`, err: "invalid URI: relative URL without a base"},
		{in: `{"watchId":1,"missing":[],"present":["file:///a"]}`, err: "invalid type: sequence, expected a string"},
		{in: `null`, err: "invalid type: null, expected struct WatchMissingParams"},
		{in: `[]`, err: "invalid type: sequence, expected struct WatchMissingParams"},
	} {
		got, err := DecodeMissingParams([]byte(c.in))
		if c.err != "" {
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams || pe.Message != c.err {
				t.Errorf("%s: got %v, want -32602 %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got.WatchID != c.want.WatchID || got.Present != c.want.Present || len(got.Missing) != len(c.want.Missing) {
			t.Errorf("%s: got %+v %v, want %+v", c.in, got, err, c.want)
			continue
		}
		for i := range got.Missing {
			if got.Missing[i] != c.want.Missing[i] {
				t.Errorf("%s: missing[%d] %q, want %q", c.in, i, got.Missing[i], c.want.Missing[i])
			}
		}
	}
}

// FuzzDecodeMissingParams: any input decodes or fails with -32602, and a
// decoded path is absolute.
func FuzzDecodeMissingParams(f *testing.F) {
	for _, s := range []string{`{"watchId":1,"missing":["file:///a/b"],"present":null}`, `{"watchId":"x"}`, `{"watchId":1,"missing":[],"present":"file:///p"}`, `[]`, `{"watchId":1e3,"missing":[1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := DecodeMissingParams(raw)
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || (pe.Code != protocol.CodeInvalidParams && pe.Code != protocol.CodeInvalidRequest) {
				t.Fatalf("%q: error %v is not a params error", raw, err)
			}
			return
		}
		for _, m := range append(p.Missing, p.Present) {
			if m != "" && m[0] != '/' {
				t.Fatalf("%q: relative path %q", raw, m)
			}
		}
	})
}

// FuzzDecodeWatchParams: fs/watch and fs/unwatch params decode or fail
// with -32602 (-32600 for a URI naming another host, as fileuri words it);
// a decoded watch has a non-empty, bounded id and an absolute
// path.
func FuzzDecodeWatchParams(f *testing.F) {
	for _, s := range []string{`{"watchId":"w","path":"file:///a","recursive":true}`, `{"watchId":"","path":"file:///a"}`, `{"watchId":1}`, `{"watchId":"w","path":"/a"}`, `null`, `{"watchId":"0","path":"file://0"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		check := func(err error) bool {
			if err == nil {
				return true
			}
			var pe *protocol.Error
			if !errors.As(err, &pe) || (pe.Code != protocol.CodeInvalidParams && pe.Code != protocol.CodeInvalidRequest) {
				t.Fatalf("%q: error %v is not a params error", raw, err)
			}
			return false
		}
		if p, err := DecodeWatchParams(raw); check(err) {
			if p.WatchID == "" || len(p.WatchID) > MaxWatchIDBytes || p.Path == "" || p.Path[0] != '/' {
				t.Fatalf("%q decoded to %+v", raw, p)
			}
		}
		if p, err := DecodeUnwatchParams(raw); check(err) && (p.WatchID == "" || len(p.WatchID) > MaxWatchIDBytes) {
			t.Fatalf("%q decoded to %+v", raw, p)
		}
	})
}

package serde

import "testing"

// TestUnexpected: the wording of each kind of value; the float rows are
// serde's (sandbox/policy's TestParseErrors checks 1e3 against the
// reference).
func TestUnexpected(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{}`, "map"},
		{`[1]`, "sequence"},
		{`null`, "null"},
		{``, "null"},
		{`"a\"b"`, `string "a\"b"`},
		{`"\u0041"`, `string "A"`},
		{`true`, "boolean `true`"},
		{`false`, "boolean `false`"},
		{`3`, "integer `3`"},
		{`-12`, "integer `-12`"},
		{`1.5`, "floating point `1.5`"},
		{`1e3`, "floating point `1000.0`"},
		{`1.0`, "floating point `1.0`"},
		{`-0.0`, "floating point `-0.0`"},
		{`2.5E-1`, "floating point `0.25`"},
	} {
		if got := Unexpected([]byte(c.in)); got != c.want {
			t.Errorf("Unexpected(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

package jsonscan

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// TestMember: the first top-level member of that exact name (escapes in
// keys decoded), never one nested or spelled otherwise.
func TestMember(t *testing.T) {
	tests := []struct {
		raw, name, want string
		found           bool
	}{
		{`{"a":1,"sandbox":{"x":2}}`, "sandbox", `{"x":2}`, true},
		{` { "sandbox" : null } `, "sandbox", `null`, true},
		{`{"sandbo\u0078":"s"}`, "sandbox", `"s"`, true},
		{`{"Sandbox":1}`, "sandbox", ``, false},
		{`{"a":{"sandbox":1}}`, "sandbox", ``, false},
		{`{"a":"\"sandbox\":1"}`, "sandbox", ``, false},
		{`{"chunk":"QUJD","chunk":"RA=="}`, "chunk", `"QUJD"`, true},
		{`["sandbox",1]`, "sandbox", ``, false},
		{`{"a":1,"sandbox"`, "sandbox", ``, false},
		{``, "sandbox", ``, false},
	}
	for _, tt := range tests {
		got := Member([]byte(tt.raw), tt.name)
		if (got != nil) != tt.found || string(got) != tt.want {
			t.Errorf("Member(%s, %q) = %q (found %v), want %q (found %v)", tt.raw, tt.name, got, got != nil, tt.want, tt.found)
		}
		// Alongside another name, before or after it: the same value.
		for _, names := range [][]string{{tt.name, "a"}, {"a", tt.name}, {tt.name, tt.name}} {
			vs := Members([]byte(tt.raw), names...)
			i := 0
			if names[0] != tt.name {
				i = 1
			}
			if string(vs[i]) != string(got) || (vs[i] != nil) != (got != nil) {
				t.Errorf("Members(%s, %q) = %q, Member gives %q", tt.raw, names, vs, got)
			}
		}
	}
	if vs := Members([]byte(`{"a":1,"b":2}`), "b", "a", "c"); string(vs[0]) != "2" || string(vs[1]) != "1" || vs[2] != nil {
		t.Errorf("Members(b, a, c) = %q", vs)
	}
}

// FuzzMember: on a valid object without repeated keys, Member finds each
// member encoding/json finds, with the same raw value, and nothing else.
func FuzzMember(f *testing.F) {
	for _, s := range []string{`{"a":1,"sandbox":{"x":2}}`, `{"sandbo\u0078":"s","b":[1,{"c":null}]}`, `{"x":"\\\"y"}`, `{}`, `[]`} {
		f.Add([]byte(s), "sandbox")
	}
	f.Fuzz(func(t *testing.T, raw []byte, name string) {
		got := Member(raw, name) // any input: no panic
		var m map[string]json.RawMessage
		if !utf8.Valid(raw) || json.Unmarshal(raw, &m) != nil || m == nil {
			return
		}
		n := 0
		if EachMember(raw, func(_, _ []byte) error { n++; return nil }) != nil || n != len(m) {
			return // repeated keys: encoding/json keeps the last
		}
		want, ok := m[name]
		if (got != nil) != ok || string(got) != string(want) {
			t.Fatalf("Member(%s, %q) = %q, encoding/json finds %q (%v)", raw, name, got, want, ok)
		}
		keys := []string{name}
		for k, v := range m {
			keys = append(keys, k)
			if g := Member(raw, k); string(g) != string(v) {
				t.Fatalf("Member(%s, %q) = %q, encoding/json finds %q", raw, k, g, v)
			}
		}
		// All at once, and a name found twice in the list.
		vs := Members(raw, keys...)
		for i, k := range keys {
			want, ok := m[k]
			if (vs[i] != nil) != ok || string(vs[i]) != string(want) {
				t.Fatalf("Members(%s, %q)[%d] = %q, encoding/json finds %q (%v)", raw, keys, i, vs[i], want, ok)
			}
		}
	})
}

package caproots

import (
	"testing"
	"unicode/utf8"
)

// TestUTF8ErrorText: the reference's warning carries Rust's Utf8Error
// text; these are its answers for each kind of bad sequence.
func TestUTF8ErrorText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"\xff\xfe", "invalid utf-8 sequence of 1 bytes from index 0"}, // measured on 0.171
		{"ab\x80", "invalid utf-8 sequence of 1 bytes from index 2"},
		{"a\xe2\x82", "incomplete utf-8 byte sequence from index 1"},
		{"\xe2\x82a", "invalid utf-8 sequence of 2 bytes from index 0"},
		{"\xf0\x9f\x98", "incomplete utf-8 byte sequence from index 0"},
		{"\xf0\x9f\x98a", "invalid utf-8 sequence of 3 bytes from index 0"},
		{"\xed\xa0\x80", "invalid utf-8 sequence of 1 bytes from index 0"}, // a surrogate
		{"\xe0\x80\x80", "invalid utf-8 sequence of 1 bytes from index 0"}, // overlong
		{"\xf4\x90\x80\x80", "invalid utf-8 sequence of 1 bytes from index 0"},
		{"\xc3", "incomplete utf-8 byte sequence from index 0"},
		{"é\xc3a", "invalid utf-8 sequence of 1 bytes from index 2"},
	} {
		if got := utf8ErrorText([]byte(c.in)); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}

func FuzzUTF8ErrorText(f *testing.F) {
	for _, s := range []string{"\xff", "a\xe2\x82", "\xf0\x9f\x98a", "ok"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if utf8.Valid(b) {
			return
		}
		if utf8ErrorText(b) == "" {
			t.Fatal("empty text")
		}
	})
}

// TestDeclaredPath: a manifest's mcpServers/apps path must be "./" and
// stay below the root; the reference's warnings otherwise.
func TestDeclaredPath(t *testing.T) {
	for _, c := range []struct{ in, want, warn string }{
		{`"./m.json"`, "/r/m.json", ""},
		{`"./a/./b.json"`, "/r/a/b.json", ""},
		{`"m.json"`, "", "ignoring apps in M: path must start with `./`"},
		{`"../m.json"`, "", "ignoring apps in M: path must start with `./`"},
		{`"./"`, "", "ignoring apps in M: path must remain below the capability root"},
		{`"./a/../../m"`, "", "ignoring apps in M: path must remain below the capability root"},
		{`"./a\\..\\m"`, "", "ignoring apps in M: path must remain below the capability root"},
		{`".//etc/passwd"`, "", "ignoring apps in M: path must remain below the capability root"},
		{`{"a":1}`, "", ""},
		{`3`, "", ""},
		{``, "", ""},
	} {
		s := &scanner{root: "/r"}
		got := s.declaredPath("apps", []byte(c.in), "M")
		warn := ""
		if len(s.d.Warnings) > 0 {
			warn = s.d.Warnings[0]
		}
		if got != c.want || warn != c.warn {
			t.Errorf("%s: got %q %q, want %q %q", c.in, got, warn, c.want, c.warn)
		}
	}
}

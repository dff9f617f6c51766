package fileuri

import (
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzFromPath checks the other direction: any path renders as a printable
// ASCII URI without a literal character the reference escapes, and every
// path the parser could have produced parses back to itself.
func FuzzFromPath(f *testing.F) {
	for _, s := range []string{"/", "/tmp/a", "/a b/%41", "/é/\xff", "/x\\y", "/q?#", "/\x00", "/a/../b", "rel"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		u := FromPath(p)
		if !strings.HasPrefix(u, "file://") {
			t.Fatalf("FromPath(%q) = %q", p, u)
		}
		for i := 0; i < len(u); i++ {
			c := u[i]
			if c <= 0x20 || c >= 0x7f || strings.IndexByte("\"#<>?`{}\\", c) >= 0 {
				t.Fatalf("FromPath(%q) = %q: literal %q", p, u, c)
			}
			if c == '%' && (i+2 >= len(u) || !isUpperHex(u[i+1]) || !isUpperHex(u[i+2])) {
				t.Fatalf("FromPath(%q) = %q: bare %%", p, u)
			}
		}
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
			return
		}
		back, err := Parse(u)
		if err != nil || back != p {
			t.Fatalf("Parse(FromPath(%q)) = %q, %v", p, back, err)
		}
	})
}

func isUpperHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'F'
}

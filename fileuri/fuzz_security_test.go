package fileuri

import (
	"errors"
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/execgo/exec-server/protocol"
)

// FuzzParseURISecurity checks the one gate every client path goes through:
// whatever it accepts is a clean absolute path without NUL bytes, "."/".."
// segments or invalid UTF-8 (so no later join can climb out of it), it
// round-trips through FromPath, and every refusal is a -32602 or -32600
// protocol error.
func FuzzParseURISecurity(f *testing.F) {
	for _, s := range []string{
		"file:///tmp/a", "file://localhost/tmp/a", "file://LOCALHOST/x", "file://host/tmp/a", "file:/tmp/a", "file:tmp",
		"FILE:///a", "file:///a%20b", "file:///a%2Fb", "file:///a%00b", "file:///%ff", "file:///a%", "file:///a%zz",
		"file:///../../etc/passwd", "file:///a/./b/../c", "file:///a/%2e%2e/%2e%2e/b", "file:///a?b#c", "file://",
		"file:", "/tmp/a", "tmp/a", "", ":", "http://x/", "c:\\x", "file:///a//b/", "file:///\u00e9", "file:///\xff",
		"f+i.l-e:///x", "1file:///x", "file:////x", "file://[::1]/x", "file://localhost:80/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		p, err := Parse(uri)
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || (pe.Code != protocol.CodeInvalidParams && pe.Code != protocol.CodeInvalidRequest) {
				t.Fatalf("Parse(%q): error %T %v is not -32602 or -32600", uri, err, err)
			}
			return
		}
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
			t.Fatalf("Parse(%q) = %q: not a clean absolute path", uri, p)
		}
		if strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
			t.Fatalf("Parse(%q) = %q: NUL or invalid UTF-8", uri, p)
		}
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("Parse(%q) = %q: dot segment survived", uri, p)
			}
		}
		back, err := Parse(FromPath(p))
		if err != nil || back != p {
			t.Fatalf("Parse(FromPath(%q)) = %q, %v", p, back, err)
		}
	})
}

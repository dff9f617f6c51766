package fileuri

import (
	"errors"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want string
		code int
	}{
		{"file:///tmp/a", "/tmp/a", 0},
		{"file://localhost/tmp/a", "/tmp/a", 0},
		{"file://LocalHost/tmp/a", "/tmp/a", 0},
		{"FILE:///tmp/a", "/tmp/a", 0},
		{"file:///", "/", 0},
		{"file://", "/", 0},
		{"file:///tmp/%61.txt", "/tmp/a.txt", 0},
		{"file:///tmp/a%20b", "/tmp/a b", 0},
		{"file:///tmp/%C3%A9", "/tmp/é", 0},
		{"file:///tmp/./a/../b", "/tmp/b", 0},
		{"file:///tmp/..", "/", 0},
		{"file:///../../etc", "/etc", 0},
		{"file:///tmp/%2e%2e/etc", "/etc", 0},
		{"file:///tmp/a/", "/tmp/a", 0},
		{"file:///tmp//a", "/tmp/a", 0},
		{"file:///tmp/a?query#frag", "", protocol.CodeInvalidParams},
		{"file:///tmp/a?", "", protocol.CodeInvalidParams},
		{"file:///tmp/a#", "", protocol.CodeInvalidParams},
		{"file://host/tmp/a?x", "", protocol.CodeInvalidParams},
		{"file://localhost:80/x", "", protocol.CodeInvalidParams},
		{"file://user@localhost/x", "", protocol.CodeInvalidParams},
		{"file://[::1]/x", "", protocol.CodeInvalidRequest},
		{"file://127.0.0.1/x", "", protocol.CodeInvalidRequest},
		{"file://%6cocalhost/x", "/x", 0},
		{"file:///x%2", "/x%2", 0},
		{"file:///x%zz", "/x%zz", 0},
		{"file:///x%", "/x%", 0},
		{"file:tmp/a", "/tmp/a", 0},
		{"/tmp/a", "", protocol.CodeInvalidParams},
		{"tmp/a", "", protocol.CodeInvalidParams},
		{"", "", protocol.CodeInvalidParams},
		{"C:\\x", "", protocol.CodeInvalidParams},
		{"http://x/y", "", protocol.CodeInvalidParams},
		{"file://host/tmp/a", "", protocol.CodeInvalidRequest},
		{"file:///tmp/a%00b", "", protocol.CodeInvalidParams},
		{"file:///tmp/%FF", "", protocol.CodeInvalidParams},
		{"file:///tmp/\xff", "", protocol.CodeInvalidParams},
	} {
		got, err := Parse(tc.uri)
		if tc.code != 0 {
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != tc.code {
				t.Errorf("Parse(%q) = %q, %v; want code %d", tc.uri, got, err, tc.code)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.uri, got, err, tc.want)
		}
	}
}

// The reference's URL library escapes exactly these characters in file
// paths (observed in its fs/walk and fs/canonicalize replies).
func TestFromPathMatchesReference(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/", "file:///"},
		{"/tmp/a.txt", "file:///tmp/a.txt"},
		{"/d/a b%c#d?é{}`<>\"'!$&()*+,;=:@[]^|~", "file:///d/a%20b%25c%23d%3F%C3%A9%7B%7D%60%3C%3E%22'!$&()*+,;=:@[]^|~"},
		{"/d/x\\y", "file:///d/x%5Cy"},
		{"/d/del\x7f", "file:///d/del%7F"},
		{"/d/t\tab\n", "file:///d/t%09ab%0A"},
		{"/d/bad\xff", "file:///d/bad%FF"},
	} {
		if got := FromPath(tc.path); got != tc.want {
			t.Errorf("FromPath(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// The reference's texts for a query and a fragment (observed).
func TestParseQueryAndFragmentTexts(t *testing.T) {
	for uri, want := range map[string]string{
		"file:///x?a#b": "query parameters are not allowed in path URIs",
		"file:///x#a?b": "fragments are not allowed in path URIs",
	} {
		_, err := Parse(uri)
		if err == nil || err.(*protocol.Error).Message != want {
			t.Errorf("Parse(%q): %v, want %q", uri, err, want)
		}
	}
}

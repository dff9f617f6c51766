// Package fileuri converts the protocol's file: URIs to local absolute paths
// and back. Every path a client names goes through Parse before anything
// touches the disk.
package fileuri

import (
	"path"
	"strings"
	"unicode/utf8"

	"github.com/execgo/exec-server/protocol"
)

// Parse returns the clean absolute local path named by a file: URI.
// "file:///abs" and "file://localhost/abs" are accepted; percent escapes are
// decoded and "." and ".." segments resolved lexically (never above "/").
// Relative strings and native paths are -32602, other schemes -32602, a
// foreign host -32600; NUL bytes and invalid UTF-8 are -32602.
func Parse(uri string) (string, error) {
	if !utf8.ValidString(uri) {
		return "", protocol.InvalidParams("invalid URI: not valid UTF-8")
	}
	colon := strings.IndexByte(uri, ':')
	slash := strings.IndexByte(uri, '/')
	if colon <= 0 || (slash >= 0 && slash < colon) {
		return "", protocol.InvalidParams("invalid URI: relative URL without a base")
	}
	scheme := strings.ToLower(uri[:colon])
	if !validScheme(scheme) {
		return "", protocol.InvalidParams("invalid URI: relative URL without a base")
	}
	if scheme != "file" {
		return "", protocol.InvalidParams("unsupported path URI scheme `%s`", scheme)
	}
	rest := uri[colon+1:]
	// A query or fragment would be silently dropped by a URL parser; the
	// reference refuses both, the query first when both are there.
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		if rest[i] == '?' {
			return "", protocol.InvalidParams("query parameters are not allowed in path URIs")
		}
		return "", protocol.InvalidParams("fragments are not allowed in path URIs")
	}
	var host, p string
	if strings.HasPrefix(rest, "//") {
		rest = rest[2:]
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			host, p = rest, "/"
		} else {
			host, p = rest[:i], rest[i:]
		}
	} else {
		p = rest
	}
	// A file: URL has no user or port; the reference's URL parser rejects
	// them as a bad host name.
	if strings.ContainsAny(host, "@") || (strings.Contains(host, ":") && !strings.HasPrefix(host, "[")) {
		return "", protocol.InvalidParams("invalid URI: invalid international domain name")
	}
	if host = unescape(host); host != "" && !strings.EqualFold(host, "localhost") {
		return "", protocol.InvalidRequest("'%s' is invalid on 'linux'", uri)
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	decoded := unescape(p)
	if strings.IndexByte(decoded, 0) >= 0 {
		return "", protocol.InvalidParams("invalid URI: path contains a NUL byte")
	}
	if !utf8.ValidString(decoded) {
		return "", protocol.InvalidParams("invalid URI: path is not valid UTF-8")
	}
	return path.Clean(decoded), nil
}

// unescape decodes %XX escapes. Like the reference's URL library it keeps a
// '%' that does not start a valid escape as a literal character.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			continue
		}
		return false
	}
	return true
}

// FromPath renders an absolute local path as a file: URI, escaping what a
// URI cannot carry literally. The escaped set is the one the reference's URL
// library uses for file paths (controls, non-ASCII bytes, space and
// " # % < > ? ` { } and backslash); everything else stays literal, so paths
// read the same as in the reference's replies.
func FromPath(p string) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len("file://")+len(p)+8)
	b = append(b, "file://"...)
	for i := 0; i < len(p); i++ {
		c := p[i]
		if escapeInPath(c) {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return string(b)
}

func escapeInPath(c byte) bool {
	if c < 0x20 || c >= 0x7f {
		return true
	}
	switch c {
	case ' ', '"', '#', '%', '<', '>', '?', '`', '{', '}', '\\':
		return true
	}
	return false
}

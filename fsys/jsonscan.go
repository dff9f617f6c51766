package fsys

import (
	"bytes"
	"encoding/json"
	"errors"
)

// eachMember calls f with the raw key (without quotes, still escaped) and
// raw value of every top-level member of the JSON object raw. It skips
// values without decoding them, and strings with a memchr-speed search, so
// a request carrying tens of megabytes of base64 costs little to walk.
func eachMember(raw []byte, f func(key, value []byte)) error {
	i := skipWS(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return errors.New("expected an object")
	}
	i = skipWS(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return nil
	}
	for {
		i = skipWS(raw, i)
		ks := i
		i = skipString(raw, i)
		if i < 0 {
			return errors.New("key must be a string")
		}
		key := raw[ks+1 : i-1]
		i = skipWS(raw, i)
		if i >= len(raw) || raw[i] != ':' {
			return errors.New("expected `:`")
		}
		i = skipWS(raw, i+1)
		vs := i
		i = skipValue(raw, i, 0)
		if i < 0 {
			return errors.New("invalid value")
		}
		f(key, raw[vs:i])
		i = skipWS(raw, i)
		if i >= len(raw) {
			return errors.New("unterminated object")
		}
		switch raw[i] {
		case ',':
			i++
		case '}':
			return nil
		default:
			return errors.New("expected `,` or `}`")
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string starting at b[i], or -1.
func skipString(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	i++
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		// The quote ends the string unless an odd run of backslashes
		// precedes it.
		end := i + q
		bs := 0
		for j := end - 1; j >= i && b[j] == '\\'; j-- {
			bs++
		}
		if bs%2 == 0 {
			return end + 1
		}
		i = end + 1
	}
}

func skipValue(b []byte, i, depth int) int {
	if depth > 512 || i >= len(b) {
		return -1
	}
	switch c := b[i]; c {
	case '"':
		return skipString(b, i)
	case '{', '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == closer {
			return i + 1
		}
		for {
			i = skipWS(b, i)
			if c == '{' {
				if i = skipString(b, i); i < 0 {
					return -1
				}
				i = skipWS(b, i)
				if i >= len(b) || b[i] != ':' {
					return -1
				}
				i = skipWS(b, i+1)
			}
			if i = skipValue(b, i, depth+1); i < 0 {
				return -1
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return -1
			}
			if b[i] == ',' {
				i++
				continue
			}
			if b[i] == closer {
				return i + 1
			}
			return -1
		}
	default:
		start := i
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if i == start {
					return -1
				}
				return i
			}
			i++
		}
		if i == start {
			return -1
		}
		return i
	}
}

// keyIs reports whether the raw (still escaped) key equals name.
func keyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key) == name
	}
	var s string
	quoted := make([]byte, 0, len(key)+2)
	quoted = append(append(append(quoted, '"'), key...), '"')
	return json.Unmarshal(quoted, &s) == nil && s == name
}

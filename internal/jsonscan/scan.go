// Package jsonscan walks JSON without decoding it, and decodes request
// params as the reference (serde) does: exact member names, required
// members, bounded ids, with a bulk payload kept out of encoding/json.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
)

// One JSON scanner for the places that must look at a message without
// decoding it (required members, exact member names, cutting a bulk
// member out, walking fs/writeFile's params): it skips strings at memchr
// speed and decodes nothing, so tens of megabytes of base64 cost little.

type scanner struct {
	b []byte
	i int
	// known is a string body in b that an earlier pass found plain (no
	// quote, no backslash): skipString passes over it without reading it.
	known []byte
}

func (s *scanner) ws() { s.i = SkipSpace(s.b, s.i) }

// SkipSpace returns the index of the first byte of b at or after i that is
// not JSON white space.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) skipString() bool {
	if !s.eat('"') {
		return false
	}
	if k := s.known; len(k) > 0 && s.i+len(k) < len(s.b) && &s.b[s.i] == &k[0] && s.b[s.i+len(k)] == '"' {
		s.i += len(k) + 1
		return true
	}
	end := ClosingQuote(s.b, s.i)
	if end < 0 {
		return false
	}
	s.i = end + 1
	return true
}

// ClosingQuote returns the index of the quote that ends the JSON string
// whose body starts at b[i] (just past its opening quote), or -1. It jumps
// from quote to quote with bytes.IndexByte (tens of GB/s, against about
// 1.5 GB/s for IndexAny) and counts the backslashes just before each quote:
// an odd run escapes it. Each byte is looked at a bounded number of times,
// so strings full of escapes stay linear.
func ClosingQuote(b []byte, i int) int {
	for i <= len(b) {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		q += i
		n := 0
		for k := q - 1; k >= i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		i = q + 1
	}
	return -1
}

// skipValue moves past the JSON value at s.i and reports whether it is
// well formed (nesting beyond 512 levels is not). It decodes nothing and
// allocates nothing.
func (s *scanner) skipValue(depth int) bool {
	if depth > 512 || s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '"':
		return s.skipString()
	case '{', '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		s.i++
		s.ws()
		if s.eat(closer) {
			return true
		}
		for {
			s.ws()
			if c == '{' {
				if !s.skipString() {
					return false
				}
				s.ws()
				if !s.eat(':') {
					return false
				}
				s.ws()
			}
			if !s.skipValue(depth + 1) {
				return false
			}
			s.ws()
			if s.eat(',') {
				continue
			}
			return s.eat(closer)
		}
	default:
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.i > start
			}
			s.i++
		}
		return s.i > start
	}
}

// errStop ends a members walk early; it never leaves this file.
var errStop = errors.New("stop")

// members walks the object at s.i. For each member it calls f with the
// offset of the key's opening quote and the key as written (escapes not
// decoded), s.i at the member's value; f must move s.i past the value.
func (s *scanner) members(f func(kStart int, key []byte) error) error {
	if !s.eat('{') {
		return errors.New("expected an object")
	}
	s.ws()
	if s.eat('}') {
		return nil
	}
	for {
		s.ws()
		kStart := s.i
		if !s.skipString() {
			return errors.New("key must be a string")
		}
		key := s.b[kStart+1 : s.i-1]
		s.ws()
		if !s.eat(':') {
			return errors.New("expected `:` after a key")
		}
		s.ws()
		if err := f(kStart, key); err != nil {
			return err
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			return nil
		}
		return errors.New("expected `,` or `}`")
	}
}

// EachMember calls f with the key (as written: escapes not decoded) and the raw value of every top-level member of the JSON object
// raw, in order. Values are skipped, not decoded. It stops at f's first
// error and returns it.
func EachMember(raw []byte, f func(key, value []byte) error) error {
	s := scanner{b: raw}
	s.ws()
	return s.members(func(_ int, key []byte) error {
		vs := s.i
		if !s.skipValue(0) {
			return errors.New("invalid value")
		}
		return f(key, raw[vs:s.i])
	})
}

// keyIs reports whether key, a member name as written between its quotes,
// names name once its escapes are decoded: "process\u0049d" is processId,
// as for serde and encoding/json.
func keyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key) == name
	}
	k, ok := unescapeKey(key)
	return ok && k == name
}

// unescapeKey decodes the escapes of a key given without its quotes.
func unescapeKey(key []byte) (string, bool) {
	quoted := make([]byte, 0, len(key)+2)
	quoted = append(append(append(quoted, '"'), key...), '"')
	var k string
	err := json.Unmarshal(quoted, &k)
	return k, err == nil
}

// CutMember finds the top-level member name of the JSON object raw and
// returns its value (aliasing raw) and a copy of raw with that value
// replaced by null. Decoding rest then costs only the small members: a bulk
// payload (a base64 block) is neither validated nor copied twice. When the
// member is absent, or raw is not an object, it returns raw and nil.
func CutMember(raw []byte, name string) (rest, value []byte) {
	vs := 0
	s := scanner{b: raw}
	s.ws()
	err := s.members(func(_ int, key []byte) error {
		vs = s.i
		if !s.skipValue(0) {
			return errors.New("invalid value")
		}
		if keyIs(key, name) {
			return errStop
		}
		return nil
	})
	if err != errStop {
		return raw, nil
	}
	rest = make([]byte, 0, len(raw)-(s.i-vs)+4)
	rest = append(append(append(rest, raw[:vs]...), "null"...), raw[s.i:]...)
	return rest, raw[vs:s.i]
}

// Member returns the raw value of the first top-level member name of the
// JSON object raw (aliasing raw; a key's escapes decoded, as for
// CutMember), or nil when it is absent or raw is not an object. Values are
// skipped, not decoded: finding a member after, or in, tens of megabytes
// of base64 costs a memchr, not a parse.
func Member(raw []byte, name string) []byte {
	return Members(raw, name)[0]
}

// Members is Member for several names in one walk (which ends once all
// are found): values[i] is names[i]'s value, or nil.
func Members(raw []byte, names ...string) (values [][]byte) {
	values = make([][]byte, len(names))
	left := len(names)
	s := scanner{b: raw}
	s.ws()
	_ = s.members(func(_ int, key []byte) error {
		vs := s.i
		if !s.skipValue(0) {
			return errors.New("invalid value")
		}
		for i, name := range names {
			if values[i] == nil && keyIs(key, name) {
				values[i] = raw[vs:s.i]
				if left--; left == 0 {
					return errStop
				}
			}
		}
		return nil
	})
	return values
}

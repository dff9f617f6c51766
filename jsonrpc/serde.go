package jsonrpc

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// serdeSyntaxError checks that data is one JSON value, with serde_json's
// grammar (the reference's parser: encoding/json's, plus valid UTF-8 and
// paired surrogates in strings), and describes the first error as serde
// words and places it: "expected ident at line 1 column 2", "trailing
// characters at line 1 column 23". bad is false for valid input. Depth is
// bounded by prescan before this runs.
func serdeSyntaxError(data []byte) (msg string, bad bool) {
	p := serdeParser{b: data}
	e := p.value()
	if e == nil {
		p.ws()
		if p.i < len(p.b) {
			e = p.peekErr("trailing characters")
		}
	}
	if e == nil {
		return "", false
	}
	line, col := position(data, int64(e.at))
	return fmt.Sprintf("%s at line %d column %d", e.code, line, col), true
}

// serdeParser follows serde_json's SliceRead deserializer: i is the next
// unread byte. Errors raised after consuming a byte are placed at i
// (serde's error), errors about the byte ahead at i+1 (its peek_error).
type serdeParser struct {
	b []byte
	i int
}

type serdeErr struct {
	code string
	at   int // index whose position serde reports
}

func (p *serdeParser) err(code string) *serdeErr { return &serdeErr{code, p.i} }

func (p *serdeParser) peekErr(code string) *serdeErr {
	return &serdeErr{code, min(len(p.b), p.i+1)}
}

func (p *serdeParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\n', '\t', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *serdeParser) peek() (byte, bool) {
	if p.i < len(p.b) {
		return p.b[p.i], true
	}
	return 0, false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *serdeParser) value() *serdeErr {
	p.ws()
	c, ok := p.peek()
	if !ok {
		return p.peekErr("EOF while parsing a value")
	}
	switch {
	case c == 'n':
		p.i++
		return p.ident("ull")
	case c == 't':
		p.i++
		return p.ident("rue")
	case c == 'f':
		p.i++
		return p.ident("alse")
	case c == '-':
		p.i++
		return p.integer()
	case isDigit(c):
		return p.integer()
	case c == '"':
		p.i++
		return p.str()
	case c == '[':
		p.i++
		return p.seq()
	case c == '{':
		p.i++
		return p.object()
	}
	return p.peekErr("expected value")
}

func (p *serdeParser) ident(rest string) *serdeErr {
	for k := 0; k < len(rest); k++ {
		c, ok := p.peek()
		if !ok {
			return p.err("EOF while parsing a value")
		}
		p.i++
		if c != rest[k] {
			return p.err("expected ident")
		}
	}
	return nil
}

func (p *serdeParser) integer() *serdeErr {
	c, ok := p.peek()
	if !ok {
		return p.err("EOF while parsing a value")
	}
	p.i++
	switch {
	case c == '0':
		if c, ok := p.peek(); ok && isDigit(c) {
			return p.peekErr("invalid number")
		}
	case c >= '1' && c <= '9':
		for c, ok := p.peek(); ok && isDigit(c); c, ok = p.peek() {
			p.i++
		}
	default:
		return p.err("invalid number")
	}
	switch c, _ := p.peek(); c {
	case '.':
		return p.decimal()
	case 'e', 'E':
		return p.exponent()
	}
	return nil
}

func (p *serdeParser) decimal() *serdeErr {
	p.i++ // '.'
	digits := 0
	for c, ok := p.peek(); ok && isDigit(c); c, ok = p.peek() {
		p.i++
		digits++
	}
	if digits == 0 {
		if _, ok := p.peek(); ok {
			return p.peekErr("invalid number")
		}
		return p.peekErr("EOF while parsing a value")
	}
	if c, _ := p.peek(); c == 'e' || c == 'E' {
		return p.exponent()
	}
	return nil
}

func (p *serdeParser) exponent() *serdeErr {
	p.i++ // 'e'
	if c, _ := p.peek(); c == '+' || c == '-' {
		p.i++
	}
	c, ok := p.peek()
	if !ok {
		return p.err("EOF while parsing a value")
	}
	p.i++
	if !isDigit(c) {
		return p.err("invalid number")
	}
	for c, ok := p.peek(); ok && isDigit(c); c, ok = p.peek() {
		p.i++
	}
	return nil
}

// str reads a string whose opening quote is consumed.
func (p *serdeParser) str() *serdeErr {
	start := p.i
	for {
		p.i = plainRun(p.b, p.i)
		if p.i == len(p.b) {
			return p.err("EOF while parsing a string")
		}
		switch p.b[p.i] {
		case '"':
			p.i++
			// Escapes are ASCII: the raw text is valid UTF-8 exactly
			// when the decoded text is.
			if !utf8.Valid(p.b[start : p.i-1]) {
				return p.err("invalid unicode code point")
			}
			return nil
		case '\\':
			p.i++
			if e := p.escape(); e != nil {
				return e
			}
		default:
			p.i++
			return p.err("control character (\\u0000-\\u001F) found while parsing a string")
		}
	}
}

func (p *serdeParser) escape() *serdeErr {
	c, ok := p.peek()
	if !ok {
		return p.err("EOF while parsing a string")
	}
	p.i++
	switch c {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return nil
	case 'u':
		n, e := p.hex4()
		if e != nil {
			return e
		}
		switch {
		case n >= 0xDC00 && n <= 0xDFFF:
			return p.err("lone leading surrogate in hex escape")
		case n >= 0xD800 && n <= 0xDBFF:
			for _, want := range []byte{'\\', 'u'} {
				c, ok := p.peek()
				if !ok {
					return p.err("EOF while parsing a string")
				}
				p.i++
				if c != want {
					return p.err("unexpected end of hex escape")
				}
			}
			n2, e := p.hex4()
			if e != nil {
				return e
			}
			if n2 < 0xDC00 || n2 > 0xDFFF {
				return p.err("lone leading surrogate in hex escape")
			}
		}
		return nil
	}
	return p.err("invalid escape")
}

func (p *serdeParser) hex4() (int, *serdeErr) {
	if len(p.b)-p.i < 4 {
		p.i = len(p.b)
		return 0, p.err("EOF while parsing a string")
	}
	n := 0
	for _, c := range p.b[p.i : p.i+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			p.i += 4
			return 0, p.err("invalid escape")
		}
		n = n<<4 | int(d)
	}
	p.i += 4
	return n, nil
}

// seq reads an array whose '[' is consumed.
func (p *serdeParser) seq() *serdeErr {
	for first := true; ; first = false {
		p.ws()
		c, ok := p.peek()
		if !ok {
			return p.peekErr("EOF while parsing a list")
		}
		if c == ']' {
			p.i++
			return nil
		}
		if !first {
			if c != ',' {
				return p.peekErr("expected `,` or `]`")
			}
			p.i++
			p.ws()
			if c, ok = p.peek(); !ok {
				return p.peekErr("EOF while parsing a value")
			}
			if c == ']' {
				return p.peekErr("trailing comma")
			}
		}
		if e := p.value(); e != nil {
			return e
		}
	}
}

// object reads an object whose '{' is consumed.
func (p *serdeParser) object() *serdeErr {
	for first := true; ; first = false {
		p.ws()
		c, ok := p.peek()
		if !ok {
			return p.peekErr("EOF while parsing an object")
		}
		if c == '}' {
			p.i++
			return nil
		}
		if !first {
			if c != ',' {
				return p.peekErr("expected `,` or `}`")
			}
			p.i++
			p.ws()
			if c, ok = p.peek(); !ok {
				return p.peekErr("EOF while parsing a value")
			}
			if c == '}' {
				return p.peekErr("trailing comma")
			}
		}
		if c != '"' {
			return p.peekErr("key must be a string")
		}
		p.i++
		if e := p.str(); e != nil {
			return e
		}
		p.ws()
		if c, ok = p.peek(); !ok {
			return p.peekErr("EOF while parsing an object")
		}
		if c != ':' {
			return p.peekErr("expected `:`")
		}
		p.i++
		if e := p.value(); e != nil {
			return e
		}
	}
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainRun returns the index of the first byte at or after i that ends a
// run of plain string bytes: a quote, a backslash or a control character.
// It tests eight bytes at a time (a string's body is where the bulk of a
// large message lives, its base64 payload), then finds the byte one by one.
func plainRun(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ (ones * '"')
		bs := x ^ (ones * '\\')
		// A byte below 0x20, or equal to '"' or '\\', sets its high bit in
		// one of these (the classic has-zero / has-less tests, exact as to
		// whether such a byte exists).
		if ((x-ones*0x20)&^x|(q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
			break
		}
	}
	for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
		i++
	}
	return i
}

package jsonrpc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/segmentio/asm/ascii"
)

// serdeSyntaxError checks that data is one JSON value, with serde_json's
// grammar (the reference's parser: encoding/json's, plus valid UTF-8 and
// paired surrogates in strings), and describes the first error as serde
// words and places it: "expected ident at line 1 column 2", "trailing
// characters at line 1 column 23". bad is false for valid input. It bounds
// nothing (Decode's scan does): for tests.
func serdeSyntaxError(data []byte) (msg string, bad bool) {
	p := serdeParser{b: data}
	if e := p.document(); e != nil {
		return e.message(data), true
	}
	return "", false
}

// serdeParser follows serde_json's SliceRead deserializer: i is the next
// unread byte. Errors raised after consuming a byte are placed at i
// (serde's error), errors about the byte ahead at i+1 (its peek_error).
//
// With scan set (Decode), the same pass also bounds depth and value count
// as it goes (so hostile input cannot make it recurse or work without
// bound), finds repeated object keys, and keeps the top-level object's
// members: the message is read once.
type serdeParser struct {
	b []byte
	i int

	scan   bool
	lim    Limits
	depth  int
	values int
	dupErr *DecodeError
	keys   keyStack // the keys of every open object, innermost last
	top    byte     // the first byte of the top-level value
	// The top-level object's members (nil: absent), raw sub-slices.
	id, method, params, result, errv []byte
	bulk                             []byte // Message.Bulk
}

// bulkMin is the length from which a plain string is a message's Bulk.
const bulkMin = 64 << 10

type serdeErr struct {
	code  string
	at    int          // index whose position serde reports
	limit *DecodeError // a limit was exceeded (scan): not a syntax error
}

// message is the error as serde words and places it.
func (e *serdeErr) message(data []byte) string {
	line, col := position(data, int64(e.at))
	return fmt.Sprintf("%s at line %d column %d", e.code, line, col)
}

// document reads one value and nothing but whitespace after it.
func (p *serdeParser) document() *serdeErr {
	p.ws()
	if p.i < len(p.b) {
		p.top = p.b[p.i]
	}
	e := p.value()
	if e == nil {
		p.ws()
		if p.i < len(p.b) {
			e = p.peekErr("trailing characters")
		}
	}
	return e
}

// close ends the level count opened.
func (p *serdeParser) close() {
	if p.scan {
		p.depth--
	}
}

// count counts the value starting at p.i (and, for an array or object, the
// level it opens) against the limits, with the texts and places prescan
// gives them.
func (p *serdeParser) count(open bool) *serdeErr {
	p.values++
	if open {
		p.depth++
		if p.depth > p.lim.MaxDepth {
			line, col := position(p.b, int64(p.i))
			return &serdeErr{limit: &DecodeError{fmt.Sprintf("recursion limit exceeded at line %d column %d", line, col)}}
		}
	}
	if p.values > p.lim.MaxValues {
		line, col := position(p.b, int64(p.i))
		return &serdeErr{limit: &DecodeError{fmt.Sprintf("JSON-RPC message exceeds the limit of %d JSON values at line %d column %d", p.lim.MaxValues, line, col)}}
	}
	return nil
}

func (p *serdeParser) err(code string) *serdeErr { return &serdeErr{code: code, at: p.i} }

func (p *serdeParser) peekErr(code string) *serdeErr {
	return &serdeErr{code: code, at: min(len(p.b), p.i+1)}
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
	if p.scan {
		switch {
		case c == '[' || c == '{':
			if e := p.count(true); e != nil {
				return e
			}
		case c == '"' || c == 't' || c == 'f' || c == 'n' || c == '-' || isDigit(c):
			if e := p.count(false); e != nil {
				return e
			}
		}
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
		e := p.seq()
		p.close()
		return e
	case c == '{':
		p.i++
		e := p.object()
		p.close()
		return e
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

// str reads a string whose opening quote is consumed. Its bytes are
// read once: runs of plain ASCII eight at a time, other UTF-8 a sequence
// at a time.
func (p *serdeParser) str() *serdeErr {
	badUTF8 := false
	start, plain := p.i, true
	for {
		p.i = plainRun(p.b, p.i)
		if p.i == len(p.b) {
			return p.err("EOF while parsing a string")
		}
		c := p.b[p.i]
		if c != '"' {
			plain = false
		}
		if c >= utf8.RuneSelf {
			// Escapes are ASCII: the raw text is valid UTF-8 exactly
			// when the decoded text is. serde checks it at the end of
			// the string, so an error before that end wins.
			r, n := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && n == 1 {
				badUTF8 = true
			}
			p.i += n
			continue
		}
		switch c {
		case '"':
			if plain && p.i-start >= bulkMin && p.i-start > len(p.bulk) {
				p.bulk = p.b[start:p.i]
			}
			p.i++
			if badUTF8 {
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
	start := p.keys.len()
	var set map[string]struct{} // this object's keys, once there are many
	for first := true; ; first = false {
		p.ws()
		c, ok := p.peek()
		if !ok {
			return p.peekErr("EOF while parsing an object")
		}
		if c == '}' {
			p.i++
			p.keys.truncate(start)
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
		ks := p.i
		if e := p.str(); e != nil {
			return e
		}
		key := p.b[ks : p.i-1]
		p.ws()
		if c, ok = p.peek(); !ok {
			return p.peekErr("EOF while parsing an object")
		}
		if c != ':' {
			return p.peekErr("expected `:`")
		}
		if !p.scan {
			p.i++
			if e := p.value(); e != nil {
				return e
			}
			continue
		}
		if p.dupErr == nil {
			if k, dup := p.addKey(start, &set, key); dup {
				line, col := position(p.b, int64(ks+len(key)+1))
				p.dupErr = &DecodeError{fmt.Sprintf("duplicate JSON object key `%s` at line %d column %d", shortKey(k), line, col)}
			}
		}
		p.i++
		p.ws()
		vs := p.i
		if e := p.value(); e != nil {
			return e
		}
		if p.depth == 1 {
			p.member(key, p.b[vs:p.i])
		}
	}
}

// addKey records raw, a key of the object whose keys start at start in
// p.keys (or are in *set), and reports whether the object already had
// it, whose text is key.
func (p *serdeParser) addKey(start int, set *map[string]struct{}, raw []byte) (key []byte, dup bool) {
	key = unescapeKey(raw)
	if *set != nil {
		if _, dup := (*set)[string(key)]; dup {
			return key, true
		}
		(*set)[string(key)] = struct{}{}
		return key, false
	}
	for i := start; i < p.keys.len(); i++ {
		if bytes.Equal(p.keys.at(i), key) {
			return key, true
		}
	}
	p.keys.push(key)
	if p.keys.len()-start > 16 {
		// Many keys: a set keeps the check linear.
		*set = make(map[string]struct{}, 64)
		for i := start; i < p.keys.len(); i++ {
			(*set)[string(p.keys.at(i))] = struct{}{}
		}
		p.keys.truncate(start)
	}
	return key, false
}

// keyStack holds keys without allocating for the first few: a slice of
// its own array would make the parser escape to the heap.
type keyStack struct {
	arr  [32][]byte
	n    int
	more [][]byte // keys after the first len(arr)
}

func (k *keyStack) len() int { return k.n }

func (k *keyStack) at(i int) []byte {
	if i < len(k.arr) {
		return k.arr[i]
	}
	return k.more[i-len(k.arr)]
}

func (k *keyStack) push(key []byte) {
	if k.n < len(k.arr) {
		k.arr[k.n] = key
	} else {
		k.more = append(k.more, key)
	}
	k.n++
}

func (k *keyStack) truncate(n int) {
	if n < k.n {
		k.n = n
		if n >= len(k.arr) {
			k.more = k.more[:n-len(k.arr)]
		} else {
			k.more = k.more[:0]
		}
	}
}

// member keeps a member of the top-level object. Keys are matched on their
// raw bytes ("\u0069d" is not "id").
func (p *serdeParser) member(key, value []byte) {
	switch string(key) {
	case "id":
		p.id = value
	case "method":
		p.method = value
	case "params":
		p.params = value
	case "result":
		p.result = value
	case "error":
		p.errv = value
	}
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// stops is non-zero when one of the eight bytes in x ends a plain run: a
// byte below 0x20, or equal to '"' or '\\', sets its high bit in one of
// the terms (the classic has-zero / has-less tests, exact as to whether
// such a byte exists); a non-ASCII byte has it already.
func stops(x uint64) uint64 {
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	return (x | (x-ones*0x20)&^x | (q-ones)&^q | (bs-ones)&^bs) & highs
}

// plainRun returns the index of the first byte at or after i that ends a
// run of plain ASCII string bytes: a quote, a backslash, a control
// character or a byte of a multi-byte UTF-8 sequence. It tests 32 bytes at
// a time with one branch (a string's body is where the bulk of a large
// message lives, its base64 payload: 24 % less CPU than 8 bytes a branch
// on a 22 MB payload), then eight, then finds the byte one by one.
func plainRun(b []byte, i int) int {
	if len(b)-i >= vecRunMin {
		i = vecRun(b, i)
	}
	for ; i+32 <= len(b); i += 32 {
		s := b[i : i+32 : i+32]
		if stops(binary.LittleEndian.Uint64(s))|stops(binary.LittleEndian.Uint64(s[8:]))|
			stops(binary.LittleEndian.Uint64(s[16:]))|stops(binary.LittleEndian.Uint64(s[24:])) != 0 {
			break
		}
	}
	for ; i+8 <= len(b); i += 8 {
		if stops(binary.LittleEndian.Uint64(b[i:])) != 0 {
			break
		}
	}
	for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 && b[i] < utf8.RuneSelf {
		i++
	}
	return i
}

// vecRunMin is the length of string left below which plainRun does not try
// vecRun: short strings (keys, ids, paths) end within the word loops.
const vecRunMin = 256

// vecRun skips windows of printable ASCII with no quote or backslash, with
// vector instructions: bytes.IndexByte finds the next quote, then
// bytes.IndexByte and segmentio/asm's ascii.ValidPrint (AVX2 where the
// machine has it) check the bytes before it. A large message's bulk is one
// base64 string: BenchmarkDecodeWriteBlock (a 1 MiB fs/writeBlock request)
// went from 2.2 to 13.4 GB/s with it. Windows start at 64 bytes and double
// up to 64 KiB, and the first window that holds a stop (or a DEL, printable
// to JSON but not to ValidPrint) hands over to the word loops, so text
// full of escapes costs at most about twice its length here.
func vecRun(b []byte, i int) int {
	for w := 64; i < len(b); w = min(2*w, 64<<10) {
		seg := b[i:min(i+w, len(b))]
		q := bytes.IndexByte(seg, '"')
		if q >= 0 {
			seg = seg[:q]
		}
		if bytes.IndexByte(seg, '\\') >= 0 || !ascii.ValidPrint(seg) {
			return i
		}
		i += len(seg)
		if q >= 0 {
			return i
		}
	}
	return i
}

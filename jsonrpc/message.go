// Package jsonrpc implements the exec-server's JSON-RPC dialect (no "jsonrpc"
// member, string or int64 ids echoed with their JSON type, no batches) and a
// framing-agnostic, bidirectional connection: either end may call, notify
// and answer. It knows nothing about processes or files, and nothing about
// how messages are framed on the wire: a Stream moves whole messages, a
// Conn turns them into calls and replies. It imports nothing of the
// project it serves.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Limits bound what a single incoming message may contain.
type Limits struct {
	MaxDepth  int // nesting depth of arrays and objects (default 128)
	MaxValues int // JSON values in one message (default 262144)
}

// DefaultLimits are the reference's limits.
var DefaultLimits = Limits{MaxDepth: 128, MaxValues: 262144}

// Kind classifies a decoded message.
type Kind int

// Message kinds.
const (
	KindRequest Kind = iota
	KindNotification
	KindResponse // a response or an error response
)

// Message is one decoded message. Its raw slices alias the buffer it was
// decoded from.
type Message struct {
	Kind   Kind
	ID     json.RawMessage // canonical id bytes (a JSON string or integer); nil for notifications
	Method string
	Params json.RawMessage
	// A response's members: Result, or else Error (the raw error object).
	Result json.RawMessage
	Error  json.RawMessage
	// Bulk is the body (between its quotes, aliasing the message) of the
	// request's longest string of at least 64 KiB that holds no escape and
	// no byte outside ASCII, as Decode validated it; nil when there is
	// none. A later walk of the params (jsonscan.Spec.Known) can pass
	// over it without reading it: an fs/writeFile's base64 payload.
	Bulk []byte

	reusable bool // see Reusable
	// Set by Conn.handle for ReleaseNow: the message's bytes, the stream
	// that counts them, and whether they were released already.
	data     []byte
	rel      Releaser
	released bool
}

// Reusable declares that nothing keeps a reference into the message's
// bytes (its Params, its ID) once the work serving it has returned: the
// Handler for Inline, f for Concurrent (never Detached work, whose message
// is released when the Handler returns). A Stream that is a Recycler may
// then reuse the buffer for a later message instead of allocating (and
// clearing, and faulting in) a new one: fs/writeFile and fs/writeBlock
// decode their payload over their params and keep nothing of them. Call
// it from the Handler.
func (m *Message) Reusable() { m.reusable = true }

// NoID is the id used to answer a message whose own id is unusable.
var NoID = json.RawMessage("-1")

// DecodeError describes an incoming message that could not be used. The
// connection answers it with id -1 and code -32600 and stays open.
type DecodeError struct{ Detail string }

func (e *DecodeError) Error() string { return e.Detail }

// Decode parses one message in one pass over its bytes: syntax (serde's
// grammar and error texts), nesting depth and value count (checked as
// they are reached, so hostile input cannot make it spend unbounded time
// or memory), repeated keys and the top-level members. It returns
// sub-slices of data rather than copies.
func Decode(data []byte, lim Limits) (*Message, error) {
	if lim.MaxDepth == 0 {
		lim = DefaultLimits
	}
	p := serdeParser{b: data, scan: true, lim: lim}
	if e := p.document(); e != nil {
		if e.limit != nil {
			return nil, e.limit
		}
		// A syntax error. A limit exceeded further on is still reported
		// instead (as the reference's limits come first); only a refused
		// message pays for this second look.
		if limitErr, _ := prescan(data, lim); limitErr != nil {
			return nil, limitErr
		}
		return nil, &DecodeError{e.message(data)}
	}
	if p.dupErr != nil {
		return nil, p.dupErr
	}
	if p.top != '{' {
		return nil, &DecodeError{"expected a JSON-RPC object"}
	}
	var m Message
	id, method, params, result, errv := p.id, p.method, p.params, p.result, p.errv
	if method != nil {
		var name string
		if firstByte(method) != '"' || json.Unmarshal(method, &name) != nil {
			return nil, &DecodeError{fmt.Sprintf("invalid type: %s, expected a string", unexpected(method))}
		}
		m.Method = name
		m.Params = params
		m.Bulk = p.bulk
		if id == nil {
			m.Kind = KindNotification
			return &m, nil
		}
		cid, err := canonicalID(id)
		if err != nil {
			return nil, err
		}
		m.Kind = KindRequest
		m.ID = cid
		return &m, nil
	}
	// Not a request: a response if it has a result, else an error
	// response, checked in that order with the reference's texts
	// ({"id":9} and {} are "missing field `error`").
	if id != nil {
		cid, err := canonicalID(id)
		if err != nil {
			return nil, err
		}
		id = cid
	}
	switch {
	case result == nil && errv == nil:
		return nil, &DecodeError{"missing field `error`"}
	case id == nil:
		return nil, &DecodeError{"missing field `id`"}
	}
	m.Kind = KindResponse
	m.ID = id
	m.Result, m.Error = result, errv
	return &m, nil
}

// unexpected names a JSON value's type as serde's errors do.
func unexpected(v []byte) string {
	switch c := firstByte(v); c {
	case '"':
		return "string " + string(v)
	case 't', 'f':
		return "boolean `" + string(v) + "`"
	case 'n':
		return "null"
	case '[':
		return "sequence"
	case '{':
		return "map"
	}
	return "number"
}

func firstByte(v []byte) byte {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// canonicalID accepts a JSON string or an integer that fits in int64, and
// returns it as the reference echoes it: usually the same bytes, but "-0"
// is 0 and a string written with escapes is re-encoded ("\u0041" is "A").
func canonicalID(raw []byte) (json.RawMessage, error) {
	bad := &DecodeError{"data did not match any variant of untagged enum RequestId"}
	if len(raw) == 0 {
		return nil, bad
	}
	if raw[0] == '"' {
		if bytes.IndexByte(raw, '\\') < 0 {
			return raw, nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, bad
		}
		return appendSerdeString(nil, s), nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return nil, bad
	}
	if n == 0 {
		return json.RawMessage("0"), nil
	}
	return raw, nil
}

// appendSerdeString encodes s as serde_json does: only '"', '\\' and
// control characters are escaped (\b \f \n \r \t, else \u00xx).
func appendSerdeString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

func position(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	line = 1 + bytes.Count(data[:off], []byte{'\n'})
	col = int(off) - bytes.LastIndexByte(data[:off], '\n') - 1
	return line, col
}

// prescan bounds nesting depth and value count in one pass over the bytes,
// and finds duplicate object keys, loosely as to syntax. Decode's own
// pass does all of this for a message it accepts; prescan serves only to
// find a limit exceeded after a syntax error, which takes precedence.
func prescan(data []byte, lim Limits) (limitErr, dupErr error) {
	depth, values := 0, 0
	// The keys of every open object, innermost last; small messages need
	// no allocation.
	var frameBuf [16]keyFrame
	var keyBuf [32][]byte
	frames, keys := frameBuf[:0], keyBuf[:0]
	strStart, strEnd := -1, -1 // the last string: its quotes' indexes
	for i := 0; i < len(data); i++ {
		// Values are counted, and a limit error placed, where they start,
		// as the reference does; an object's keys are not values.
		start := i
		switch data[i] {
		case '"':
			values++
			strStart = i
			// Skip the string quickly: strings are where the bulk of a big
			// message lives (base64 payloads).
			if end := closingQuote(data, i+1); end < 0 {
				i = len(data)
			} else {
				i = end
			}
			strEnd = i
			if j := skipWS(data, i+1); j < len(data) && data[j] == ':' {
				values-- // a key
			}
		case '{', '[':
			depth++
			values++
			if depth > lim.MaxDepth {
				line, col := position(data, int64(i))
				return &DecodeError{fmt.Sprintf("recursion limit exceeded at line %d column %d", line, col)}, nil
			}
			frames = append(frames, keyFrame{start: len(keys), object: data[i] == '{'})
		case '}', ']':
			depth--
			if n := len(frames); n > 0 {
				keys = keys[:frames[n-1].start]
				frames = frames[:n-1]
			}
		case ':':
			if n := len(frames); dupErr == nil && n > 0 && frames[n-1].object && strStart >= 0 && strEnd > strStart {
				var key []byte
				var dup bool
				if keys, key, dup = frames[n-1].add(keys, data[strStart+1:min(strEnd, len(data))]); dup {
					line, col := position(data, int64(min(strEnd+1, len(data))))
					dupErr = &DecodeError{fmt.Sprintf("duplicate JSON object key `%s` at line %d column %d", shortKey(key), line, col)}
				}
			}
		case 't', 'f', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			values++
			for i+1 < len(data) && isScalarByte(data[i+1]) {
				i++
			}
		}
		if values > lim.MaxValues {
			line, col := position(data, int64(start))
			return &DecodeError{fmt.Sprintf("JSON-RPC message exceeds the limit of %d JSON values at line %d column %d", lim.MaxValues, line, col)}, nil
		}
	}
	return nil, dupErr
}

// shortKey keeps an error message short whatever the key's length.
func shortKey(key []byte) string {
	const maxKey = 64
	if len(key) <= maxKey {
		return string(key)
	}
	cut := maxKey
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return string(key[:cut]) + "…"
}

// keyFrame is one open array or object during prescan.
type keyFrame struct {
	start  int                 // the object's keys are keys[start:] while it is innermost
	set    map[string]struct{} // the keys, once there are many of them
	object bool
}

// add records key (raw, as between its quotes) in keys, the keys of every
// open object, and returns them; dup reports that the object already had
// the key, whose text is key.
func (f *keyFrame) add(keys [][]byte, raw []byte) (_ [][]byte, key []byte, dup bool) {
	key = unescapeKey(raw)
	if f.set != nil {
		if _, dup := f.set[string(key)]; dup {
			return keys, key, true
		}
		f.set[string(key)] = struct{}{}
		return keys, nil, false
	}
	for _, k := range keys[f.start:] {
		if bytes.Equal(k, key) {
			return keys, key, true
		}
	}
	keys = append(keys, key)
	if len(keys)-f.start > 16 {
		// Many keys: a set keeps the check linear.
		f.set = make(map[string]struct{}, 64)
		for _, k := range keys[f.start:] {
			f.set[string(k)] = struct{}{}
		}
		keys = keys[:f.start]
	}
	return keys, nil, false
}

// unescapeKey returns a key's text from its raw bytes between quotes:
// "p\u0061rams" is "params".
func unescapeKey(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	var s string
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	if json.Unmarshal(quoted, &s) != nil {
		return raw
	}
	return []byte(s)
}

func isScalarByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '-' || c == '+'
}

func skipWS(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// closingQuote returns the index of the quote that ends the JSON string
// whose body starts at b[i] (just past its opening quote), or -1. It jumps
// from quote to quote with bytes.IndexByte (vectorised, unlike IndexAny)
// and counts the backslashes just before each: an odd run escapes it.
func closingQuote(b []byte, i int) int {
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

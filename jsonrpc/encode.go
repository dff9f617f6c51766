package jsonrpc

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Appender is implemented by results that can write their own JSON
// encoding straight into an outgoing frame, skipping reflection and an
// intermediate copy (large base64 payloads use it).
type Appender interface {
	AppendJSON(dst []byte) []byte
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// GetBuffer returns an empty buffer from the frame pool.
func GetBuffer() []byte { return (*bufPool.Get().(*[]byte))[:0] }

// PutBuffer returns a frame buffer to the pool. Very large buffers are left
// to the garbage collector so the pool cannot pin memory.
func PutBuffer(b []byte) {
	if cap(b) > 256<<10 {
		return
	}
	b = b[:0]
	bufPool.Put(&b)
}

// AppendResponse appends {"id":ID,"result":RESULT}.
func AppendResponse(dst []byte, id json.RawMessage, result any) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	dst, err := AppendValue(dst, result)
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// AppendError appends {"error":{"code":C,"message":M},"id":ID}, with
// "data" between "code" and "message" when e has any: the reference's
// order ({"code":…,"data":{"kind":…},"message":…}, its keys sorted).
func AppendError(dst []byte, id json.RawMessage, e *Error) []byte {
	dst = append(dst, `{"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(e.Code), 10)
	if len(e.Data) > 0 {
		dst = append(dst, `,"data":`...)
		dst = append(dst, e.Data...)
	}
	dst = append(dst, `,"message":`...)
	dst = AppendString(dst, e.Message)
	dst = append(dst, `},"id":`...)
	dst = append(dst, id...)
	return append(dst, '}')
}

// AppendNotification appends {"method":M,"params":P}.
func AppendNotification(dst []byte, method string, params any) ([]byte, error) {
	dst = append(dst, `{"method":`...)
	dst = AppendString(dst, method)
	dst = append(dst, `,"params":`...)
	dst, err := AppendValue(dst, params)
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// AppendRequest appends {"id":ID,"method":M,"params":P} (used by clients).
func AppendRequest(dst []byte, id json.RawMessage, method string, params any) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"method":`...)
	dst = AppendString(dst, method)
	if params != nil {
		dst = append(dst, `,"params":`...)
		var err error
		if dst, err = AppendValue(dst, params); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// AppendValue appends the JSON encoding of v, using Appender when v has it.
func AppendValue(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case Appender:
		return x.AppendJSON(dst), nil
	case json.RawMessage:
		return append(dst, x...), nil
	case nil:
		return append(dst, "null"...), nil
	}
	buf := bytes.NewBuffer(dst)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return dst, err
	}
	out := buf.Bytes()
	return out[:len(out)-1], nil // Encode adds a newline
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// Base64 is a byte payload that travels as standard, padded base64. It
// decodes as strictly as the reference (Rust's base64 crate, STANDARD
// engine: canonical padding, no stray bits, no line breaks), and its errors
// carry the reference's texts ("Invalid symbol 33, offset 0."). encoding/json
// alone would accept "YWJj\n" and "YR==". It encodes as encoding/json
// encodes []byte.
type Base64 []byte

// UnmarshalJSON decodes a JSON string of base64.
func (b *Base64) UnmarshalJSON(data []byte) error {
	if len(data) == 0 || data[0] != '"' {
		return InvalidParams("invalid type: %s, expected a string", jsonKind(firstByte(data)))
	}
	text := data[1 : len(data)-1]
	if bytes.IndexByte(text, '\\') >= 0 {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return InvalidParams("%s", describeJSONError(err))
		}
		text = []byte(s)
	}
	out, err := DecodeBase64(text)
	if err != nil {
		return err
	}
	*b = out
	return nil
}

func firstByte(b []byte) byte {
	if len(b) == 0 {
		return 'n'
	}
	return b[0]
}

var strictStd = base64.StdEncoding.Strict()

// DecodeBase64 decodes standard, padded base64 as the reference does; an
// error is -32602 with the reference's text. It is the one strict decoder:
// process/write chunks (Base64) and the fs methods' payloads all go through
// it. Large inputs are decoded in parallel chunks (base64fast.go).
func DecodeBase64(src []byte) ([]byte, error) {
	// DecodedLen may exceed the result by the padding (two bytes at most).
	dst := make([]byte, strictStd.DecodedLen(len(src)))
	n, ok := decodeChunks(dst, src)
	// Go's decoder skips CR and LF even in strict mode; the reference
	// refuses them.
	if ok && bytes.IndexByte(src, '\n') < 0 && bytes.IndexByte(src, '\r') < 0 {
		return dst[:n], nil
	}
	if msg := Base64ErrorText(src); msg != "" {
		return nil, InvalidParams("%s", msg)
	}
	return nil, InvalidParams("invalid base64")
}

// b64value maps a byte to its 6-bit value, or 0xff outside the standard
// alphabet ('=' included).
var b64value = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range len(alphabet) {
		t[alphabet[i]] = byte(i)
	}
	return t
}()

// Base64ErrorText returns the error the reference's decoder (Rust base64
// 0.22, STANDARD) reports first for src, or "" when src is valid. Its order:
// an invalid last byte when the length is 1 mod 4; then every quad but the
// last, where '=' is an invalid symbol like any other; then the last quad:
// padding too early or followed by data, too few symbols ("Invalid input
// length: N"), non-canonical padding, and bits left over in the last symbol.
func Base64ErrorText(src []byte) string {
	n := len(src)
	symbol := func(off int) string { return fmt.Sprintf("Invalid symbol %d, offset %d.", src[off], off) }
	rem := n % 4
	if rem == 1 && src[n-1] != '=' && b64value[src[n-1]] == 0xff {
		return symbol(n - 1)
	}
	body := n - rem // every quad but the last one, which may be padded
	if rem == 0 {
		body = max(n-4, 0)
	}
	for i := range body {
		if b64value[src[i]] == 0xff {
			return symbol(i)
		}
	}
	var vals []byte
	pads, firstPad := 0, 0
	for i := body; i < n; i++ {
		c := src[i]
		if c == '=' {
			if (i-body)%4 < 2 {
				if pads > 0 {
					return symbol(firstPad)
				}
				return symbol(i)
			}
			if pads == 0 {
				firstPad = i
			}
			pads++
			continue
		}
		if pads > 0 {
			return symbol(firstPad)
		}
		if b64value[c] == 0xff {
			return symbol(i)
		}
		vals = append(vals, b64value[c])
	}
	if len(vals) == 1 {
		return fmt.Sprintf("Invalid input length: %d", n)
	}
	if (pads+len(vals))%4 != 0 {
		return "Invalid padding"
	}
	var spare byte // bits of the last symbol beyond the decoded bytes
	switch len(vals) {
	case 2:
		spare = vals[1] & 0x0f
	case 3:
		spare = vals[2] & 0x03
	}
	if spare != 0 {
		last := body + len(vals) - 1
		return fmt.Sprintf("Invalid last symbol %d, offset %d.", src[last], last)
	}
	return ""
}

// Package b64codec is the project's base64 codec: a strict decoder that refuses
// what the reference (Rust's base64 crate, STANDARD engine) refuses, with its
// error texts, and an encoder about twice as fast as encoding/base64's.
package b64codec

import (
	"bytes"
	"encoding/base64"
	"fmt"
)

var strictStd = base64.StdEncoding.Strict()

// Error is a decoding error; its text is the reference's ("Invalid symbol
// 33, offset 0."). Callers send it as -32602 (or -32600 for fs/writeFile).
type Error string

func (e Error) Error() string { return string(e) }

// Decode decodes standard, padded base64 as the reference does. It is the
// one strict decoder: process/write chunks (protocol.Base64) and the fs
// methods' payloads all go through it. Large inputs are decoded in parallel
// chunks (fast.go).
func Decode(src []byte) ([]byte, error) {
	// DecodedLen may exceed the result by the padding (two bytes at most).
	dst := make([]byte, strictStd.DecodedLen(len(src)))
	n, ok := decodeChunks(dst, src)
	// Go's decoder skips CR and LF even in strict mode; the reference
	// refuses them.
	if ok && bytes.IndexByte(src, '\n') < 0 && bytes.IndexByte(src, '\r') < 0 {
		return dst[:n], nil
	}
	if msg := errorText(src); msg != "" {
		return nil, Error(msg)
	}
	return nil, Error("invalid base64")
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

// errorText returns the error the reference's decoder (Rust base64
// 0.22, STANDARD) reports first for src, or "" when src is valid. Its order:
// an invalid last byte when the length is 1 mod 4; then every quad but the
// last, where '=' is an invalid symbol like any other; then the last quad:
// padding too early or followed by data, too few symbols ("Invalid input
// length: N"), non-canonical padding, and bits left over in the last symbol.
func errorText(src []byte) string {
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

package fsys

import (
	"bytes"
	"encoding/base64"
	"fmt"
)

// strictStd is standard, padded base64 that also refuses non-zero trailing
// bits, as the reference's decoder (Rust's base64 STANDARD engine) does.
var strictStd = base64.StdEncoding.Strict()

// decodeBase64 decodes padded standard base64 into a buffer of exactly the
// decoded size. Errors carry the reference's texts ("Invalid padding",
// "Invalid symbol 33, offset 0.", ...).
func decodeBase64(src []byte) ([]byte, error) {
	// DecodedLen may exceed the result by the padding (two bytes at most).
	dst := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
	n, err := strictStd.Decode(dst, src)
	// Go's decoder skips CR and LF; the reference refuses them.
	if err == nil && bytes.IndexByte(src, '\n') < 0 && bytes.IndexByte(src, '\r') < 0 {
		return dst[:n], nil
	}
	if msg := base64Error(src); msg != "" {
		return nil, fmt.Errorf("%s", msg)
	}
	return nil, err
}

// b64val maps a byte to its 6-bit value, or 0xff when it is not in the
// standard alphabet ('=' included: padding is handled separately).
var b64val = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = byte(i)
	}
	return t
}()

// base64Error reproduces the first error Rust's base64 crate (0.22,
// STANDARD, canonical padding required) reports for s, or "" when s is
// valid. The order of checks follows that decoder: a trailing invalid byte
// first, then the complete quads, then the final (possibly padded) quad.
func base64Error(s []byte) string {
	n := len(s)
	rem := n % 4
	invalid := func(off int, b byte) string { return fmt.Sprintf("Invalid symbol %d, offset %d.", b, off) }
	if rem == 1 {
		if last := s[n-1]; last != '=' && b64val[last] == 0xff {
			return invalid(n-1, last)
		}
	}
	body := n - rem
	if rem == 0 {
		body = max(n-4, 0)
	}
	for i := 0; i < body; i++ {
		if b64val[s[i]] == 0xff {
			return invalid(i, s[i])
		}
	}
	morsels, pad, firstPad := 0, 0, 0
	var last byte
	var vals [4]byte
	for i := body; i < n; i++ {
		b, li := s[i], i-body
		if b == '=' {
			if li < 2 {
				return invalid(i, b)
			}
			if pad == 0 {
				firstPad = li
			}
			pad++
			continue
		}
		if pad > 0 {
			return invalid(body+firstPad, '=')
		}
		last = b
		if b64val[b] == 0xff {
			return invalid(i, b)
		}
		vals[morsels] = b64val[b]
		morsels++
	}
	if n > 0 && morsels < 2 {
		return fmt.Sprintf("Invalid input length: %d", body+morsels)
	}
	if (pad+morsels)%4 != 0 {
		return "Invalid padding"
	}
	var lastBits byte
	switch morsels {
	case 2:
		lastBits = vals[1] & 0x0f
	case 3:
		lastBits = vals[2] & 0x03
	}
	if lastBits != 0 {
		return fmt.Sprintf("Invalid last symbol %d, offset %d.", last, body+morsels-1)
	}
	return ""
}

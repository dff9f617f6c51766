package fsys

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// strictStd is standard, padded base64 that also refuses non-zero trailing
// bits, as the reference's decoder (Rust's base64 STANDARD engine) does.
var strictStd = base64.StdEncoding.Strict()

// decodeBase64 decodes padded standard base64 into a buffer of the decoded
// size. Errors carry the reference's texts ("Invalid padding", "Invalid
// symbol 33, offset 0.", ...). Large inputs are decoded in parallel chunks.
func decodeBase64(src []byte) ([]byte, error) {
	// DecodedLen may exceed the result by the padding (two bytes at most).
	dst := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
	n, ok := decodeChunks(dst, src)
	// Go's decoder skips CR and LF; the reference refuses them.
	if ok && bytes.IndexByte(src, '\n') < 0 && bytes.IndexByte(src, '\r') < 0 {
		return dst[:n], nil
	}
	if msg := base64Error(src); msg != "" {
		return nil, errors.New(msg)
	}
	if _, err := strictStd.Decode(dst, src); err != nil {
		return nil, err
	}
	return nil, errors.New("invalid base64")
}

// decChunk is the share of one goroutine when decoding in parallel; a
// multiple of 4, so every chunk but the last is whole quanta. A variable so
// tests can use many small chunks.
var decChunk = 8 << 20

// decodeChunks decodes src into dst, in parallel for big inputs. ok is
// false when any chunk is invalid; a chunk other than the last must decode
// to exactly three bytes per four (padding in the middle is an error even
// though that chunk alone would be valid).
func decodeChunks(dst, src []byte) (n int, ok bool) {
	workers := min(runtime.GOMAXPROCS(0), 4)
	if workers == 1 || len(src) < 2*decChunk {
		return decodeFast(dst, src)
	}
	var wg sync.WaitGroup
	var bad atomic.Bool
	sem := make(chan struct{}, workers)
	last := (len(src) - 1) / decChunk * decChunk
	for off := 0; off < last; off += decChunk {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if bad.Load() {
				return
			}
			// The slice ends at the chunk's share: both decoders write 8
			// bytes at a time where they have room, which would clobber
			// the start of the next chunk's output.
			d := off / 4 * 3
			m, ok := decodeFast(dst[d:d+decChunk/4*3:d+decChunk/4*3], src[off:off+decChunk])
			if !ok || m != decChunk/4*3 {
				bad.Store(true)
			}
		})
	}
	m, ok := decodeFast(dst[last/4*3:], src[last:])
	wg.Wait()
	if !ok || bad.Load() {
		return 0, false
	}
	return last/4*3 + m, true
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

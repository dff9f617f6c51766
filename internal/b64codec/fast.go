package b64codec

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
)

// The fast path of Decode: fs/writeFile carries up to tens of
// megabytes of base64, and encoding/base64 decodes a byte at a time. Validity
// is still decided by encoding/base64's strict decoder (plus the CR/LF check
// in Decode); these only go faster on plain alphabet.

// dec12 maps two base64 characters (first in the high byte) to their 12
// bits, or to 0xffff when either is not in the standard alphabet. Built on
// first use: the client SDK imports this package and rarely decodes.
var dec12 = sync.OnceValue(func() *[1 << 16]uint16 {
	var t [1 << 16]uint16
	for i := range t {
		a, b := b64value[i>>8], b64value[i&0xff]
		if a == 0xff || b == 0xff {
			t[i] = 0xffff
			continue
		}
		t[i] = uint16(a)<<6 | uint16(b)
	}
	return &t
})

// decodeFast decodes strict, padded standard base64 like strictStd.Decode,
// eight characters at a time through dec12 while they are all plain
// alphabet, leaving the last quantum (padding) and anything unusual to
// encoding/base64. ok is false for invalid input (the caller words the
// error).
func decodeFast(dst, src []byte) (n int, ok bool) {
	if vector {
		n, err := vecStd.Decode(dst, src)
		return n, err == nil
	}
	si, di := 0, 0
	if len(src) >= 12 {
		t := dec12()
		for ; si+12 <= len(src) && di+8 <= len(dst); si, di = si+8, di+6 {
			v := binary.BigEndian.Uint64(src[si : si+8])
			a, b, c, d := t[v>>48], t[v>>32&0xffff], t[v>>16&0xffff], t[v&0xffff]
			if (a|b|c|d)&0xf000 != 0 {
				break
			}
			binary.BigEndian.PutUint64(dst[di:di+8], uint64(a)<<52|uint64(b)<<40|uint64(c)<<28|uint64(d)<<16)
		}
	}
	m, err := strictStd.Decode(dst[di:], src[si:])
	return di + m, err == nil
}

// decChunk is the share of one goroutine when decoding in parallel; a
// multiple of 4, so every chunk but the last is whole quanta. A variable so
// tests can use many small chunks.
var decChunk = 8 << 20

// decodeChunks decodes src into dst, in parallel for big inputs (at most 4
// goroutines, all ended before it returns). ok is false when any chunk is
// invalid; a chunk other than the last must decode to exactly three bytes
// per four (padding in the middle is an error even though that chunk alone
// would be valid).
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

// DecodeInPlace decodes src as Decode does, into src itself, and returns
// the decoded bytes (a prefix of src). It saves the allocation (and its
// clearing) of a buffer as large as the payload: fs/writeFile and
// fs/writeBlock decode into the request's own message buffer, which nothing
// reads afterwards. On error src's contents are undefined (the error text
// is the same as Decode's).
//
// It decodes one goroutine's way from the front: every eight characters
// become six bytes written at or before where the characters were read, so
// no character is overwritten before it is read (the 8-byte store ends two
// bytes past the six, still behind the next load).
func DecodeInPlace(src []byte) ([]byte, error) {
	if vector {
		out, si, ok := decodeInPlaceVector(src)
		if ok {
			return out, nil
		}
		return nil, inPlaceError(src, si)
	}
	si, di := 0, 0
	if len(src) >= 12 {
		t := dec12()
		for ; si+12 <= len(src); si, di = si+8, di+6 {
			v := binary.BigEndian.Uint64(src[si : si+8])
			a, b, c, d := t[v>>48], t[v>>32&0xffff], t[v>>16&0xffff], t[v&0xffff]
			if (a|b|c|d)&0xf000 != 0 {
				break
			}
			binary.BigEndian.PutUint64(src[di:di+8], uint64(a)<<52|uint64(b)<<40|uint64(c)<<28|uint64(d)<<16)
		}
	}
	tail := src[si:]
	// The loop stops early only at a character outside the alphabet, which
	// valid input has only in its last quantum (padding): a longer tail is
	// an error. CR and LF, which encoding/base64 would skip, are refused as
	// Decode refuses them.
	if len(tail) < 12 && bytes.IndexByte(tail, '\n') < 0 && bytes.IndexByte(tail, '\r') < 0 {
		var tmp [12]byte
		if m, err := strictStd.Decode(tmp[:], tail); err == nil {
			return src[:di+copy(src[di:], tmp[:m])], nil
		}
	}
	return nil, inPlaceError(src, si)
}

// inPlaceError words the error of a failed in-place decoding whose first
// si characters were all plain alphabet (now overwritten), which the error
// text never names (it reports the first bad symbol, or the padding of the
// last quantum): it puts such characters back and words it as Decode.
func inPlaceError(src []byte, si int) error {
	for i := range si {
		src[i] = 'A'
	}
	if msg := errorText(src); msg != "" {
		return Error(msg)
	}
	return Error("invalid base64")
}

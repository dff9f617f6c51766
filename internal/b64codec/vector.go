package b64codec

import (
	"sync"

	asmb64 "github.com/segmentio/asm/base64"
)

// The vector decoder: segmentio/asm's base64 decodes whole blocks of
// alphabet with AVX2 and leaves the rest (padding, anything else) to
// encoding/base64's strict decoder, so it accepts exactly what strictStd
// accepts. On this project's 2-core AMD EPYC it decodes 16 MiB at ~6 GB/s
// against ~1.3 GB/s for decodeFast's tables (BenchmarkDecodeInPlace);
// where it has no vector path (no AVX2, other architectures, the purego
// tag) it is encoding/base64 alone, slower than the tables, so vector
// (vector_amd64.go) says when to use it.
var vecStd = asmb64.StdEncoding.Strict()

// vecChunk is how many characters DecodeInPlace decodes at a time into a
// scratch buffer (a multiple of 4): small enough that the scratch stays in
// cache for the copy back, and that a failed chunk's text is intact for the
// error's wording. A variable so tests can make many chunks.
var vecChunk = 64 << 10

var vecScratch = sync.Pool{New: func() any { b := make([]byte, vecChunk/4*3); return &b }}

// vecDecodeOK reports whether vecStd's n bytes from src are the whole of a
// valid decoding: encoding/base64 skips CR and LF, which the reference
// refuses, and a skipped one leaves fewer bytes than the text's length
// says (padded text of length L with p trailing '=' decodes to L/4*3-p).
func vecDecodeOK(src []byte, n int, err error) bool {
	if err != nil || len(src)%4 != 0 {
		return false
	}
	pads := 0
	for i := len(src) - 1; i >= 0 && pads < 2 && src[i] == '='; i-- {
		pads++
	}
	return n == len(src)/4*3-pads
}

// decodeInPlaceVector is DecodeInPlace with the vector decoder: a chunk at
// a time into a cached scratch buffer, copied back over the characters
// already read (output is three bytes per four characters, so it never
// reaches text not yet decoded). ok is false for invalid input, with
// src[:si] holding decoded bytes and src[si:] the text as it came.
func decodeInPlaceVector(src []byte) (out []byte, si int, ok bool) {
	sp := vecScratch.Get().(*[]byte)
	defer vecScratch.Put(sp)
	scratch := *sp
	if len(scratch) < vecChunk/4*3 {
		scratch = make([]byte, vecChunk/4*3)
		*sp = scratch
	}
	di := 0
	// Every chunk but the last is whole quanta without padding.
	for len(src)-si > vecChunk {
		var n int
		var err error
		if si-di >= vecChunk/4*3+vecSlack {
			// Output far enough behind (from the fourth chunk on): the
			// chunk decodes straight into place, into a destination that
			// ends where its text begins, so the text is intact if it
			// fails. This spares the copy back (memmove was 6 % of a
			// 16 MiB fs/writeFile's CPU).
			n, err = vecStd.Decode(src[di:si:si], src[si:si+vecChunk])
		} else {
			n, err = vecStd.Decode(scratch, src[si:si+vecChunk])
			// Copied back only when the whole chunk decoded: line breaks
			// decode with no error and a short n, and the copy would
			// overwrite the text the error is worded from.
			if err == nil && n == vecChunk/4*3 {
				copy(src[di:], scratch[:n])
			}
		}
		if err != nil || n != vecChunk/4*3 {
			return nil, si, false
		}
		di += n
		si += vecChunk
	}
	tail := src[si:]
	if si-di >= len(tail)/4*3+vecSlack {
		n, err := vecStd.Decode(src[di:si:si], tail)
		if !vecDecodeOK(tail, n, err) {
			return nil, si, false
		}
		return src[:di+n], len(src), true
	}
	n, err := vecStd.Decode(scratch, tail)
	if !vecDecodeOK(tail, n, err) {
		return nil, si, false
	}
	di += copy(src[di:], scratch[:n])
	return src[:di], len(src), true
}

// vecSlack is room left beyond a direct decoding's output for a vector
// store that writes past the last decoded byte.
const vecSlack = 64

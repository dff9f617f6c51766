package b64codec

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"testing"
)

// decodeBoth decodes in with the vector decoder and with the tables, in
// place and not, and fails unless all four agree (bytes, or error text).
func decodeBoth(t *testing.T, in []byte) {
	t.Helper()
	type result struct {
		out []byte
		err string
	}
	run := func(vec bool, inPlace bool) result {
		old := vector
		vector = vec
		defer func() { vector = old }()
		var out []byte
		var err error
		if inPlace {
			out, err = DecodeInPlace(append([]byte(nil), in...))
		} else {
			out, err = Decode(in)
		}
		if err != nil {
			return result{err: err.Error()}
		}
		return result{out: append([]byte{}, out...)}
	}
	want := run(false, false)
	for _, c := range []struct{ vec, inPlace bool }{{false, true}, {true, false}, {true, true}} {
		if got := run(c.vec, c.inPlace); got.err != want.err || !bytes.Equal(got.out, want.out) {
			t.Fatalf("len %d, vector %v, in place %v: %q %x; tables: %q %x", len(in), c.vec, c.inPlace, got.err, got.out, want.err, want.out)
		}
	}
}

// The vector decoder in place goes a chunk at a time: a bad symbol, a line
// break or padding at or near a chunk's edge is worded as by the tables,
// and valid text of every length around the edges decodes alike.
func TestVectorDecodeAgrees(t *testing.T) {
	if !vector {
		t.Log("no vector decoder on this machine: checks encoding/base64's fallback")
	}
	old := vecChunk
	vecChunk = 256
	t.Cleanup(func() { vecChunk = old })
	r := rand.New(rand.NewPCG(7, 8))
	// Up to 8 chunks of text: from the fourth chunk on, DecodeInPlace
	// decodes straight into place (vecSlack), the chunks before it through
	// the scratch buffer.
	data := make([]byte, 6*vecChunk)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for n := 0; n < len(data); n += 1 + n/7 {
		text := []byte(base64.StdEncoding.EncodeToString(data[:n]))
		decodeBoth(t, text)
		for _, at := range []int{vecChunk - 1, vecChunk, vecChunk + 1, 2*vecChunk - 2, 4*vecChunk - 1, 4 * vecChunk, 5*vecChunk + 3, 7*vecChunk - 1, len(text) - 1, len(text) / 2} {
			if at < 0 || at >= len(text) {
				continue
			}
			for _, c := range []byte{'!', '\n', '\r', '=', '-', 0x80} {
				bad := append([]byte(nil), text...)
				bad[at] = c
				decodeBoth(t, bad)
			}
		}
		// Text cut short or run on by a byte.
		if len(text) > 0 {
			decodeBoth(t, text[:len(text)-1])
		}
		decodeBoth(t, append(text, 'A'))
	}
	// Four line breaks put into one of the first chunks: that chunk
	// decodes without an error but short, and its text must be intact
	// for the error's wording.
	text := base64.StdEncoding.EncodeToString(data[:5*vecChunk])
	for chunk := range 4 {
		at := chunk*vecChunk + 10
		decodeBoth(t, []byte(text[:at]+"\n\n\n\n"+text[at:]))
	}
}

// FuzzVectorDecode: the vector decoder and the tables agree on anything,
// with chunks small enough for short inputs to cross them.
func FuzzVectorDecode(f *testing.F) {
	for _, s := range []string{"", "YQ==", "YWJjZGVmZ2hpamtsbW5vcA==", "YWJj\nZGVmZ2hpamts", "000\n0\n\n0000000000000000000000000000000000000000000000000000000\n00",
		"QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3ODkrLw=="} {
		f.Add([]byte(s))
	}
	old := vecChunk
	vecChunk = 64
	f.Cleanup(func() { vecChunk = old })
	f.Fuzz(func(t *testing.T, in []byte) { decodeBoth(t, in) })
}

func BenchmarkDecodeInPlace(b *testing.B) {
	data := make([]byte, 16<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	text := []byte(base64.StdEncoding.EncodeToString(data))
	buf := make([]byte, len(text))
	for _, vec := range []bool{false, true} {
		name := "tables"
		if vec {
			name = "vector"
		}
		b.Run(name, func(b *testing.B) {
			old := vector
			vector = vec && old
			defer func() { vector = old }()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				copy(buf, text)
				if _, err := DecodeInPlace(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

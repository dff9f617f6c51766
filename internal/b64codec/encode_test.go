package b64codec

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"testing"
)

// Every length around the 24-byte groups and the 2-byte slack, with
// random bytes and with every byte value, appended to a non-empty dst.
func TestAppendEncodeMatchesEncodingBase64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	all := make([]byte, 4096)
	for i := range all {
		all[i] = byte(i)
	}
	for n := range 400 {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		for _, s := range [][]byte{src, all[:n], all[len(all)-n:]} {
			want := base64.StdEncoding.AppendEncode([]byte("prefix:"), s)
			if got := AppendEncode([]byte("prefix:"), s); !bytes.Equal(got, want) {
				t.Fatalf("%d bytes %x:\n got %s\nwant %s", n, s, got, want)
			}
		}
	}
	// Every 12-bit pair value, through a long input.
	big := make([]byte, 3*4096)
	for i := range 4096 {
		v := uint32(i)<<12 | uint32(4095-i)
		big[3*i], big[3*i+1], big[3*i+2] = byte(v>>16), byte(v>>8), byte(v)
	}
	if got, want := AppendEncode(nil, big), base64.StdEncoding.AppendEncode(nil, big); !bytes.Equal(got, want) {
		t.Fatal("every 12-bit value: output differs from encoding/base64")
	}
}

func FuzzAppendEncode(f *testing.F) {
	f.Add([]byte("hello, world: a string longer than 26 bytes"))
	f.Fuzz(func(t *testing.T, src []byte) {
		if got, want := AppendEncode(nil, src), base64.StdEncoding.AppendEncode(nil, src); !bytes.Equal(got, want) {
			t.Fatalf("%x: got %s, want %s", src, got, want)
		}
	})
}

// BenchmarkAppendEncode against encoding/base64 for one 64 KiB output
// chunk.
func BenchmarkAppendEncode(b *testing.B) {
	src := make([]byte, 64<<10)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := make([]byte, 0, base64.StdEncoding.EncodedLen(len(src)))
	b.Run("jsonrpc", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			dst = AppendEncode(dst[:0], src)
		}
	})
	b.Run("encoding", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			dst = base64.StdEncoding.AppendEncode(dst[:0], src)
		}
	})
}

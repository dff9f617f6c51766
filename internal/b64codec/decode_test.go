package b64codec

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// Texts observed on the reference for process/write chunks.
var referenceBase64Errors = []struct{ in, msg string }{
	{"!!!!", "Invalid symbol 33, offset 0."},
	{"YQ=", "Invalid padding"},
	{"YQ", "Invalid padding"},
	{"YR==", "Invalid last symbol 82, offset 1."},
	{"Y", "Invalid input length: 1"},
	{"YQ==YQ==", "Invalid symbol 61, offset 2."},
	{"YWJj\n", "Invalid symbol 10, offset 4."},
	{"YW Jj", "Invalid symbol 32, offset 2."},
	{"=", "Invalid symbol 61, offset 0."},
	{"====", "Invalid symbol 61, offset 0."},
	{"YQ===", "Invalid symbol 61, offset 2."},
	{"aGk=\u00e9", "Invalid symbol 61, offset 3."},
	{"YWJjZ", "Invalid input length: 5"},
	{"YWJjZGVmZ", "Invalid input length: 9"},
	{"Y===", "Invalid symbol 61, offset 1."},
	{"YWJjZ=", "Invalid symbol 61, offset 5."},
	{"YWJj=", "Invalid symbol 61, offset 4."},
	{"=YWJ", "Invalid symbol 61, offset 0."},
	{"YW=j", "Invalid symbol 61, offset 2."},
	{"YWJjYQ", "Invalid padding"},
	{"YWJjYR==", "Invalid last symbol 82, offset 5."},
	{"YWJjYWJjYQ=", "Invalid padding"},
	{"YWJjYWJj\n", "Invalid symbol 10, offset 8."},
	{"YW\nJj", "Invalid symbol 10, offset 2."},
	{"YWJjYWJjYWJjYWJjYWJjYWJjYWJjYWJjYWJj!WJj", "Invalid symbol 33, offset 36."},
	{"YWJjYWJjYWJjYWJjYWJjYWJjYWJjYWJjYWJjYWJ=", "Invalid last symbol 74, offset 38."},
	{"Zm9vYmE", "Invalid padding"},
	{"Zm9vYmF=", "Invalid last symbol 70, offset 6."},
	{"Y\n", "Invalid symbol 10, offset 1."},
	{"YQ==\n", "Invalid symbol 10, offset 4."},
	{"YWJjZ\n", "Invalid symbol 10, offset 5."},
	{"YWJjZGVm!", "Invalid symbol 33, offset 8."},
	// Observed for fs/writeFile dataBase64 (fsys wraps them as -32600).
	{"abc", "Invalid padding"},
	{"YWJj\nZA==", "Invalid symbol 10, offset 4."},
	{"==", "Invalid symbol 61, offset 0."},
	{"YWJ=", "Invalid last symbol 74, offset 2."},
	{"YQ==\x00", "Invalid symbol 0, offset 4."},
	{"YWJjZA=a", "Invalid symbol 61, offset 6."},
	{"-_==", "Invalid symbol 45, offset 0."},
	{"YW=J", "Invalid symbol 61, offset 2."},
	{"YWJjY===", "Invalid symbol 61, offset 5."},
	{"YWJjZ!==", "Invalid symbol 33, offset 5."},
	{"YW!jZA==", "Invalid symbol 33, offset 2."},
	{"YWJjZA=!", "Invalid symbol 61, offset 6."},
	{"YWJjZA", "Invalid padding"},
	{"YWJjZ==", "Invalid symbol 61, offset 5."},
	{"Y=!=", "Invalid symbol 61, offset 1."},
	{"YWJjZGV!", "Invalid symbol 33, offset 7."},
}

func TestDecodeReferenceErrors(t *testing.T) {
	for _, tt := range referenceBase64Errors {
		_, err := Decode([]byte(tt.in))
		if e, ok := err.(Error); !ok || string(e) != tt.msg {
			t.Errorf("Decode(%q) = %v, want %q", tt.in, err, tt.msg)
		}
	}
	for _, ok := range []string{"", "Zm9vYmFy", "Zm9vYmE=", "Zm9vYg==", "YQ==", "+/+/", "YWI=", "YWJjZGVm"} {
		got, err := Decode([]byte(ok))
		want, _ := base64.StdEncoding.DecodeString(ok)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("Decode(%q) = %q, %v", ok, got, err)
		}
	}
}

func TestDecodeMatchesStrictDecoding(t *testing.T) {
	// Valid exactly when Go's strict decoder accepts it without line
	// breaks; errorText agrees with Decode on every input.
	r := rand.New(rand.NewPCG(3, 4))
	const symbols = "AQgw+/=\n!aZ09"
	for range 20000 {
		b := make([]byte, r.IntN(14))
		for i := range b {
			b[i] = symbols[r.IntN(len(symbols))]
		}
		got, err := Decode(b)
		checkInPlace(t, b, got, err)
		want, werr := base64.StdEncoding.Strict().DecodeString(string(b))
		valid := werr == nil && !bytes.ContainsAny(b, "\r\n")
		if valid != (err == nil) {
			t.Fatalf("Decode(%q) = %v; strict Go decoding valid=%v", b, err, valid)
		}
		if valid && !bytes.Equal(got, want) {
			t.Fatalf("Decode(%q) = %x, want %x", b, got, want)
		}
		if (errorText(b) == "") != valid {
			t.Fatalf("errorText(%q) = %q, valid=%v", b, errorText(b), valid)
		}
	}
}

// FuzzDecode checks the fast paths against the rules: Decode
// fails exactly when errorText has a text, and with that text; what it
// decodes re-encodes to the input; decodeFast agrees with encoding/base64's
// strict decoder byte for byte.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "YQ==", "YWJj", "abc", "!!!!", "YR==", "YWJj\nZA==", "Y", "YQ==\x00", "YWJjZA=a",
		"YWJjZGVmZ2hpamtsbW5vcA==", "YWJj\nZGVmZ2hpamts", "!!!!!!!!!!!!"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Decode(in)
		emu := errorText(in)
		if err != nil {
			e, ok := err.(Error)
			if !ok || emu == "" || string(e) != emu {
				t.Fatalf("Decode(%q) error %v, errorText %q", in, err, emu)
			}
		} else {
			if emu != "" {
				t.Fatalf("Decode(%q) succeeded, errorText says %q", in, emu)
			}
			if base64.StdEncoding.EncodeToString(got) != string(in) {
				t.Fatalf("Decode(%q) = %x does not re-encode to the input", in, got)
			}
		}
		checkInPlace(t, in, got, err)
		dst := make([]byte, base64.StdEncoding.DecodedLen(len(in)))
		n, ok := decodeFast(dst, in)
		ref := make([]byte, len(dst))
		m, serr := strictStd.Decode(ref, in)
		if ok != (serr == nil) || (ok && !bytes.Equal(dst[:n], ref[:m])) {
			t.Fatalf("decodeFast(%q) = %x, %v; encoding/base64: %x, %v", in, dst[:n], ok, ref[:m], serr)
		}
	})
}

// Parallel decoding: chunk boundaries change nothing, and padding at the end
// of an inner chunk is still an error.
func TestDecodeChunks(t *testing.T) {
	old := decChunk
	decChunk = 4 << 10 // many chunks from small inputs
	t.Cleanup(func() { decChunk = old })
	pattern := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + i>>8)
		}
		return b
	}
	b64 := base64.StdEncoding.EncodeToString
	for _, size := range []int{2 * decChunk / 4 * 3, 2*decChunk/4*3 + 1, 3*decChunk/4*3 + 2, 5*decChunk/4*3 + 7} {
		data := pattern(size)
		got, err := Decode([]byte(b64(data)))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: %v, equal %v", size, err, bytes.Equal(got, data))
		}
	}
	inner := b64(pattern(decChunk/4*3 - 1)) // exactly one chunk, ending in "="
	if len(inner) != decChunk || !strings.HasSuffix(inner, "=") {
		t.Fatal("bad construction")
	}
	src := []byte(inner + b64(pattern(decChunk)))
	_, err := Decode(src)
	wantError(t, err, fmt.Sprintf("Invalid symbol 61, offset %d.", decChunk-1))
	// A newline deep inside a big input.
	src = []byte(b64(pattern(3 * decChunk)))
	src[2*decChunk+5] = '\n'
	_, err = Decode(src)
	wantError(t, err, fmt.Sprintf("Invalid symbol 10, offset %d.", 2*decChunk+5))
}

func wantError(t *testing.T, err error, want string) {
	t.Helper()
	if e, ok := err.(Error); !ok || string(e) != want {
		t.Fatalf("got error %v (%T), want %q", err, err, want)
	}
}

// checkInPlace checks that DecodeInPlace, on a copy of in, gives what
// Decode gave (got, err): the same bytes or the same error text.
func checkInPlace(t *testing.T, in, got []byte, err error) {
	t.Helper()
	buf := append([]byte(nil), in...)
	ip, ierr := DecodeInPlace(buf)
	if (err == nil) != (ierr == nil) || (err != nil && err.Error() != ierr.Error()) {
		t.Fatalf("DecodeInPlace(%q) error %v, Decode %v", in, ierr, err)
	}
	if err == nil && !bytes.Equal(ip, got) {
		t.Fatalf("DecodeInPlace(%q) = %x, Decode %x", in, ip, got)
	}
}

func TestDecodeInPlace(t *testing.T) {
	for _, tt := range referenceBase64Errors {
		checkInPlace(t, []byte(tt.in), nil, Error(tt.msg))
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 13, 47, 48, 1000, 1 << 16, 3<<20 + 1} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		text := []byte(base64.StdEncoding.EncodeToString(data))
		checkInPlace(t, text, data, nil)
		if n > 100 {
			// A bad symbol, or a line break, far from the end: the error
			// names it (and its offset) as Decode does.
			for _, c := range []byte{'!', '\n', '='} {
				bad := append([]byte(nil), text...)
				bad[len(bad)/2] = c
				want, err := Decode(bad)
				checkInPlace(t, bad, want, err)
			}
		}
	}
}

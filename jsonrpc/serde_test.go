package jsonrpc

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSerdeSyntaxErrors: texts and positions the reference answered for
// these malformed messages (observed on its stdio).
func TestSerdeSyntaxErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{`not json`, "expected ident at line 1 column 2"},
		{`{bad`, "key must be a string at line 1 column 2"},
		{`{"id":1,"method":"a"} {"x":1}`, "trailing characters at line 1 column 23"},
		{`{"id":3,"method":"a"}x`, "trailing characters at line 1 column 22"},
		{`{`, "EOF while parsing an object at line 1 column 1"},
		{`{"id":1`, "EOF while parsing an object at line 1 column 7"},
		{`{"id":1,`, "EOF while parsing a value at line 1 column 8"},
		{`{"id":1,}`, "trailing comma at line 1 column 9"},
		{`{"id":1 "m":2}`, "expected `,` or `}` at line 1 column 9"},
		{`{"id"}`, "expected `:` at line 1 column 6"},
		{`{"id":}`, "expected value at line 1 column 7"},
		{`{"id":tru}`, "expected ident at line 1 column 10"},
		{`{"id":nul,"method":"m"}`, "expected ident at line 1 column 10"},
		{`{"id":-,"method":"m"}`, "invalid number at line 1 column 8"},
		{`{"id":01,"method":"m"}`, "invalid number at line 1 column 8"},
		{`{"id":1.,"method":"m"}`, "invalid number at line 1 column 9"},
		{`{"id":1.5e,"method":"m"}`, "invalid number at line 1 column 11"},
		{`{"id":1e+,"method":"m"}`, "invalid number at line 1 column 10"},
		{`{"id":"abc`, "EOF while parsing a string at line 1 column 10"},
		{`{"id":"a\qb","method":"m"}`, "invalid escape at line 1 column 10"},
		{`{"id":"a\u12G4","method":"m"}`, "invalid escape at line 1 column 14"},
		{`{"id":"a\u12`, "EOF while parsing a string at line 1 column 12"},
		{`{"id":"\uDC00","method":"m"}`, "lone leading surrogate in hex escape at line 1 column 13"},
		{`{"id":"\uD800x","method":"m"}`, "unexpected end of hex escape at line 1 column 14"},
		{`{"id":"\uD800\u0041","method":"m"}`, "lone leading surrogate in hex escape at line 1 column 19"},
		{`{"id":1,"params":[1,2,],"method":"m"}`, "trailing comma at line 1 column 23"},
		{`{"id":1,"params":[1 2],"method":"m"}`, "expected `,` or `]` at line 1 column 21"},
		{`{"id":1,"params":[,1],"method":"m"}`, "expected value at line 1 column 19"},
		{`{"id":1,"params":{,},"method":"m"}`, "key must be a string at line 1 column 19"},
		{`{"id":1,"params":{"a":1,},"method":"m"}`, "trailing comma at line 1 column 25"},
		{`{"id":1,"method":"m"}}`, "trailing characters at line 1 column 22"},
		{`[1,2`, "EOF while parsing a list at line 1 column 4"},
		{`[`, "EOF while parsing a list at line 1 column 1"},
		{`"abc`, "EOF while parsing a string at line 1 column 4"},
		{`-`, "EOF while parsing a value at line 1 column 1"},
		{`tx`, "expected ident at line 1 column 2"},
		{`{"id":1,"method":"m","params":[1,{"a":[tru]}]}`, "expected ident at line 1 column 43"},
		{"{\"id\":1,\t\"method\":\t\"m\"\t,\"x\":\t@}", "expected value at line 1 column 30"},
	}
	for _, tt := range tests {
		_, err := Decode([]byte(tt.in), DefaultLimits)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Decode(%s) = %v, want %q", tt.in, err, tt.want)
		}
	}
}

// TestSerdeSyntaxAgreesWithEncodingJSON mutates valid messages at random:
// serde's grammar accepts exactly what encoding/json does, except that it
// also refuses invalid UTF-8 and lone surrogates.
func TestSerdeSyntaxAgreesWithEncodingJSON(t *testing.T) {
	seeds := []string{
		`{"id":1,"method":"process/start","params":{"processId":"p","argv":["sh","-c","echo \"hi\""],"env":{},"tty":false}}`,
		`{"id":"x","result":{"a":[1,-2.5e+3,true,false,null,{"b":"\u00e9\n"}]}}`,
		`[0, -0.0, 1E5, 12.34e-2, "\\/\b\f\n\r\t", {}, [], "\ud83d\ude00"]`,
	}
	const alphabet = "{}[]:,\"\\ -+.0123456789eEtrufalsn\x00\x1f\xff\xc3\xa9abu"
	r := rand.New(rand.NewPCG(5, 6))
	for n := range 10000 {
		b := []byte(seeds[n%len(seeds)])
		for range 1 + r.IntN(3) {
			i := r.IntN(len(b) + 1)
			switch r.IntN(3) {
			case 0: // insert
				b = append(b[:i], append([]byte{alphabet[r.IntN(len(alphabet))]}, b[i:]...)...)
			case 1: // delete
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			case 2: // replace
				if i < len(b) {
					b[i] = alphabet[r.IntN(len(alphabet))]
				}
			}
		}
		_, bad := serdeSyntaxError(b)
		valid := json.Valid(b)
		if !bad && !valid {
			t.Fatalf("serde grammar accepts %q, encoding/json refuses it", b)
		}
		if bad && valid && utf8.Valid(b) && !bytes.Contains(bytes.ToLower(b), []byte(`\ud`)) {
			msg, _ := serdeSyntaxError(b)
			t.Fatalf("serde grammar refuses %q (%s), encoding/json accepts it", b, msg)
		}
	}
	_ = strings.Contains
}

// plainRun must stop exactly where a byte-by-byte scan stops.
func TestPlainRun(t *testing.T) {
	slow := func(b []byte, i int) int {
		for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 && b[i] < 0x80 {
			i++
		}
		return i
	}
	base := []byte("abcdefghijklmnopqrstuvwxyz0123456789+/ABCDEFGHIJ\xc3\xa9\xff")
	for _, stop := range []byte{'"', '\\', 0, 0x1f, '\n'} {
		for pos := 0; pos < len(base); pos++ {
			b := append([]byte(nil), base...)
			b[pos] = stop
			for start := 0; start < 10; start++ {
				if got, want := plainRun(b, start), slow(b, start); got != want {
					t.Fatalf("plainRun(%q, %d) = %d, want %d", b, start, got, want)
				}
			}
		}
	}
	ascii := base[:len(base)-3]
	if got := plainRun(ascii, 0); got != len(ascii) {
		t.Errorf("no stop byte: %d, want %d", got, len(ascii))
	}
}

// plainRun's vector path (vecRun, strings of vecRunMin bytes and more) must
// stop where a byte-by-byte scan stops, wherever the stop falls against its
// doubling windows, for every kind of stop and for DEL (plain to JSON, not
// printable to the vector check).
func TestPlainRunLong(t *testing.T) {
	slow := func(b []byte, i int) int {
		for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 && b[i] < 0x80 {
			i++
		}
		return i
	}
	const n = 300 << 10
	base := bytes.Repeat([]byte("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo+/w=="), n/40)
	positions := []int{0, 1, 63, 64, 65, 191, 192, 255, 256, 257, 1000, 4095, 4096, 70000, 131071, 200000, len(base) - 1}
	for _, stop := range []byte{'"', '\\', 0, 0x1f, '\n', 0x7f, 0x80, 0xc3, 0xff} {
		for _, pos := range positions {
			b := append([]byte(nil), base...)
			b[pos] = stop
			for _, start := range []int{0, 1, 7, 33} {
				if got, want := plainRun(b, start), slow(b, start); got != want {
					t.Fatalf("stop %#x at %d, start %d: plainRun = %d, want %d", stop, pos, start, got, want)
				}
			}
		}
	}
	if got := plainRun(base, 0); got != len(base) {
		t.Errorf("no stop byte: %d, want %d", got, len(base))
	}
}

// FuzzPlainRunLong: plainRun over long strings (its vector path) against a
// byte-by-byte scan, with the fuzzed bytes placed inside a long plain run.
func FuzzPlainRunLong(f *testing.F) {
	f.Add([]byte(`"`), uint16(300), uint8(0))
	f.Add([]byte("\x7f\\n"), uint16(64), uint8(3))
	f.Add([]byte("\xc3\xa9"), uint16(4096), uint8(1))
	f.Fuzz(func(t *testing.T, ins []byte, pos uint16, start uint8) {
		b := bytes.Repeat([]byte("QUJD+/w="), 9000)
		p := int(pos) % len(b)
		b = append(b[:p:p], append(ins, b[p:]...)...)
		i := int(start)
		want := i
		for want < len(b) && b[want] != '"' && b[want] != '\\' && b[want] >= 0x20 && b[want] < 0x80 {
			want++
		}
		if got := plainRun(b, i); got != want {
			t.Fatalf("insert %q at %d, start %d: plainRun = %d, want %d", ins, p, i, got, want)
		}
	})
}

package jsonrpc

import (
	"bytes"
	"encoding/json"
	"testing"
)

// decodeThreePass is Decode as it was before it read a message once: the
// loose prescan for limits and repeated keys, the serde grammar check,
// then a walk over the top-level members. It is the oracle Decode's single
// pass must agree with, message for message and error text for error text.
func decodeThreePass(data []byte, lim Limits) (*Message, error) {
	if lim.MaxDepth == 0 {
		lim = DefaultLimits
	}
	limitErr, dupErr := prescan(data, lim)
	if limitErr != nil {
		return nil, limitErr
	}
	if msg, bad := serdeSyntaxError(data); bad {
		return nil, &DecodeError{msg}
	}
	data = bytes.TrimSpace(data)
	if dupErr != nil {
		return nil, dupErr
	}
	if data[0] != '{' {
		return nil, &DecodeError{"expected a JSON-RPC object"}
	}
	var p serdeParser
	oracleEachMember(data, p.member)
	// Only the members matter here; rebuild the message through Decode's
	// own tail by decoding an equivalent object made of them.
	var b bytes.Buffer
	b.WriteByte('{')
	for _, kv := range []struct {
		k string
		v []byte
	}{{"id", p.id}, {"method", p.method}, {"params", p.params}, {"result", p.result}, {"error", p.errv}} {
		if kv.v != nil {
			if b.Len() > 1 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + kv.k + `":`)
			b.Write(kv.v)
		}
	}
	b.WriteByte('}')
	return Decode(b.Bytes(), Limits{MaxDepth: 1 << 20, MaxValues: 1 << 30})
}

// FuzzDecodeOnePass checks Decode against decodeThreePass.
func FuzzDecodeOnePass(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"method":"initialize","params":{"clientName":"x"}}`,
		`{"id":1,"result":{"a":[1,2,{"b":null}]}}`, `{"id":"x","error":{"code":1,"message":"m"}}`,
		`{"method":"a","method":"b","id":1}`, `{"id":1,"method":"m","params":{"a":{"k":1,"\u006b":2}}}`,
		`[{"a":1,"a":2}]`, `{"a":x,"b":[[[[[[[[[[1]]]]]]]]]]}`, `{"a":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65]}`,
		"{\"id\":1,\"method\":\"\xff\"}", "{\"id\":1,\"method\":\"\xc3\xa9\n\"}", `{"id":1,"method":"m","params":"\ud800"}`,
		"  {\"id\" : 1 , \"method\" : \"m\" } ", `{}`, `[]`, `{"id":1}`, `42`, ``, `{"\u0069d":1,"method":"m"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, gotErr := Decode(data, fuzzLimits)
		want, wantErr := decodeThreePass(data, fuzzLimits)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("%q: Decode error %v, three passes %v", data, gotErr, wantErr)
		}
		if gotErr != nil {
			return
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Fatalf("%q: Decode %s, three passes %s", data, g, w)
		}
	})
}

// oracleEachMember calls f for every top-level member of a valid JSON object.
func oracleEachMember(data []byte, f func(key, value []byte)) error {
	i := skipWS(data, 1)
	if i < len(data) && data[i] == '}' {
		return nil
	}
	for i < len(data) {
		i = skipWS(data, i)
		ks := i
		i = skipString(data, i)
		key := data[ks+1 : i-1]
		i = skipWS(data, i) + 1 // ':'
		i = skipWS(data, i)
		vs := i
		i = skipValue(data, i)
		f(key, data[vs:i])
		i = skipWS(data, i)
		if i >= len(data) || data[i] == '}' {
			return nil
		}
		i++ // ','
	}
	return nil
}

// skipString returns the index just past the string starting at data[i].
func skipString(data []byte, i int) int {
	if end := closingQuote(data, i+1); end >= 0 {
		return end + 1
	}
	return len(data)
}

// skipValue returns the index just past the (valid) value starting at data[i].
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				i = skipString(data, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(data) && isScalarByte(data[i]) {
		i++
	}
	return i
}

package protocol

import (
	"bytes"
	"encoding/json"

	"github.com/execgo/exec-server/internal/b64codec"
)

// Base64 is a byte payload that travels as standard, padded base64. It
// decodes as strictly as the reference (Rust's base64 crate, STANDARD
// engine: canonical padding, no stray bits, no line breaks), and its errors
// carry the reference's texts ("Invalid symbol 33, offset 0."). encoding/json
// alone would accept "YWJj\n" and "YR==". It encodes as encoding/json
// encodes []byte.
type Base64 []byte

// UnmarshalJSON decodes a JSON string of base64; errors are -32602.
func (b *Base64) UnmarshalJSON(data []byte) error {
	if len(data) == 0 || data[0] != '"' {
		return InvalidParams("invalid type: %s, expected a string", jsonKind(data))
	}
	text := data[1 : len(data)-1]
	if bytes.IndexByte(text, '\\') >= 0 {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return InvalidParams("invalid string: %v", err)
		}
		text = []byte(s)
	}
	out, err := b64codec.Decode(text)
	if err != nil {
		return InvalidParams("%v", err)
	}
	*b = out
	return nil
}

// jsonKind names the type of the JSON value v as serde's errors do.
func jsonKind(v []byte) string {
	if len(v) == 0 {
		return "null"
	}
	switch v[0] {
	case '{':
		return "map"
	case '[':
		return "sequence"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

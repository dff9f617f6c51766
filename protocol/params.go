package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// DecodeParams decodes a request's params into v, a pointer to a struct, and
// checks that every name in required is present at the top level. Member
// names match exactly, as in the reference: a key that differs from a
// field's name only by case is an unknown member and ignored (members.go).
// typeName appears in the message for null or missing params, as the
// reference words it ("invalid type: null, expected struct ReadParams").
// Every failure is an -32602 error that names the offending field.
func DecodeParams(raw json.RawMessage, v any, typeName string, required ...string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return InvalidParams("invalid type: null, expected struct %s", typeName)
	}
	if raw[0] != '{' {
		return InvalidParams("invalid type: %s, expected struct %s", jsonKind(raw[0]), typeName)
	}
	sh := shapeOf(reflect.TypeOf(v))
	if len(required) > 0 || sh != nil {
		w := memberWalk{scanner: scanner{b: raw}, names: required, present: make([]bool, len(required))}
		if err := w.object(sh, true, 0); err != nil {
			if len(required) == 0 {
				// Malformed: encoding/json words its own syntax errors.
				if uerr := json.Unmarshal(raw, v); uerr != nil {
					return InvalidParams("%s", describeJSONError(uerr))
				}
			}
			return InvalidParams("%v", err)
		}
		for i, name := range required {
			if !w.present[i] {
				return InvalidParams("missing field `%s`", name)
			}
		}
		if len(w.folded) > 0 {
			raw = renameFolded(raw, w.folded)
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return InvalidParams("%s", describeJSONError(err))
	}
	return nil
}

// DecodeNoParams accepts absent, null or {} params, as the reference does for
// methods that take none.
func DecodeNoParams(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	switch raw[0] {
	case '{':
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return InvalidParams("%s", describeJSONError(err))
		}
		if len(m) == 0 {
			return nil
		}
		return InvalidParams("invalid type: map, expected unit")
	case '[':
		return InvalidParams("invalid type: sequence, expected unit")
	}
	return InvalidParams("invalid type: %s, expected unit", jsonKind(raw[0]))
}

func jsonKind(c byte) string {
	switch c {
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

// describeJSONError turns encoding/json's errors into short texts that name
// the field and the expected type.
func describeJSONError(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		// From a field's own UnmarshalJSON (Base64): already worded.
		return pe.Message
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			return fmt.Sprintf("invalid type: %s, expected %s", te.Value, goKind(te.Type.String()))
		}
		return fmt.Sprintf("invalid type: %s, expected %s for field `%s`", te.Value, goKind(te.Type.String()), field)
	}
	var ce base64.CorruptInputError
	if errors.As(err, &ce) {
		return fmt.Sprintf("invalid base64: illegal data at input byte %d", int64(ce))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at offset %d", se.Error(), se.Offset)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func goKind(t string) string {
	switch {
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "uint"):
		return "a non-negative integer"
	case strings.HasPrefix(t, "int"):
		return "an integer"
	case strings.HasPrefix(t, "map"):
		return "a map"
	case t == "[]uint8":
		return "a base64 string"
	case strings.HasPrefix(t, "[]"):
		return "a sequence"
	}
	return t
}

// TopLevelKeys reports, for each name, whether the JSON object raw has that
// key at its top level with a non-null value. It scans without allocating
// (keys written with escapes are decoded before they are compared)
// and without decoding values, so it is cheap even for a message carrying
// tens of megabytes of base64. raw must start with '{'.
func TopLevelKeys(raw []byte, names []string) ([]bool, error) {
	w := memberWalk{scanner: scanner{b: raw}, names: names, present: make([]bool, len(names))}
	w.ws()
	if err := w.object(nil, true, 0); err != nil {
		return nil, err
	}
	return w.present, nil
}

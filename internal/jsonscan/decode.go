package jsonscan

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/execgo/exec-server/protocol"
)

// DecodeParams decodes a request's params into v, a pointer to a struct, and
// checks that every name in required is present at the top level. Member
// names match exactly, as in the reference: a key that differs from a
// field's name only by case is an unknown member and ignored (walk.go).
// typeName appears in the message for null or missing params, as the
// reference words it ("invalid type: null, expected struct ReadParams").
// Every failure is an -32602 error that names the offending field.
func DecodeParams(raw json.RawMessage, v any, typeName string, required ...string) error {
	_, err := Decode(raw, v, Spec{Type: typeName, Required: required})
	return err
}

// Spec says how Decode treats one params type.
type Spec struct {
	Type     string   // the reference's name of the params type, for errors
	Required []string // top-level members that must be present and not null
	// Cut names top-level members whose values Decode returns as found
	// (aliasing raw) instead of giving them to encoding/json: a bulk
	// payload is then neither validated nor copied twice. A string value is
	// decoded as "" into its field; another kind is left in place for
	// encoding/json to refuse.
	Cut []string
	// Known, when not nil, is the body of a string in the params (between
	// its quotes, aliasing them) already found to hold no quote and no
	// backslash (jsonrpc.Message.Bulk): the walk passes over it without
	// reading it. The result is the same as without it.
	Known []byte
}

// MemberChecker is implemented by params types that refuse some values
// before they are decoded (protocol.StartParams: rows and cols, so 65536
// is out of range rather than a type error). Decode calls CheckMember for
// each top-level member (name with its escapes decoded, value as raw JSON)
// during its walk; the first failure is Decode's error.
type MemberChecker interface {
	CheckMember(name, value []byte) error
}

// Decode is DecodeParams with a Spec; it returns the values of spec.Cut's
// members, nil for those absent. The params are walked once (the shape
// walk, the required members, the ids, the member checks, the cuts), then
// encoding/json decodes a copy only when the walk found something to
// change in it. A large protocol.Base64 member is decoded apart, so
// encoding/json never scans it.
func Decode(raw json.RawMessage, v any, spec Spec) ([][]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, protocol.InvalidParams("invalid type: null, expected struct %s", spec.Type)
	}
	if raw[0] != '{' {
		return nil, protocol.InvalidParams("invalid type: %s, expected struct %s", jsonKind(raw[0]), spec.Type)
	}
	sh := shapeOf(reflect.TypeOf(v))
	checker, _ := v.(MemberChecker)
	w := memberWalk{
		scanner: scanner{b: raw, known: spec.Known}, names: spec.Required, present: make([]bool, len(spec.Required)),
		checker: checker, cutName: spec.Cut, cut: make([][]byte, len(spec.Cut)),
	}
	if len(spec.Required) > 0 || sh != nil || checker != nil || len(spec.Cut) > 0 {
		if err := w.object(sh, true, 0); err != nil {
			if w.checkErr != nil {
				return nil, w.checkErr
			}
			if len(spec.Required) == 0 {
				// Malformed: encoding/json words its own syntax errors.
				if uerr := json.Unmarshal(raw, v); uerr != nil {
					return nil, protocol.InvalidParams("%s", describeJSONError(uerr))
				}
			}
			return nil, protocol.InvalidParams("%v", err)
		}
		switch {
		case w.checkErr != nil:
			return nil, w.checkErr
		case w.idErr != nil:
			return nil, protocol.InvalidParams("%v", w.idErr)
		}
		for i, name := range spec.Required {
			if !w.present[i] {
				return nil, protocol.InvalidParams("missing field `%s`", name)
			}
		}
	}
	err := json.Unmarshal(edited(raw, w.edits), v)
	if len(w.bulk) > 0 {
		// As encoding/json would have, a payload's own error wins over
		// a type error elsewhere.
		if berr := decodeBulk(v, w.bulk); berr != nil {
			err = berr
		}
	}
	if err != nil {
		return nil, protocol.InvalidParams("%s", describeJSONError(err))
	}
	return w.cut, nil
}

// decodeBulk decodes each bulk value into its protocol.Base64 field of the
// struct v points to.
func decodeBulk(v any, bulk []bulkValue) error {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	for _, b := range bulk {
		f := rv.FieldByIndex(b.index).Addr().Interface().(*protocol.Base64)
		if err := f.UnmarshalJSON(b.raw); err != nil {
			return err
		}
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
			return protocol.InvalidParams("%s", describeJSONError(err))
		}
		if len(m) == 0 {
			return nil
		}
		return protocol.InvalidParams("invalid type: map, expected unit")
	case '[':
		return protocol.InvalidParams("invalid type: sequence, expected unit")
	}
	return protocol.InvalidParams("invalid type: %s, expected unit", jsonKind(raw[0]))
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
	var pe *protocol.Error
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

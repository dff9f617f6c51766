package protocol

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// encoding/json matches an object key to a struct field case-insensitively
// when no field has exactly that name; the reference (serde) matches
// exactly, so {"ProcessId":"x"} is an unknown member there, ignored, and
// processId is missing. DecodeParams therefore walks the object against the
// target type's shape before decoding, and renames every key that
// encoding/json would fold onto a field to "" (a name no field has), so it is
// ignored as serde ignores it. The walk is the one TopLevelKeys already makes
// for the required members; copying happens only when such a key is found.

// shape is what the walk needs of a Go type: the exact member names of a
// struct and, per member, the shape of its value; the element shape of a
// slice, array or map. A nil *shape is a value whose keys need no check
// (scalars, and types with their own UnmarshalJSON such as json.RawMessage
// and Base64).
type shape struct {
	kind   reflect.Kind // reflect.Struct, reflect.Slice (arrays too) or reflect.Map
	names  []string     // struct: encoding/json's member names
	fields []*shape     // struct: the shape of each member's value
	elem   *shape       // slice or map: the shape of each element
}

var (
	shapes          sync.Map // reflect.Type -> *shape (nil stored as a typed nil)
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shapeOf returns t's shape, cached: params types are few and fixed.
func shapeOf(t reflect.Type) *shape {
	if s, ok := shapes.Load(t); ok {
		return s.(*shape)
	}
	s := buildShape(t, map[reflect.Type]*shape{})
	shapes.Store(t, s)
	return s
}

// buildShape computes t's shape; building holds the struct shapes under
// construction so a recursive type refers to itself instead of looping.
func buildShape(t reflect.Type, building map[reflect.Type]*shape) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pt := reflect.PointerTo(t)
	if t.Implements(jsonUnmarshaler) || pt.Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || pt.Implements(textUnmarshaler) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if s, ok := building[t]; ok {
			return s
		}
		s := &shape{kind: reflect.Struct}
		building[t] = s
		addFields(s, t, building, 0)
		if len(s.names) == 0 {
			return nil
		}
		return s
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return nil // []byte is a base64 string
		}
		if e := buildShape(t.Elem(), building); e != nil {
			return &shape{kind: reflect.Slice, elem: e}
		}
	case reflect.Map:
		if e := buildShape(t.Elem(), building); e != nil {
			return &shape{kind: reflect.Map, elem: e}
		}
	}
	return nil
}

// addFields lists t's members as encoding/json names them: the tag's name,
// else the field's; "-" skips; untagged embedded structs lend their fields.
func addFields(s *shape, t reflect.Type, building map[reflect.Type]*shape, depth int) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			if depth < 8 {
				addFields(s, ft, building, depth+1)
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s.names = append(s.names, name)
		s.fields = append(s.fields, buildShape(f.Type, building))
	}
}

// memberWalk walks one JSON object against a shape and records what
// DecodeParams needs: which required names are present (non-null) at the
// top level, and where the keys are that encoding/json would match only by
// folding case.
type memberWalk struct {
	scanner
	names   []string // required top-level names
	present []bool
	folded  []int // start offsets (at the opening quote) of keys to rename
}

// object walks the object at s.i. sh is its struct or map shape (nil: check
// no keys); top says whether to record required names.
func (w *memberWalk) object(sh *shape, top bool, depth int) error {
	if depth > 512 {
		return errors.New("nesting too deep")
	}
	return w.members(func(kStart int, key []byte) error {
		if bytes.IndexByte(key, '\\') >= 0 {
			// An escaped key ("process\u0049d") names the same member as
			// its plain spelling; compare the decoded text.
			k, ok := unescapeKey(key)
			if !ok {
				return errors.New("invalid escape in a key")
			}
			key = []byte(k)
		}
		var sub *shape
		switch {
		case sh == nil:
		case sh.kind == reflect.Map:
			sub = sh.elem // the keys are data
		case sh.kind == reflect.Struct:
			matched := false
			for i, n := range sh.names {
				if string(key) == n {
					sub, matched = sh.fields[i], true
					break
				}
			}
			if !matched {
				for _, n := range sh.names {
					if bytes.EqualFold(key, []byte(n)) {
						w.folded = append(w.folded, kStart)
						break
					}
				}
			}
		}
		if top && len(w.names) > 0 && !bytes.HasPrefix(w.b[w.i:], []byte("null")) {
			for i, n := range w.names {
				if string(key) == n {
					w.present[i] = true
				}
			}
		}
		vStart := w.i
		if err := w.value(sub, depth+1); err != nil {
			return err
		}
		if top && sh != nil && sh.kind == reflect.Struct && isIDName(key) {
			return checkIDLength(key, w.b[vStart:w.i])
		}
		return nil
	})
}

// MaxIDBytes bounds every client-chosen id (processId, writeId, handleId,
// resumeSessionId: any top-level params member whose name ends in "Id").
// The server repeats an id in every message about its object (each
// process/output carries its processId) and keeps it in tables and error
// texts, so an unbounded id multiplies into unbounded memory.
const MaxIDBytes = 256

func isIDName(key []byte) bool {
	return bytes.HasSuffix(key, []byte("Id"))
}

// checkIDLength fails when the JSON string raw decodes to more than
// MaxIDBytes bytes. Other kinds of values are left to encoding/json.
func checkIDLength(key, raw []byte) error {
	if len(raw) < 2 || raw[0] != '"' {
		return nil
	}
	n := len(raw) - 2
	// Escapes, and invalid UTF-8 (each bad byte becomes a 3-byte U+FFFD),
	// change the length: measure what encoding/json will decode.
	if bytes.IndexByte(raw, '\\') >= 0 || !utf8.Valid(raw) {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil // encoding/json words the error
		}
		n = len(s)
	}
	if n <= MaxIDBytes {
		return nil
	}
	return fmt.Errorf("`%s` is too long: %d bytes, the limit is %d", key, n, MaxIDBytes)
}

// value walks the value at s.i with shape sh. A value of another kind than
// the shape expects is only skipped: encoding/json reports the type error.
func (w *memberWalk) value(sh *shape, depth int) error {
	if sh == nil || w.i >= len(w.b) {
		if !w.skipValue(depth) {
			return errors.New("invalid value")
		}
		return nil
	}
	switch c := w.b[w.i]; {
	case c == '{' && sh.kind == reflect.Struct:
		return w.object(sh, false, depth)
	case c == '{' && sh.kind == reflect.Map:
		return w.object(sh, false, depth)
	case c == '[' && sh.kind == reflect.Slice:
		w.i++
		w.ws()
		if w.eat(']') {
			return nil
		}
		for {
			w.ws()
			if err := w.value(sh.elem, depth+1); err != nil {
				return err
			}
			w.ws()
			if w.eat(',') {
				continue
			}
			if w.eat(']') {
				return nil
			}
			return errors.New("expected `,` or `]`")
		}
	}
	if !w.skipValue(depth) {
		return errors.New("invalid value")
	}
	return nil
}

// renameFolded returns a copy of raw in which the key starting at each
// offset (ascending) is replaced by "".
func renameFolded(raw []byte, offsets []int) []byte {
	out := make([]byte, 0, len(raw))
	last := 0
	for _, k := range offsets {
		end := ClosingQuote(raw, k+1) + 1
		out = append(append(out, raw[last:k]...), `""`...)
		last = end
	}
	return append(out, raw[last:]...)
}

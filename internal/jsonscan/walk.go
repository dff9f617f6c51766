package jsonscan

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/execgo/exec-server/protocol"
)

// encoding/json matches an object key to a struct field case-insensitively
// when no field has exactly that name; the reference (serde) matches
// exactly, so {"ProcessId":"x"} is an unknown member there, ignored, and
// processId is missing. DecodeParams therefore walks the object against the
// target type's shape before decoding, and renames every key that
// encoding/json would fold onto a field to "" (a name no field has), so it is
// ignored as serde ignores it. The same walk, the only one the params get
// before encoding/json decodes them, finds the required members, bounds the
// ids, runs the type's member checks (MemberChecker) and finds the members
// to keep out of encoding/json (Spec.Cut, big Base64 payloads); copying
// happens only when one of those is found.

// shape is what the walk needs of a Go type: the exact member names of a
// struct and, per member, the shape of its value; the element shape of a
// slice, array or map. A nil *shape is a value whose keys need no check
// (scalars, and types with their own UnmarshalJSON such as json.RawMessage
// and Base64).
type shape struct {
	kind   reflect.Kind // reflect.Struct, reflect.Slice (arrays too) or reflect.Map
	names  []string     // struct: encoding/json's member names
	fields []*shape     // struct: the shape of each member's value
	bulk   [][]int      // struct: the field index of a protocol.Base64 member, else nil
	elem   *shape       // slice or map: the shape of each element
}

var (
	shapes          sync.Map // reflect.Type -> *shape (nil stored as a typed nil)
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	base64Type      = reflect.TypeFor[protocol.Base64]()
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
		addFields(s, t, building, nil, true)
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
// index is the field index of t within the top struct; direct says no
// pointer lies on that path (a nil one would have no field to set).
func addFields(s *shape, t reflect.Type, building map[reflect.Type]*shape, index []int, direct bool) {
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
			if len(index) < 8 {
				addFields(s, ft, building, append(slices.Clone(index), i), direct && f.Type.Kind() != reflect.Pointer)
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
		var bulk []int
		if f.Type == base64Type && direct {
			bulk = append(slices.Clone(index), i)
		}
		s.bulk = append(s.bulk, bulk)
	}
}

// memberWalk walks one JSON object against a shape and records what
// Decode needs: which required names are present (non-null) at the top
// level, and the edits that make the copy encoding/json decodes.
type memberWalk struct {
	scanner
	names   []string // required top-level names
	present []bool
	checker MemberChecker // nil: no member checks
	cutName []string      // top-level members to cut out (Spec.Cut)
	cut     [][]byte      // their values, as found
	bulk    []bulkValue
	edits   []edit // ascending, not overlapping
	// The first failed member check and the first over-long id: the walk
	// goes on after them so that a check failure, which takes precedence,
	// is found wherever it is.
	checkErr, idErr error
}

// edit replaces w.b[start:end] with repl in the copy that is decoded.
type edit struct {
	start, end int
	repl       string
}

// bulkValue is a large protocol.Base64 member, decoded apart from the rest.
type bulkValue struct {
	field int   // in the top shape
	index []int // reflect's field index
	start int   // offset of raw in the params
	raw   []byte
}

// bulkMin is the length from which a Base64 member is kept out of
// encoding/json, which would scan it twice and copy it once before
// protocol.Base64 decodes it.
const bulkMin = 1024

// object walks the object at s.i. sh is its struct or map shape (nil: check
// no keys); top says whether this is the params object itself.
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
		field := -1
		switch {
		case sh == nil:
		case sh.kind == reflect.Map:
			sub = sh.elem // the keys are data
		case sh.kind == reflect.Struct:
			for i, n := range sh.names {
				if string(key) == n {
					sub, field = sh.fields[i], i
					break
				}
			}
			if field < 0 {
				for _, n := range sh.names {
					if bytes.EqualFold(key, []byte(n)) {
						w.edits = append(w.edits, edit{kStart, ClosingQuote(w.b, kStart+1) + 1, `""`})
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
		if !top {
			return nil
		}
		value := w.b[vStart:w.i]
		if w.checker != nil && w.checkErr == nil {
			w.checkErr = w.checker.CheckMember(key, value)
		}
		if sh != nil && sh.kind == reflect.Struct && isIDName(key) && w.idErr == nil {
			w.idErr = checkIDLength(key, value)
		}
		isString := value[0] == '"'
		for i, n := range w.cutName {
			if string(key) == n {
				w.cut[i] = value
				if isString {
					w.edits = append(w.edits, edit{vStart, w.i, `""`})
				}
				return nil
			}
		}
		if field < 0 || sh.bulk[field] == nil {
			return nil
		}
		// A repeated member: the last one wins, as in encoding/json,
		// which sees (and checks) the earlier one again.
		w.bulk = slices.DeleteFunc(w.bulk, func(b bulkValue) bool {
			if b.field != field {
				return false
			}
			w.edits = slices.DeleteFunc(w.edits, func(e edit) bool { return e.start == b.start })
			return true
		})
		if isString && len(value) >= bulkMin {
			w.bulk = append(w.bulk, bulkValue{field, sh.bulk[field], vStart, value})
			w.edits = append(w.edits, edit{vStart, w.i, `""`})
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

// edited returns raw with the edits applied (raw itself when there are
// none): what encoding/json decodes.
func edited(raw []byte, edits []edit) []byte {
	if len(edits) == 0 {
		return raw
	}
	n := len(raw)
	for _, e := range edits {
		n -= e.end - e.start - len(e.repl)
	}
	out := make([]byte, 0, n)
	last := 0
	for _, e := range edits {
		out = append(append(out, raw[last:e.start]...), e.repl...)
		last = e.end
	}
	return append(out, raw[last:]...)
}

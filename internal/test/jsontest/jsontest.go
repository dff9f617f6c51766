// Package jsontest holds JSON helpers shared by the project's tests and
// fuzz targets. It is not used by production code.
package jsontest

import (
	"bytes"
	"encoding/json"
)

// HasDuplicateKeys reports whether any object in the JSON text data repeats
// a key.
func HasDuplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object bool
		keys   map[string]bool
		expect bool // next string token of an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				if top != nil && top.object {
					top.expect = true
				}
				stack = append(stack, &frame{object: tok == '{', keys: map[string]bool{}, expect: tok == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.object && top.expect {
				if top.keys[tok] {
					return true
				}
				top.keys[tok] = true
				top.expect = false
				continue
			}
		}
		if top != nil && top.object {
			top.expect = true
		}
	}
}

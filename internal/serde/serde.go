// Package serde words JSON values as the reference's serde errors do
// ("invalid type: floating point `1000.0`, expected u64"): one place for a
// wording that several decoders need and whose copies had drifted apart.
// It imports nothing of the project.
package serde

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
)

// Unexpected names the JSON value v (one complete value, no surrounding
// space) as serde's Unexpected displays it: map, sequence, null, string
// "x", boolean `true`, integer `3`, floating point `1000.0`.
func Unexpected(v []byte) string {
	if len(v) == 0 {
		return "null"
	}
	switch v[0] {
	case '"':
		var s string
		_ = json.Unmarshal(v, &s)
		return "string " + strconv.Quote(s)
	case '{':
		return "map"
	case '[':
		return "sequence"
	case 't', 'f':
		return "boolean `" + string(v) + "`"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(v, ".eE") {
		return "floating point `" + Float(v) + "`"
	}
	return "integer `" + string(v) + "`"
}

// Float formats the JSON number v as serde displays an f64: the nearest
// f64, shortest form, with ".0" when it has no fraction (1e3 is 1000.0).
func Float(v []byte) string {
	f, _, err := big.ParseFloat(string(v), 10, 64, big.ToNearestEven)
	if err != nil {
		return string(v)
	}
	x, _ := f.Float64()
	s := strconv.FormatFloat(x, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") && !strings.Contains(s, "Inf") {
		s += ".0"
	}
	return s
}

package codexhome

import (
	"math"
	"strconv"
	"strings"
)

// Encode serializes t as the reference's TOML writer lays a document out
// (codex 0.169.0, observed; the rules below were each checked against its
// answers):
//   - in every table, plain values first, then sub-tables and arrays of
//     tables, each group in document order;
//   - a table gets a [header] when it holds a plain value or nothing at all
//     (a table holding only tables is implied by their headers); an element
//     of an array of tables always gets its [[header]];
//   - inline tables and dotted keys come out as standard tables, an array
//     whose elements are all tables as an array of tables;
//   - one blank line before every header but the first line of the output.
func Encode(t *Table) string {
	var b strings.Builder
	encodeTable(&b, t, nil, false)
	return b.String()
}

func isAoT(v any) bool {
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return false
	}
	for _, e := range a {
		if _, ok := e.(*Table); !ok {
			return false
		}
	}
	return true
}

func isSection(v any) bool {
	_, ok := v.(*Table)
	return ok || isAoT(v)
}

func encodeTable(b *strings.Builder, t *Table, path []string, element bool) {
	values := 0
	for _, k := range t.Keys {
		if !isSection(t.Vals[k]) {
			values++
		}
	}
	if len(path) > 0 && (element || values > 0 || len(t.Keys) == 0) {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		if element {
			b.WriteString("[[" + keyPath(path) + "]]\n")
		} else {
			b.WriteString("[" + keyPath(path) + "]\n")
		}
	}
	for _, k := range t.Keys {
		v := t.Vals[k]
		if isSection(v) {
			continue
		}
		b.WriteString(formatKey(k))
		b.WriteString(" = ")
		encodeValue(b, v)
		b.WriteByte('\n')
	}
	for _, k := range t.Keys {
		v := t.Vals[k]
		sub := append(path[:len(path):len(path)], k)
		switch x := v.(type) {
		case *Table:
			encodeTable(b, x, sub, false)
		case []any:
			if isAoT(x) {
				for _, e := range x {
					encodeTable(b, e.(*Table), sub, true)
				}
			}
		}
	}
}

func encodeValue(b *strings.Builder, v any) {
	switch x := v.(type) {
	case string:
		b.WriteString(formatString(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(formatFloat(x))
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case Datetime:
		b.WriteString(string(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			encodeValue(b, e)
		}
		b.WriteByte(']')
	case *Table:
		if len(x.Keys) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteString("{ ")
		for i, k := range x.Keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(formatKey(k))
			b.WriteString(" = ")
			encodeValue(b, x.Vals[k])
		}
		b.WriteString(" }")
	}
}

// formatFloat writes the shortest decimal that reads back as f, never in
// exponent form, with ".0" on integral values; NaN has no sign.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if f == math.Trunc(f) {
		s += ".0"
	}
	return s
}

// strMetrics is what decides how a string is quoted.
type strMetrics struct {
	maxSingles, maxDoubles int
	control                bool // a control character other than tab and newline
	backslash, newline     bool
}

func measure(s string) strMetrics {
	var m strMetrics
	singles, doubles := 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\'' {
			singles++
			m.maxSingles = max(m.maxSingles, singles)
		} else {
			singles = 0
		}
		if c == '"' {
			doubles++
			m.maxDoubles = max(m.maxDoubles, doubles)
		} else {
			doubles = 0
		}
		switch {
		case c == '\\':
			m.backslash = true
		case c == '\t':
		case c == '\n':
			m.newline = true
		case c <= 0x1f || c == 0x7f:
			m.control = true
		}
	}
	return m
}

// formatString picks the first form that needs no escapes, in the
// reference's preference: "basic", 'literal', """multi-line basic""",
// ”'multi-line literal”', and else an escaped basic string (multi-line
// when the value has a newline). Multi-line forms start with a newline
// when the value has one.
func formatString(s string) string {
	m := measure(s)
	switch {
	case !m.control && !m.backslash && m.maxDoubles == 0 && !m.newline:
		return quoteBasic(s, false, false)
	case !m.control && m.maxSingles == 0 && !m.newline:
		return "'" + s + "'"
	case !m.control && !m.backslash && m.maxDoubles <= 2:
		return quoteBasic(s, true, m.newline)
	case !m.control && m.maxSingles <= 2:
		if m.newline {
			return "'''\n" + s + "'''"
		}
		return "'''" + s + "'''"
	}
	return quoteBasic(s, m.newline, m.newline)
}

// quoteBasic escapes s for a basic string; in a multi-line one, newlines
// stay and only a third double quote in a row is escaped.
func quoteBasic(s string, multi, lead bool) string {
	var b strings.Builder
	delim := `"`
	maxRun := 0
	if multi {
		delim = `"""`
		maxRun = 2
	}
	b.WriteString(delim)
	if lead {
		b.WriteByte('\n')
	}
	run := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' {
			run++
			if run > maxRun {
				b.WriteString(`\"`)
				run = 0
				continue
			}
			b.WriteByte(c)
			continue
		}
		run = 0
		switch c {
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			if multi {
				b.WriteByte('\n')
			} else {
				b.WriteString(`\n`)
			}
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		case '\\':
			b.WriteString(`\\`)
		default:
			if c <= 0x1f || c == 0x7f {
				b.WriteString(`\u00`)
				b.WriteByte("0123456789ABCDEF"[c>>4])
				b.WriteByte("0123456789ABCDEF"[c&15])
				continue
			}
			b.WriteByte(c)
		}
	}
	b.WriteString(delim)
	return b.String()
}

// formatKey writes a key bare when it can be, else quoted: basic when that
// needs no escapes, else literal, else escaped basic.
func formatKey(k string) string {
	bare := k != ""
	var single, double, back, control bool
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			bare = false
		}
		switch {
		case c == '\'':
			single = true
		case c == '"':
			double = true
		case c == '\\':
			back = true
		case c == '\t':
		case c <= 0x1f || c == 0x7f:
			control = true
		}
	}
	switch {
	case bare:
		return k
	case !control && !back && !double:
		return quoteBasic(k, false, false)
	case !control && !single:
		return "'" + k + "'"
	}
	return quoteBasic(k, false, false)
}

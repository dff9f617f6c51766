// Package codexhome reads what a codex executor keeps in its codex home and
// project directories: the configuration layers that environmentConfig/read
// returns and the skills that capabilities/discoverV2 reports. Shapes and
// rules follow the reference (codex 0.169.0); see
// docs/protocol.md.
package codexhome

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Table is a TOML table that keeps its keys in document order: the
// reference answers with layers re-serialized in the order the user wrote
// them, so a map would lose what the answer must show.
type Table struct {
	Keys []string
	Vals map[string]any // string, int64, float64, bool, Datetime, []any, *Table
}

func newTable() *Table { return &Table{Vals: map[string]any{}} }

func (t *Table) set(k string, v any) {
	if _, ok := t.Vals[k]; !ok {
		t.Keys = append(t.Keys, k)
	}
	t.Vals[k] = v
}

// Len is the number of keys.
func (t *Table) Len() int { return len(t.Keys) }

// Get returns the value of key k.
func (t *Table) Get(k string) (any, bool) {
	v, ok := t.Vals[k]
	return v, ok
}

// ParseTOML decodes a TOML document into an ordered Table. go-toml/v2
// validates the document (its Unmarshal enforces the TOML rules on
// redefinition, inline tables and arrays of tables); its parser's syntax
// tree gives the keys in document order and each scalar as written, which
// the re-serialization needs (the reference writes an offset as given:
// "+00:00" is not "Z").
func ParseTOML(doc string) (*Table, error) {
	var check map[string]any
	if err := toml.Unmarshal([]byte(doc), &check); err != nil {
		return nil, err
	}
	var p unstable.Parser
	p.Reset([]byte(doc))
	root := newTable()
	cur := root
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			cur = descend(root, keyOf(e.Key()), false)
		case unstable.ArrayTable:
			cur = descend(root, keyOf(e.Key()), true)
		case unstable.KeyValue:
			setKeyValue(cur, e)
		}
	}
	if err := p.Error(); err != nil {
		return nil, err
	}
	return root, nil
}

func keyOf(it unstable.Iterator) []string {
	var k []string
	for it.Next() {
		k = append(k, string(it.Node().Data))
	}
	return k
}

// child returns t's table k, created when missing; in an array of tables,
// its last element. The document was validated: k is never a plain value.
func child(t *Table, k string) *Table {
	switch v := t.Vals[k].(type) {
	case *Table:
		return v
	case []any:
		if len(v) > 0 {
			if last, ok := v[len(v)-1].(*Table); ok {
				return last
			}
		}
	}
	n := newTable()
	t.set(k, n)
	return n
}

// descend walks to the table a [header] names; for a [[header]], it
// appends a new element and returns it.
func descend(root *Table, key []string, array bool) *Table {
	t := root
	for _, k := range key[:len(key)-1] {
		t = child(t, k)
	}
	last := key[len(key)-1]
	if !array {
		return child(t, last)
	}
	arr, _ := t.Vals[last].([]any)
	n := newTable()
	t.set(last, append(arr, n))
	return n
}

func setKeyValue(t *Table, kv *unstable.Node) {
	key := keyOf(kv.Key())
	for _, k := range key[:len(key)-1] {
		t = child(t, k)
	}
	t.set(key[len(key)-1], nodeValue(kv.Value()))
}

func nodeValue(n *unstable.Node) any {
	switch n.Kind {
	case unstable.String:
		return string(n.Data)
	case unstable.Bool:
		return string(n.Data) == "true"
	case unstable.Integer:
		v, _ := strconv.ParseInt(strings.ReplaceAll(string(n.Data), "_", ""), 0, 64)
		return v
	case unstable.Float:
		return parseFloat(string(n.Data))
	case unstable.LocalDate, unstable.LocalTime, unstable.LocalDateTime, unstable.DateTime:
		return Datetime(normDatetime(string(n.Data)))
	case unstable.Array:
		out := []any{}
		for it := n.Children(); it.Next(); {
			out = append(out, nodeValue(it.Node()))
		}
		return out
	case unstable.InlineTable:
		t := newTable()
		for it := n.Children(); it.Next(); {
			setKeyValue(t, it.Node())
		}
		return t
	}
	return nil
}

func parseFloat(s string) float64 {
	s = strings.ReplaceAll(s, "_", "")
	switch strings.TrimLeft(s, "+-") {
	case "nan":
		return math.NaN()
	case "inf":
		if strings.HasPrefix(s, "-") {
			return math.Inf(-1)
		}
		return math.Inf(1)
	}
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// Datetime is a TOML date, time or date-time in the reference's written
// form: "T" between date and time, "Z" for a zero offset written as Z,
// other offsets as written, the fraction without trailing zeros (none when
// it is zero) and at most nanoseconds.
type Datetime string

func normDatetime(raw string) string {
	var b strings.Builder
	rest := raw
	if len(rest) >= 10 && rest[4] == '-' {
		b.WriteString(rest[:10])
		rest = rest[10:]
		if rest == "" {
			return b.String()
		}
		b.WriteByte('T')
		rest = rest[1:]
	}
	if len(rest) < 8 {
		return raw
	}
	b.WriteString(rest[:8])
	rest = rest[8:]
	if strings.HasPrefix(rest, ".") {
		i := 1
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		frac := rest[1:i]
		if len(frac) > 9 {
			frac = frac[:9]
		}
		if frac = strings.TrimRight(frac, "0"); frac != "" {
			b.WriteString("." + frac)
		}
		rest = rest[i:]
	}
	if rest == "z" {
		rest = "Z"
	}
	b.WriteString(rest)
	return b.String()
}

// Project keeps the parts of t named by paths, in t's order. A path whose
// parent tables exist but whose leaf does not keeps the (empty) parents, as
// the reference does ([["mcp_servers","s"]] gives "[mcp_servers]\n"). The
// paths are grouped by their first key once per table, so that the work is
// linear in the paths plus the keys (a client may send many paths).
func Project(t *Table, paths [][]string) *Table {
	type group struct {
		whole  bool
		deeper [][]string
	}
	groups := make(map[string]*group, len(paths))
	for _, p := range paths {
		if len(p) == 0 {
			continue
		}
		g := groups[p[0]]
		if g == nil {
			g = &group{}
			groups[p[0]] = g
		}
		if len(p) == 1 {
			g.whole, g.deeper = true, nil
		} else if !g.whole {
			g.deeper = append(g.deeper, p[1:])
		}
	}
	out := newTable()
	for _, k := range t.Keys {
		g := groups[k]
		if g == nil {
			continue
		}
		v := t.Vals[k]
		if sub, ok := v.(*Table); ok && !g.whole {
			out.set(k, Project(sub, g.deeper))
		} else {
			// The whole value; also when a path goes past a value that is
			// not a table (an array of tables included).
			out.set(k, v)
		}
	}
	return out
}

// keyPath formats a dotted header path.
func keyPath(path []string) string {
	var b strings.Builder
	for i, k := range path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(formatKey(k))
	}
	return b.String()
}

// String is for debugging.
func (t *Table) String() string { return fmt.Sprintf("%v", t.Vals) }

// Package codexhome reads what a codex executor keeps in its codex home and
// project directories: the configuration layers that environmentConfig/read
// returns and the skills that capabilities/discoverV2 reports. Shapes and
// rules follow the reference (codex 0.169.0); see
// shared/spec/parity-shapes.md.
package codexhome

import (
	"fmt"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// Table is a TOML table that keeps its keys in document order: the
// reference answers with layers re-serialized in the order the user wrote
// them, so a map would lose what the answer must show.
type Table struct {
	Keys []string
	Vals map[string]any // string, int64, float64, bool, time.Time, []any, *Table
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

// ParseTOML decodes a TOML document into an ordered Table. The decoding is
// BurntSushi/toml's; the order comes from its MetaData.Keys, which lists
// every key in document order (an array-of-tables key once per element).
func ParseTOML(doc string) (*Table, error) {
	var m map[string]any
	md, err := toml.Decode(doc, &m)
	if err != nil {
		return nil, err
	}
	keys := md.Keys()
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	o := orderer{keys: keys, md: md}
	return o.table(m, nil, all), nil
}

// orderer rebuilds order from the decoder's key list. in is the subset of
// key indices (ascending) that lie inside the value being converted and
// start with its path; a child's position is the first such key naming it.
type orderer struct {
	keys []toml.Key
	md   toml.MetaData
}

func (o *orderer) table(m map[string]any, path []string, in []int) *Table {
	t := newTable()
	first := map[string]int{}
	var order []string
	sub := map[string][]int{}
	depth := len(path)
	for _, i := range in {
		k := o.keys[i]
		if len(k) <= depth {
			continue
		}
		c := k[depth]
		if _, ok := first[c]; !ok {
			first[c] = i
			order = append(order, c)
		}
		sub[c] = append(sub[c], i)
	}
	for _, c := range order {
		if v, ok := m[c]; ok {
			t.set(c, o.value(v, append(path[:depth:depth], c), sub[c]))
		}
	}
	// Keys the list did not name (not expected) keep a stable order.
	var rest []string
	for c := range m {
		if _, ok := t.Vals[c]; !ok {
			rest = append(rest, c)
		}
	}
	sortStrings(rest)
	for _, c := range rest {
		t.set(c, o.value(m[c], append(path[:depth:depth], c), nil))
	}
	return t
}

func (o *orderer) value(v any, path []string, in []int) any {
	switch x := v.(type) {
	case map[string]any:
		return o.table(x, path, in)
	case []map[string]any:
		// An array of tables: each element's keys lie between its own
		// marker (the array's key, listed once per element) and the next.
		var marks []int
		for _, i := range in {
			if len(o.keys[i]) == len(path) {
				marks = append(marks, i)
			}
		}
		out := make([]any, len(x))
		for e, el := range x {
			var lo, hi = -1, 1 << 62
			if len(marks) == len(x) {
				lo = marks[e]
				if e+1 < len(marks) {
					hi = marks[e+1]
				}
			}
			// in is ascending: the element's keys are one run of it.
			a := sort.SearchInts(in, lo+1)
			b := sort.SearchInts(in, hi)
			out[e] = o.table(el, path, in[a:b])
		}
		return out
	case []any:
		// An inline array: its tables share one key list (the decoder
		// does not mark inline elements), so they share one order.
		out := make([]any, len(x))
		for e, el := range x {
			out[e] = o.value(el, path, in)
		}
		return out
	default:
		return v
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
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

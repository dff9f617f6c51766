package interop

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTOMLDifferential writes random TOML documents (valid ones mostly:
// quoted and dotted keys, strings with quotes, backslashes, newlines and
// control characters, every number and date-time form, arrays, inline
// tables, tables, arrays of tables) to one config.toml read by both servers
// (it is read on every request) and requires environmentConfig/read to
// answer byte for byte alike, or both to refuse the document.
func TestTOMLDifferential(t *testing.T) {
	if os.Getenv("EXEC_SERVER_REFERENCE") == "" || len(targets) < 2 {
		t.Skip("EXEC_SERVER_REFERENCE is not set: nothing to compare with")
	}
	const docs = 200
	home := filepath.Join(mkScratch(t, scratchBase(t), "toml-"), "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	clients := map[string]*Client{}
	for _, tg := range targets {
		args := []string{"CODEX_HOME=" + home, tg.bin}
		if tg.ref {
			args = []string{"CODEX_HOME=" + home, "RUST_LOG=error", tg.bin, "exec-server"}
		}
		srv, err := StartServer(ctx, Spec{Name: tg.name, Bin: "/usr/bin/env", Args: args}, Stdio)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		c, err := srv.Dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Initialize(ctx); err != nil {
			t.Fatal(err)
		}
		clients[tg.name] = c
	}
	same, refused, layers := 0, 0, 0
	for seed := uint64(0); seed < docs; seed++ {
		g := tomlGen{r: rand.New(rand.NewPCG(seed, 12))}
		doc, keys := g.doc()
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		var paths [][]string
		for _, k := range keys {
			paths = append(paths, []string{k})
		}
		params := map[string]any{"cwd": FileURI(home), "configPaths": paths, "requirementsPaths": [][]string{}}
		ans := map[string]*Msg{}
		for name, c := range clients {
			m, err := c.CallMsg(ctx, "environmentConfig/read", params)
			if err != nil {
				t.Fatal(err)
			}
			ans[name] = m
		}
		ref, ours := ans["reference"], ans["ours"]
		switch {
		case ref.Error != nil && ours.Error != nil:
			refused++
		case (ref.Error != nil) != (ours.Error != nil):
			t.Errorf("seed %d: one server refused the document\n%s\nreference %s\nours      %s", seed, doc, ref.Raw, ours.Raw)
		case string(ref.Result) != string(ours.Result):
			t.Errorf("seed %d: answers differ\n%s\nreference %s\nours      %s", seed, doc, ref.Result, ours.Result)
		default:
			same++
			if strings.Contains(string(ours.Result), `"layers":[{`) {
				layers++
			}
		}
	}
	t.Logf("%d documents: %d answered alike (%d with a layer), %d refused by both", docs, same, layers, refused)
	if layers < docs/2 {
		t.Errorf("only %d of %d answers held a layer: the generator is not testing much", layers, docs)
	}
}

// tomlGen writes random TOML, mostly valid; keys() are the top-level names.
type tomlGen struct {
	r    *rand.Rand
	keys []string
}

var tomlChars = []string{"a", "b", "Z", "0", "_", "-", " ", `"`, "'", "''", "'''", `\`, "\n", "\t", "\r", "\x01", "\x7f", "é", "☃", "#", "=", ".", "[", "]", `""`, `"""`}

func (g *tomlGen) str(n int) string {
	var b strings.Builder
	for range g.r.IntN(n + 1) {
		b.WriteString(tomlChars[g.r.IntN(len(tomlChars))])
	}
	return b.String()
}

// quote writes s as a basic string, escaping what must be.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, c)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func (g *tomlGen) pick(s ...string) string { return s[g.r.IntN(len(s))] }

func (g *tomlGen) key() string {
	switch x := g.r.Float64(); {
	case x < 0.1:
		return g.pick("d.e", "d.f", `m."q.q"`)
	case x < 0.75:
		return g.pick("a", "b", "c", "x", "y", "zeta", "mcp_servers", "k-1", "k_2", "Z9")
	}
	return quote(g.str(4))
}

func (g *tomlGen) scalar() string {
	switch g.r.IntN(10) {
	case 0, 1, 2, 3:
		return quote(g.str(8))
	case 4:
		return fmt.Sprint(g.r.Int64N(2_000_000_000_000) - 1_000_000_000_000)
	case 5:
		return g.pick("1.5", "-0.0", "1e10", "3.14159", "1e-7", "2.5e300", "-inf", "nan", "0.1", "100.0", "6.02e23", "1_000.5")
	case 6:
		return g.pick("true", "false")
	case 7:
		return g.pick("1979-05-27T07:32:00Z", "1979-05-27T00:32:00.999999-07:00", "1979-05-27T07:32:00", "1979-05-27",
			"07:32:00", "00:32:00.5", "1979-05-27 07:32:00.120Z", "1979-05-27T07:32:00+00:00")
	case 8:
		return "'" + g.pick("lit", `a\b`, `C:\x`, `q"q`, "") + "'"
	}
	return fmt.Sprintf("0x%x", g.r.IntN(4096))
}

func (g *tomlGen) value(depth int) string {
	x := g.r.Float64()
	if depth < 2 && x < 0.15 {
		var el []string
		for range g.r.IntN(4) {
			el = append(el, g.value(depth+1))
		}
		return "[" + strings.Join(el, ", ") + "]"
	}
	if depth < 2 && x < 0.25 {
		seen := map[string]bool{}
		var kv []string
		for range g.r.IntN(4) {
			if k := g.key(); !seen[k] {
				seen[k] = true
				kv = append(kv, k+" = "+g.value(depth+1))
			}
		}
		return "{" + strings.Join(kv, ", ") + "}"
	}
	return g.scalar()
}

func (g *tomlGen) pairs(lines []string, top bool) []string {
	seen := map[string]bool{}
	for range g.r.IntN(4) + boolToInt(top) {
		k := g.key()
		if seen[k] {
			continue
		}
		seen[k] = true
		lines = append(lines, k+" = "+g.value(0))
		if top {
			name := strings.SplitN(k, ".", 2)[0]
			if strings.HasPrefix(name, `"`) {
				name = unquoteKey(name)
			}
			g.keys = append(g.keys, name)
		}
	}
	return lines
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unquoteKey undoes quote for the key list (a generated quoted key has no
// dot, so splitting on the first dot above kept it whole).
func unquoteKey(q string) string {
	var s string
	if _, err := fmt.Sscanf(q, "%q", &s); err != nil {
		return q
	}
	return s
}

func (g *tomlGen) doc() (string, []string) {
	lines := g.pairs(nil, true)
	tables := map[string]bool{}
	for i := range g.r.IntN(5) {
		if g.r.Float64() < 0.3 {
			name := fmt.Sprintf("arr%d", i)
			g.keys = append(g.keys, name)
			for j := range g.r.IntN(2) + 1 {
				lines = append(lines, "[["+name+"]]")
				lines = append(lines, fmt.Sprintf("%s%d = %s", g.pick("x", "y"), j, g.value(0)))
			}
			continue
		}
		name := g.pick(fmt.Sprintf("mcp_servers.s%d", i), fmt.Sprintf("t%d", i), fmt.Sprintf("t%d.sub", i), fmt.Sprintf(`"q t%d"`, i))
		if tables[name] {
			continue
		}
		tables[name] = true
		first := strings.SplitN(name, ".", 2)[0]
		if strings.HasPrefix(first, `"`) {
			first = unquoteKey(name)
		}
		g.keys = append(g.keys, first)
		lines = append(lines, "["+name+"]")
		lines = g.pairs(lines, false)
	}
	return strings.Join(lines, "\n") + "\n", g.keys
}

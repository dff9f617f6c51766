package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
)

// capRootsFixture builds, under dir, the tree the reference was probed
// with (testdata/caproots: requests.jsonl and the reference 0.171's
// answers, reference.jsonl, recorded with `codex exec-server --listen
// stdio`, the fixture's path replaced by @ROOT@).
func capRootsFixture(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		"afile":                                   "",
		"croot/.codex-plugin/plugin.json":         "{\"name\":\"demo\"}\n",
		"croot/skills/deploy/SKILL.md":            "---\nname: deploy\ndescription: d\n---\nbody\n",
		"croot/skills/deploy/agents/openai.yaml":  "interface:\n  display_name: D\n",
		"croot/skills/build/SKILL.md":             "---\nname: build\ndescription: b\n---\n",
		"croot/.mcp.json":                         "{\"mcpServers\":{}}\n",
		"croot/nested/.claude-plugin/plugin.json": "{\"name\":\"nested\"}\n",
		"croot/nested/skills/x/SKILL.md":          "x\n",
		"anc/.cursor-plugin/plugin.json":          `{"name":"anc"}`,
		"anc/sub/skills/s1/SKILL.md":              "s1",
		"decl/.codex-plugin/plugin.json":          `{"name":"decl","mcpServers":"./m.json","apps":"../apps.json"}`,
		"decl/m.json":                             `{"m":1}`,
		"d2/.codex-plugin/plugin.json":            `{"name":"d2","mcpServers":{"a":{}},"apps":"./sub/../x.json"}`,
		"d2/skills/big/SKILL.md":                  strings.Repeat("a", 1<<20+1),
		"d2/skills/bin/SKILL.md":                  "\xff\xfe",
		"d3/.codex-plugin/plugin.json":            `{"name":"d3","apps":"./","mcpServers":"./missing.json"}`,
		"d4/.codex-plugin/plugin.json":            "not json",
		"d5/.claude-plugin/plugin.json":           `{"name":"claude"}`,
		"d5/.codex-plugin/plugin.json":            `{"name":"codex","apps":"./a.json"}`,
		"d5/a.json":                               "{}",
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCapabilityRootsReference: capabilityRoots/discoverV1 answers every
// probe byte for byte as the reference 0.171 did: plugin manifests in
// priority order, declared and default MCP/Apps files, skills with their
// metadata, nested and ancestor namespace manifests, the limits' and
// declarations' warnings, root errors, params errors, and the root's
// sandbox: a deny entry hides a directory from the walk (a warning), a
// policy that does not grant the root makes it missing.
func TestCapabilityRootsReference(t *testing.T) {
	if s := sandbox.Probe(); !s.Available {
		t.Skipf("the probes include sandboxed roots; no sandbox here: missing %s", s.Missing)
	}
	dir := t.TempDir()
	capRootsFixture(t, dir)
	root := strings.TrimPrefix(jsonString("file://"+dir), `"file://`)
	root = strings.TrimSuffix(root, `"`)
	read := func(name string) []string {
		b, err := os.ReadFile(filepath.Join("testdata", "caproots", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(strings.ReplaceAll(string(b), "@ROOT@", root)), "\n")
	}
	want := map[string]string{}
	for _, line := range read("reference.jsonl") {
		var w wire
		if err := json.Unmarshal([]byte(line), &w); err != nil {
			t.Fatal(err)
		}
		want[string(w.ID)] = line
	}
	p := stdioPeer(t, New(Config{}))
	if code, msg := p.callErr("capabilityRoots/discoverV1", map[string]any{"roots": []any{}}); code != -32600 || msg != "client must call initialize before using capability discovery methods" {
		t.Errorf("before initialize: %d %q", code, msg)
	}
	p.init()
	reqs := read("requests.jsonl")
	// 129 roots: one too many.
	var many []map[string]string
	for i := range 129 {
		many = append(many, map[string]string{"id": fmt.Sprint(i), "path": "file://" + dir + "/d2"})
	}
	b, _ := json.Marshal(map[string]any{"id": 103, "method": "capabilityRoots/discoverV1", "params": map[string]any{"roots": many}})
	reqs = append(reqs, string(b))
	for _, req := range reqs {
		var r wire
		if err := json.Unmarshal([]byte(req), &r); err != nil {
			t.Fatal(err)
		}
		p.raw(req)
		got := p.response(string(r.ID)).raw
		if w := want[string(r.ID)]; got != w {
			t.Errorf("request %s:\n got %s\nwant %s", r.ID, got, w)
		}
	}
}

// TestCapabilityRootsSandboxFailClosed: when the kernel sandbox is missing
// a feature, a root whose policy narrows reads is not discovered at all
// (its error says why); the same root without a policy still is. Not
// parallel: it sets the simulation hook in the environment.
func TestCapabilityRootsSandboxFailClosed(t *testing.T) {
	if s := sandbox.Probe(); !s.Available {
		t.Skipf("no sandbox to simulate a missing feature of: missing %s", s.Missing)
	}
	dir := t.TempDir()
	capRootsFixture(t, dir)
	t.Setenv(sandbox.SimulateEnv, "landlock")
	p := stdioPeer(t, New(Config{}))
	p.init()
	d := "file://" + dir
	restricted := json.RawMessage(`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"` + d + `/decl"},"access":"read"}]}},"cwd":"` + d + `","windowsSandboxLevel":"disabled"}`)
	res := p.call("capabilityRoots/discoverV1", map[string]any{"roots": []any{
		map[string]any{"id": "narrow", "path": d + "/decl", "sandbox": restricted},
		map[string]any{"id": "open", "path": d + "/decl"},
	}})
	var r struct {
		Roots []struct {
			Error  *string         `json:"error"`
			Plugin json.RawMessage `json:"plugin"`
		} `json:"roots"`
	}
	mustUnmarshal(t, res, &r)
	if len(r.Roots) != 2 || r.Roots[0].Error == nil || !strings.Contains(strings.ToLower(*r.Roots[0].Error), "filesystem sandbox is unavailable on this executor: missing landlock") ||
		!bytes.Equal(r.Roots[0].Plugin, []byte("null")) {
		t.Errorf("narrow root without a sandbox: %s", res)
	}
	if len(r.Roots) == 2 && (r.Roots[1].Error != nil || bytes.Equal(r.Roots[1].Plugin, []byte("null"))) {
		t.Errorf("root without a policy: %s", res)
	}
}

// FuzzCapabilityRootsDecode: the params decoder never panics, and what it
// accepts names only parseable roots.
func FuzzCapabilityRootsDecode(f *testing.F) {
	for _, s := range []string{
		`{"roots":[]}`, `{"roots":[{"id":"a","path":"file:///x"}]}`, `{"roots":[{"id":"a","path":"/x"}]}`,
		`{"roots":[{"id":"a","path":"file:///x","sandbox":{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}}]}`,
		`{"roots":null}`, `{}`, `[]`, `null`, `{"roots":[{"path":"file:///x"}]}`, `{"roots":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := decodeCapabilityRoots(raw)
		if err != nil {
			return
		}
		for _, r := range p.(*protocol.CapabilityRootsDiscoverParams).Roots {
			if _, err := fileuri.Parse(r.Path); err != nil {
				t.Fatalf("accepted root path %q: %v", r.Path, err)
			}
		}
	})
}

package interop

import (
	"encoding/json"
	"os"
	"path/filepath"
)

func init() {
	scenarios = append(scenarios, scenario{name: "capability-roots", run: capabilityRoots})
}

// capabilityRoots: capabilityRoots/discoverV1 of a plugin root (manifest,
// default .mcp.json, skills with metadata, a nested plugin), a root inside
// a plugin (the ancestor's manifest namespaces it), a root whose manifest
// declares paths (one refused) and a missing root, without a sandbox (the
// reference's sandbox needs a CODEX_HOME outside the temp dir; sandboxed
// roots are pinned against recorded reference answers in
// server/caproots_test.go). The answer is compared byte for byte.
func capabilityRoots(e *env) {
	files := map[string]string{
		"p/.codex-plugin/plugin.json":    "{\"name\":\"demo\"}\n",
		"p/.mcp.json":                    "{}",
		"p/skills/b/SKILL.md":            "b",
		"p/skills/a/SKILL.md":            "a",
		"p/skills/a/agents/openai.yaml":  "m",
		"p/n/.claude-plugin/plugin.json": "{\"name\":\"n\"}",
		"p/n/skills/x/SKILL.md":          "x",
		"q/.codex-plugin/plugin.json":    `{"mcpServers":"./m.json","apps":"apps.json"}`,
		"q/m.json":                       "{}",
		"anc/.cursor-plugin/plugin.json": "{}",
		"anc/sub/skills/s/SKILL.md":      "s",
	}
	for name, data := range files {
		p := filepath.Join(e.dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	var res json.RawMessage
	e.callInto("capabilityRoots/discoverV1", map[string]any{"roots": []any{
		map[string]any{"id": "p@1", "path": e.uri("p")},
		map[string]any{"id": "anc", "path": e.uri("anc/sub"), "sandbox": nil},
		map[string]any{"id": "q", "path": e.uri("q")},
		map[string]any{"id": "gone", "path": e.uri("gone")},
	}}, &res)
	u := e.uri
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	tf := func(name, contents string) string {
		return `{"path":` + q(u(name)) + `,"contents":` + q(contents) + `}`
	}
	want := `{"roots":[` +
		`{"id":"p@1","path":` + q(u("p")) + `,"plugin":{"manifest":` + tf("p/.codex-plugin/plugin.json", "{\"name\":\"demo\"}\n") +
		`,"mcpConfig":` + tf("p/.mcp.json", "{}") + `,"appsConfig":null},"skills":[` +
		`{"instructions":` + tf("p/n/skills/x/SKILL.md", "x") + `,"metadata":null},` +
		`{"instructions":` + tf("p/skills/a/SKILL.md", "a") + `,"metadata":` + tf("p/skills/a/agents/openai.yaml", "m") + `},` +
		`{"instructions":` + tf("p/skills/b/SKILL.md", "b") + `,"metadata":null}],` +
		`"namespaceManifests":[` + tf("p/.codex-plugin/plugin.json", "{\"name\":\"demo\"}\n") + `,` + tf("p/n/.claude-plugin/plugin.json", "{\"name\":\"n\"}") + `],` +
		`"warnings":[],"error":null},` +
		`{"id":"anc","path":` + q(u("anc/sub")) + `,"plugin":null,"skills":[{"instructions":` + tf("anc/sub/skills/s/SKILL.md", "s") + `,"metadata":null}],` +
		`"namespaceManifests":[` + tf("anc/.cursor-plugin/plugin.json", "{}") + `],"warnings":[],"error":null},` +
		`{"id":"q","path":` + q(u("q")) + `,"plugin":{"manifest":` + tf("q/.codex-plugin/plugin.json", `{"mcpServers":"./m.json","apps":"apps.json"}`) +
		`,"mcpConfig":` + tf("q/m.json", "{}") + `,"appsConfig":null},"skills":[],"namespaceManifests":[` + tf("q/.codex-plugin/plugin.json", `{"mcpServers":"./m.json","apps":"apps.json"}`) + `],` +
		`"warnings":[` + q("ignoring apps in "+u("q/.codex-plugin/plugin.json")+": path must start with `./`") + `],"error":null},` +
		`{"id":"gone","path":` + q(u("gone")) + `,"plugin":null,"skills":[],"namespaceManifests":[],"warnings":[],` +
		`"error":` + q("failed to inspect capability root "+u("gone")+": No such file or directory (os error 2)") + `}]}`
	if string(res) != want {
		e.t.Fatalf("capabilityRoots/discoverV1:\n got %s\nwant %s", res, want)
	}
}

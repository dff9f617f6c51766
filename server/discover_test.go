package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/execgo/exec-server/fileuri"
)

// TestCapabilitiesDiscoverV2: the reference's exact answer for an empty
// home and for one skill in $CODEX_HOME/skills; params errors.
func TestCapabilitiesDiscoverV2(t *testing.T) {
	home := t.TempDir()
	t.Setenv("CODEX_HOME", home)
	p := stdioPeer(t, New(Config{}))
	p.init()
	if code, msg := p.callErr("capabilities/discoverV2", map[string]any{}); code != -32602 || msg != "missing field `cwd`" {
		t.Errorf("no cwd: %d %q", code, msg)
	}
	if code, msg := p.callErr("capabilities/discoverV2", map[string]any{"cwd": "/x"}); code != -32602 || msg != "invalid URI: relative URL without a base" {
		t.Errorf("native cwd: %d %q", code, msg)
	}
	params := map[string]any{"cwd": fileuri.FromPath(t.TempDir()), "sandbox": nil}
	if got := string(p.call("capabilities/discoverV2", params)); got != `{"plugins":[],"skills":[],"warnings":[]}` {
		t.Errorf("empty home: %s", got)
	}
	skill := filepath.Join(home, "skills", "rc-home-skill", "SKILL.md")
	if err := os.MkdirAll(filepath.Dir(skill), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(skill, []byte("---\nname: rc-home-skill\ndescription: A home skill for discovery.\n---\n# body\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := `{"plugins":[],"skills":[{"name":"rc-home-skill","description":"A home skill for discovery.","shortDescription":null,` +
		`"path":` + jsonString(fileuri.FromPath(skill)) + `,"discoveryRoot":{"id":"codex-home-skills","path":` +
		jsonString(fileuri.FromPath(filepath.Join(home, "skills"))) + `},"dependencies":null,"policy":null}],"warnings":[]}`
	if got := string(p.call("capabilities/discoverV2", params)); got != want {
		t.Errorf("one skill:\n got %s\nwant %s", got, want)
	}
}

package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgo/exec-server/fileuri"
)

// TestEnvironmentConfigRead: the reference's shape and errors, the user
// layer from $CODEX_HOME/config.toml re-read on every request.
func TestEnvironmentConfigRead(t *testing.T) {
	home := t.TempDir()
	t.Setenv("CODEX_HOME", home)
	cwd := t.TempDir()
	p := stdioPeer(t, New(Config{}))
	p.init()
	for _, c := range []struct {
		params any
		want   string
	}{
		{nil, "invalid type: null, expected struct EnvironmentConfigReadParams"},
		{map[string]any{"configPaths": [][]string{{"a"}}, "requirementsPaths": [][]string{}}, "missing field `cwd`"},
		{map[string]any{"cwd": fileuri.FromPath(cwd), "configPaths": [][]string{{"a"}}}, "missing field `requirementsPaths`"},
		{map[string]any{"cwd": fileuri.FromPath(cwd), "configPaths": [][]string{}, "requirementsPaths": [][]string{}}, "at least one config or requirements path is required"},
		{map[string]any{"cwd": fileuri.FromPath(cwd), "configPaths": [][]string{{}}, "requirementsPaths": [][]string{}}, "TOML paths must contain at least one key segment"},
		{map[string]any{"cwd": cwd, "configPaths": [][]string{{"a"}}, "requirementsPaths": [][]string{}}, "invalid URI: relative URL without a base"},
	} {
		if code, msg := p.callErr("environmentConfig/read", c.params); code != -32602 || msg != c.want {
			t.Errorf("%v: %d %q, want -32602 %q", c.params, code, msg, c.want)
		}
	}
	params := map[string]any{"cwd": fileuri.FromPath(cwd), "configPaths": [][]string{{"mcp_servers"}}, "requirementsPaths": [][]string{{"mcp_servers"}}}
	host, _ := os.Hostname()
	userHome, _ := os.UserHomeDir()
	prefix := `{"userHomeDir":` + jsonString(fileuri.FromPath(userHome)) + `,"codexHomeDir":` + jsonString(fileuri.FromPath(home)) +
		`,"hostname":` + jsonString(host) + `,"config":{"layers":[`
	suffix := `],"cloudInsertionIndex":0},"requirements":{"layers":[],"cloudInsertionIndex":0}}`
	if got, want := string(p.call("environmentConfig/read", params)), prefix+suffix; got != want {
		t.Errorf("empty home:\n got %s\nwant %s", got, want)
	}
	cfg := filepath.Join(home, "config.toml")
	if err := os.WriteFile(cfg, []byte("model = \"m\"\n[mcp_servers.x]\nurl = \"http://127.0.0.1:9/mcp\"\n[mcp_servers.y]\ncommand = \"/bin/true\"\nargs = [\"a\", \"b\"]\n[mcp_servers.y.env]\nK = \"V\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	layer := `{"source":` + jsonString("user ("+cfg+")") + `,"baseDir":` + jsonString(fileuri.FromPath(home)) +
		`,"toml":"[mcp_servers.x]\nurl = \"http://127.0.0.1:9/mcp\"\n\n[mcp_servers.y]\ncommand = \"/bin/true\"\nargs = [\"a\", \"b\"]\n\n[mcp_servers.y.env]\nK = \"V\"\n"}`
	if got, want := string(p.call("environmentConfig/read", params)), prefix+layer+suffix; got != want {
		t.Errorf("with mcp_servers:\n got %s\nwant %s", got, want)
	}
	if err := os.WriteFile(cfg, []byte("model = \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, msg := p.callErr("environmentConfig/read", params); code != -32603 || !strings.HasPrefix(msg, "failed to load executor-local config: "+cfg) {
		t.Errorf("broken config: %d %q", code, msg)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestCodexHomeResolution: CODEX_HOME must be an existing directory (the
// reference's texts otherwise, in both methods) and is reported with its
// symbolic links resolved.
func TestCodexHomeResolution(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := stdioPeer(t, New(Config{}))
	p.init()
	read := map[string]any{"cwd": fileuri.FromPath(dir), "configPaths": [][]string{{"mcp_servers"}}, "requirementsPaths": [][]string{}}
	discover := map[string]any{"cwd": fileuri.FromPath(dir)}

	t.Setenv("CODEX_HOME", link)
	var res struct {
		CodexHomeDir string `json:"codexHomeDir"`
	}
	mustUnmarshal(t, p.call("environmentConfig/read", read), &res)
	if res.CodexHomeDir != fileuri.FromPath(real) {
		t.Errorf("codexHomeDir %s, want the link resolved (%s)", res.CodexHomeDir, real)
	}
	for _, c := range []struct{ home, want string }{
		{filepath.Join(dir, "missing"), `CODEX_HOME points to "` + filepath.Join(dir, "missing") + `", but that path does not exist`},
		{file, `CODEX_HOME points to "` + file + `", but that path is not a directory`},
	} {
		t.Setenv("CODEX_HOME", c.home)
		if code, msg := p.callErr("environmentConfig/read", read); code != -32603 || msg != "failed to find Codex home: "+c.want {
			t.Errorf("environmentConfig/read with CODEX_HOME=%s: %d %q", c.home, code, msg)
		}
		if code, msg := p.callErr("capabilities/discoverV2", discover); code != -32603 || msg != c.want {
			t.Errorf("capabilities/discoverV2 with CODEX_HOME=%s: %d %q", c.home, code, msg)
		}
	}
}

package codexhome

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// MaxConfigBytes bounds one config file: the server reads them on every
// request, for any client.
const MaxConfigBytes = 4 << 20

// Home returns the codex home: $CODEX_HOME when set (it must be an
// existing directory; symbolic links resolved, as the reference), else
// ~/.codex. The error texts are the reference's.
func Home() (string, error) {
	h := os.Getenv("CODEX_HOME")
	if h == "" {
		home, _ := os.UserHomeDir()
		return filepath.Join(home, ".codex"), nil
	}
	st, err := os.Stat(h)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("CODEX_HOME points to %q, but that path does not exist", h)
	case err != nil:
		return "", fmt.Errorf("CODEX_HOME points to %q: %v", h, err)
	case !st.IsDir():
		return "", fmt.Errorf("CODEX_HOME points to %q, but that path is not a directory", h)
	}
	abs, err := filepath.Abs(h)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return abs, nil
}

// Layer is one configuration source, lowest precedence first.
type Layer struct {
	Source  string // "user (/abs/config.toml)" or "project (/abs/.codex/config.toml)"
	BaseDir string // the directory the layer's relative paths are relative to
	Config  *Table
}

// projectDenylist are the keys a project's config may not set (they choose
// where credentials go or which commands run); the reference drops them
// from project layers. Observed on 0.169.0: exactly these twelve.
var projectDenylist = []string{
	"openai_base_url", "chatgpt_base_url", "apps_mcp_product_sku", "responses_api_metadata",
	"model_provider", "model_providers", "notify", "profile", "profiles",
	"experimental_realtime_webrtc_call_base_url", "experimental_realtime_ws_base_url", "otel",
}

// Layers reads the configuration layers that apply in cwd: the user's
// $CODEX_HOME/config.toml, then, for each directory from the project root
// down to cwd that has a .codex directory, its .codex/config.toml when that
// directory is trusted. Untrusted project layers are left out (the
// reference keeps them as disabled layers and does not report them).
//
// The project root is the nearest ancestor of cwd (cwd included) that has a
// .git entry, else cwd. A directory is trusted when the user config's
// [projects."DIR"] says trust_level = "trusted" for the directory itself,
// else for the project root.
func Layers(home, cwd string) ([]Layer, error) {
	var layers []Layer
	userFile := filepath.Join(home, "config.toml")
	user, err := readConfig(userFile)
	if err != nil {
		return nil, err
	}
	if user != nil {
		layers = append(layers, Layer{Source: "user (" + userFile + ")", BaseDir: home, Config: user})
	} else {
		user = newTable()
	}
	trust := trustLevels(user)
	root := projectRoot(cwd)
	var dirs []string
	for d := cwd; ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == root || d == filepath.Dir(d) {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		dir := dirs[i]
		dotCodex := filepath.Join(dir, ".codex")
		if st, err := os.Stat(dotCodex); err != nil || !st.IsDir() || dotCodex == home {
			continue
		}
		level, ok := trustOf(trust, dir)
		if !ok {
			level, _ = trustOf(trust, root)
		}
		if level != "trusted" {
			continue
		}
		file := filepath.Join(dotCodex, "config.toml")
		cfg, err := readConfig(file)
		var pe *parseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("Error parsing project config file %s: %s", file, pe.framed())
		}
		if err != nil {
			return nil, err
		}
		if cfg == nil {
			continue // an empty layer; it projects to nothing
		}
		for _, k := range projectDenylist {
			if _, ok := cfg.Vals[k]; ok {
				delete(cfg.Vals, k)
				keys := cfg.Keys[:0]
				for _, kk := range cfg.Keys {
					if kk != k {
						keys = append(keys, kk)
					}
				}
				cfg.Keys = keys
			}
		}
		layers = append(layers, Layer{Source: "project (" + file + ")", BaseDir: dotCodex, Config: cfg})
	}
	return layers, nil
}

// readConfig parses one config file; a missing file is (nil, nil).
func readConfig(file string) (*Table, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", file, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", file, err)
	}
	if len(b) > MaxConfigBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", file, MaxConfigBytes)
	}
	t, err := ParseTOML(string(b))
	if err != nil {
		pe := &parseError{file: file, src: b, msg: strings.TrimPrefix(err.Error(), "toml: ")}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			pe.line, pe.col = de.Position()
		}
		return nil, pe
	}
	return t, nil
}

// parseError is a config file that does not parse, worded as the
// reference words it: "PATH:LINE:COLUMN: message" for the user's file, a
// framed excerpt for a project's (the message itself is this parser's).
type parseError struct {
	file      string
	src       []byte
	line, col int
	msg       string
}

func (e *parseError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.file, e.line, e.col, e.msg)
}

func (e *parseError) framed() string {
	lines := strings.Split(string(e.src), "\n")
	text := ""
	if e.line >= 1 && e.line <= len(lines) {
		text = strings.TrimSuffix(lines[e.line-1], "\r")
	}
	n := strconv.Itoa(e.line)
	pad := strings.Repeat(" ", len(n))
	return fmt.Sprintf("TOML parse error at line %d, column %d\n%s |\n%s | %s\n%s | %s^\n%s\n",
		e.line, e.col, pad, n, text, pad, strings.Repeat(" ", max(e.col-1, 0)), e.msg)
}

// trustLevels reads [projects."DIR"] trust_level from the user config.
func trustLevels(user *Table) map[string]string {
	out := map[string]string{}
	p, _ := user.Vals["projects"].(*Table)
	if p == nil {
		return out
	}
	for _, dir := range p.Keys {
		if t, ok := p.Vals[dir].(*Table); ok {
			if lv, ok := t.Vals["trust_level"].(string); ok {
				out[dir] = lv
			}
		}
	}
	return out
}

// trustOf looks dir up by its canonical path, then as written (the
// reference's order).
func trustOf(trust map[string]string, dir string) (string, bool) {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		if lv, ok := trust[real]; ok {
			return lv, true
		}
	}
	lv, ok := trust[dir]
	return lv, ok
}

// projectRoot is the nearest ancestor of cwd with a .git entry, else cwd.
// A .git directory counts only when it holds HEAD: the reference passes over
// an empty one (observed), while any .git file (a worktree's) counts.
func projectRoot(cwd string) string {
	for d := cwd; ; d = filepath.Dir(d) {
		if st, err := os.Stat(filepath.Join(d, ".git")); err == nil {
			if !st.IsDir() {
				return d
			}
			if _, err := os.Stat(filepath.Join(d, ".git", "HEAD")); err == nil {
				return d
			}
		}
		if d == filepath.Dir(d) {
			return cwd
		}
	}
}

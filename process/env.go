package process

import (
	"bytes"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/execgo/exec-server/protocol"
)

// stripped variables never reach a child: they configure the server.
var stripped = map[string]bool{"CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE": true}

// envPolicy is the optional shell-environment policy of process/start.
type envPolicy struct {
	Inherit               string            `json:"inherit"` // all | core | none
	IgnoreDefaultExcludes bool              `json:"ignoreDefaultExcludes"`
	Exclude               []string          `json:"exclude"`
	Set                   map[string]string `json:"set"`
	IncludeOnly           []string          `json:"includeOnly"`
}

// coreVars are what inherit "core" keeps: the reference's set (observed:
// LC_ALL and LC_CTYPE are in it, TERM and USERNAME are not).
var coreVars = []string{"HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "PATH", "SHELL", "TEMP", "TMP", "TMPDIR", "USER"}

// defaultExcludes keep credentials out of an inherited environment.
var defaultExcludes = []string{"*KEY*", "*SECRET*", "*TOKEN*"}

// buildEnv returns the child's environment: exactly env, unless a policy
// asks to start from the server's own environment, with env overlaid.
func buildEnv(env map[string]string, rawPolicy json.RawMessage) ([]string, error) {
	vars := map[string]string{}
	rawPolicy = bytes.TrimSpace(rawPolicy)
	if len(rawPolicy) > 0 && !bytes.Equal(rawPolicy, []byte("null")) {
		var pol envPolicy
		if err := protocol.DecodeParams(rawPolicy, &pol, "EnvPolicy"); err != nil {
			return nil, err
		}
		switch pol.Inherit {
		case "", "all":
			for _, kv := range os.Environ() {
				if k, v, ok := strings.Cut(kv, "="); ok {
					vars[k] = v
				}
			}
		case "core":
			for _, k := range coreVars {
				if v, ok := os.LookupEnv(k); ok {
					vars[k] = v
				}
			}
		case "none":
		default:
			return nil, protocol.InvalidParams("unknown variant `%s`, expected one of `core`, `all`, `none`", pol.Inherit)
		}
		excludes := pol.Exclude
		if !pol.IgnoreDefaultExcludes {
			excludes = append(excludes, defaultExcludes...)
		}
		for k := range vars {
			if matchAny(excludes, k) {
				delete(vars, k)
			}
		}
		for k, v := range pol.Set {
			vars[k] = v
		}
		if len(pol.IncludeOnly) > 0 {
			for k := range vars {
				if !matchAny(pol.IncludeOnly, k) {
					delete(vars, k)
				}
			}
		}
	}
	for k, v := range env {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		if stripped[k] || k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			continue
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(strings.ToUpper(p), strings.ToUpper(name)); ok {
			return true
		}
	}
	return false
}

// resolveProgram finds argv[0]. A name with a slash is used as given
// (relative to the child's cwd); a bare name is searched in the child's
// PATH when its environment has one, else in the server's.
func resolveProgram(name, dir string, env []string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", syscall.EINVAL
	}
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return name, nil
	}
	if name == "" {
		return "", syscall.ENOENT
	}
	pathVar, ok := "", false
	for _, kv := range env {
		if v, found := strings.CutPrefix(kv, "PATH="); found {
			pathVar, ok = v, true
		}
	}
	if !ok {
		pathVar = os.Getenv("PATH")
		if pathVar == "" {
			pathVar = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		}
	}
	denied := false
	for _, d := range filepath.SplitList(pathVar) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		cand := filepath.Join(d, name)
		st, err := os.Stat(cand)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Mode()&0o111 == 0 || syscall.Access(cand, 1) != nil {
			denied = true
			continue
		}
		return cand, nil
	}
	if denied {
		return "", syscall.EACCES
	}
	return "", syscall.ENOENT
}

package process

import (
	"bytes"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/internal/secretenv"
	"github.com/execgo/exec-server/protocol"
)

// stripped variables never reach a child: they configure the server.
var stripped = map[string]bool{"CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE": true}

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
		var pol protocol.EnvPolicy
		if err := jsonscan.DecodeParams(rawPolicy, &pol, "EnvPolicy"); err != nil {
			return nil, err
		}
		switch pol.Inherit {
		case "", "all":
			for _, kv := range secretenv.Environ() { // the scrubbed credentials too
				if k, v, ok := strings.Cut(kv, "="); ok {
					vars[k] = v
				}
			}
		case "core":
			for _, k := range coreVars {
				if v, ok := secretenv.LookupEnv(k); ok {
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
		if err := checkEnv("envPolicy.set", pol.Set); err != nil {
			return nil, err
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
	if err := checkEnv("env", env); err != nil {
		return nil, err
	}
	for k, v := range env {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		// What is still invalid here came from the server's own
		// environment, which a client does not choose: skip it.
		if stripped[k] || k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			continue
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

// ValidateStart checks what a process/start's params can carry that no
// exec can pass on: a NUL byte in an argument, and environment entries that
// cannot be written as NAME=VALUE. Such a start was refused by the kernel
// with a -32603 (argv), or started without the entry (env); it is now a
// -32602 that names the offending value. The server calls it while it
// decodes the params; buildEnv checks the env again.
func ValidateStart(p *protocol.StartParams) error {
	for i, a := range p.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return protocol.InvalidParams("invalid argv[%d] %s: an argument must not contain a NUL byte", i, quoteShort(a))
		}
	}
	if p.Arg0 != nil && strings.IndexByte(*p.Arg0, 0) >= 0 {
		return protocol.InvalidParams("invalid arg0 %s: it must not contain a NUL byte", quoteShort(*p.Arg0))
	}
	return checkEnv("env", p.Env)
}

// checkEnv refuses, naming it, the first entry (in name order, so the
// answer does not depend on map order) whose name is empty or holds '=' or
// NUL, or whose value holds NUL.
func checkEnv(field string, env map[string]string) error {
	var bad []string
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	k := bad[0]
	switch {
	case k == "":
		return protocol.InvalidParams("invalid %s entry %s: a variable name must not be empty", field, quoteShort(k))
	case strings.IndexByte(k, 0) >= 0:
		return protocol.InvalidParams("invalid %s entry %s: a variable name must not contain a NUL byte", field, quoteShort(k))
	case strings.IndexByte(k, '=') >= 0:
		return protocol.InvalidParams("invalid %s entry %s: a variable name must not contain '='", field, quoteShort(k))
	}
	return protocol.InvalidParams("invalid %s entry %s: its value must not contain a NUL byte", field, quoteShort(k))
}

// quoteShort quotes s for an error message, NULs visible, cut at 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
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

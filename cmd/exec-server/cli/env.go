package cli

import (
	"fmt"
	"strings"
)

// setEnv applies one -e/--env argument to env as docker does: "K=V" sets
// K, a bare "K" passes the local value of K (and nothing when K is unset).
func setEnv(env map[string]string, arg string, lookup func(string) (string, bool)) error {
	k, v, ok := strings.Cut(arg, "=")
	if err := checkEnvName(k); err != nil {
		return err
	}
	if strings.IndexByte(v, 0) >= 0 {
		return fmt.Errorf("the value of %s holds a NUL byte", k)
	}
	if !ok {
		var set bool
		if v, set = lookup(k); !set {
			return nil
		}
	}
	env[k] = v
	return nil
}

func checkEnvName(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("empty variable name")
	case strings.ContainsAny(k, " \t\v\f\r\n\x00"):
		return fmt.Errorf("variable name %q holds white space or a NUL byte", k)
	}
	return nil
}

// parseEnvFile applies a docker-style --env-file to env: one K=V per line,
// the value taken verbatim (no quotes or escapes), a bare K passing the
// local value; blank lines and lines starting with # are skipped, leading
// white space is ignored, a CRLF line end is a LF.
func parseEnvFile(data []byte, env map[string]string, lookup func(string) (string, bool)) error {
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		line = strings.TrimLeft(line, " \t\v\f")
		if line == "" || line[0] == '#' {
			continue
		}
		if err := setEnv(env, line, lookup); err != nil {
			return fmt.Errorf("line %d: %v", i+1, err)
		}
	}
	return nil
}

// Package secretenv keeps the server's secret environment variables out of
// its environment block. /proc/PID/environ shows the memory the kernel
// placed the environment in at exec, whatever the program did with its
// variables since, to the server's user, to root, and to a client that
// makes the server read that file; so at start-up the server moves every
// variable whose name marks a credential (CODEX_API_KEY, OPENAI_API_KEY,
// anything *KEY*, *SECRET*, *TOKEN*, *PASSWORD*) here: out of os.Environ, its
// bytes in that block overwritten. Code that hands the server's own
// environment on (process/start's inherited environment, http/request's
// header values from executor variables) asks Environ and LookupEnv, which
// still see them, so nothing a client could do before changes.
package secretenv

import (
	"os"
	"strings"
	"sync"
)

var (
	mu    sync.RWMutex
	saved map[string]string // name -> value (own copies)
)

// IsSecretName reports whether an environment variable of this name holds
// a credential: the names process/start's default excludes leave out of an
// inherited environment (*KEY*, *SECRET*, *TOKEN*), and *PASSWORD*.
// Variables that only name a file, a path or a directory (…_FILE, …_PATH,
// …_DIR) and the server's own flags (EXEC_SERVER_…, whose values are paths
// and digests the flag package still holds) are not.
func IsSecretName(name string) bool {
	u := strings.ToUpper(name)
	if strings.HasPrefix(u, "EXEC_SERVER_") {
		return false
	}
	for _, s := range []string{"_FILE", "_PATH", "_DIR"} {
		if strings.HasSuffix(u, s) {
			return false
		}
	}
	for _, s := range []string{"KEY", "SECRET", "TOKEN", "PASSWORD"} {
		if strings.Contains(u, s) {
			return true
		}
	}
	return false
}

// Scrub moves every secret variable (IsSecretName) out of the process
// environment into this package, and overwrites its bytes in the block
// /proc/PID/environ shows (where the kernel lets it: see scrubBlock). It
// returns the names moved. Call it once, early, before anything keeps a
// string os.Getenv returned for one of them: the runtime's strings for the
// initial environment point into that block.
func Scrub() ([]string, error) {
	var names []string
	mu.Lock()
	if saved == nil {
		saved = map[string]string{}
	}
	for _, kv := range os.Environ() {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || !IsSecretName(name) {
			continue
		}
		saved[name] = strings.Clone(value)
		names = append(names, name)
	}
	mu.Unlock()
	for _, n := range names {
		os.Unsetenv(n)
	}
	if len(names) == 0 {
		return nil, nil
	}
	return names, scrubBlock(names)
}

// LookupEnv is os.LookupEnv that also sees the scrubbed variables (a
// variable set again since wins).
func LookupEnv(name string) (string, bool) {
	if v, ok := os.LookupEnv(name); ok {
		return v, true
	}
	mu.RLock()
	defer mu.RUnlock()
	v, ok := saved[name]
	return v, ok
}

// Environ is os.Environ with the scrubbed variables (unless set again
// since).
func Environ() []string {
	env := os.Environ()
	mu.RLock()
	defer mu.RUnlock()
	if len(saved) == 0 {
		return env
	}
	set := make(map[string]bool, len(env))
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok {
			set[k] = true
		}
	}
	for k, v := range saved {
		if !set[k] {
			env = append(env, k+"="+v)
		}
	}
	return env
}

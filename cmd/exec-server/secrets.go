package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/execgo/exec-server/internal/secretenv"
	"github.com/execgo/exec-server/sandbox"
	"github.com/execgo/exec-server/sandbox/policy"
)

// protectSecrets runs once the flags are applied (the token, JWT secret
// and TLS key files read): it records the server's secret paths, which
// every sandbox view masks and fs methods never serve (policy.Secret), and
// scrubs credential variables from the environment block /proc/PID/environ
// shows (secretenv), so neither a sandbox nor a client that makes the
// server read its own files gets them. Call it again with the same flags
// after re-reading a secret file that may have been replaced.
func protectSecrets(sec *securityFlags, logger *slog.Logger) {
	paths := secretPaths(sec, os.Environ())
	policy.SetServerSecrets(paths...)
	names, err := secretenv.Scrub()
	if err != nil {
		// The variables are out of os.Environ in any case; only the
		// block /proc/PID/environ shows could not be overwritten.
		logger.Warn("could not overwrite the environment block", "variables", strings.Join(names, ","), "err", err)
	}
	logger.Debug("server secrets protected", "paths", paths, "scrubbed", names)
}

// secretPaths lists the server's secret files and directories: the
// --ws-token-file, --ws-shared-secret-file and --tls-key files, every file
// an EXEC_SERVER_*_FILE variable names, and the sandbox state directory
// (made now, so that it is masked from the first sandbox on).
func secretPaths(sec *securityFlags, environ []string) []string {
	var paths []string
	if sec != nil {
		paths = append(paths, sec.tokenFiles...)
		paths = append(paths, sec.sharedSecretFile, sec.tlsKey)
	}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if ok && value != "" && strings.HasPrefix(name, "EXEC_SERVER_") && strings.HasSuffix(name, "_FILE") {
			paths = append(paths, value)
		}
	}
	if d := sandboxStateDir(); d != "" {
		if os.MkdirAll(d, 0o700) == nil {
			paths = append(paths, d)
		}
	}
	out := paths[:0]
	for _, p := range paths {
		if p != "" {
			out = append(out, filepath.Clean(p))
		}
	}
	sort.Strings(out)
	return out
}

// sandboxStateDir is where the sandbox keeps its mount-point registry: as
// registryDir in sandbox/registry_linux.go.
func sandboxStateDir() string {
	if d := os.Getenv(sandbox.StateDirEnv); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "exec-server", "mount-points")
}

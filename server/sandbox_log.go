package server

import (
	"log/slog"
	"sync"

	"github.com/execgo/exec-server/sandbox"
)

var sandboxLogOnce sync.Once

// logSandboxSupport says once per process, at start-up, what the kernel
// sandbox can use, or what it misses (then every request that asks for a
// sandbox fails closed with -32603 naming it). With a sandbox, it first
// removes what killed servers left on the host (sandbox.CleanStale).
func logSandboxSupport(log *slog.Logger) {
	sandboxLogOnce.Do(func() {
		s := sandbox.Probe()
		attrs := []any{"userNamespaces", s.UserNS, "landlockABI", s.LandlockABI, "seccomp", s.Seccomp}
		if s.Available {
			log.Info("sandbox available", attrs...)
			if removed := sandbox.CleanStale(); len(removed) > 0 {
				log.Info("removed the mount points of missing protected paths that a server killed before its clean-up left behind", "paths", removed)
			}
			return
		}
		log.Info("sandbox unavailable: requests with a restrictive sandbox policy will be refused", append([]any{"missing", s.Missing}, attrs...)...)
	})
}

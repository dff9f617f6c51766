package server

import (
	"log/slog"
	"sync"

	"github.com/execgo/exec-server/sandbox"
)

var sandboxLogOnce sync.Once

// logSandboxSupport says once per process, at start-up, what the kernel
// sandbox can use, or what it misses (then every request that asks for a
// sandbox fails closed with -32603 naming it).
func logSandboxSupport(log *slog.Logger) {
	sandboxLogOnce.Do(func() {
		s := sandbox.Probe()
		attrs := []any{"userNamespaces", s.UserNS, "landlockABI", s.LandlockABI, "seccomp", s.Seccomp}
		if s.Available {
			log.Info("sandbox available", attrs...)
			return
		}
		log.Info("sandbox unavailable: requests with a restrictive sandbox policy will be refused", append([]any{"missing", s.Missing}, attrs...)...)
	})
}

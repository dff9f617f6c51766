package server

import (
	"os"
	"testing"

	"github.com/execgo/exec-server/childinit"
	"github.com/execgo/exec-server/internal/testbin"
	"github.com/execgo/exec-server/sandbox"
)

// The test binary doubles as the spawner of the children it starts.
func TestMain(m *testing.M) {
	childinit.MaybeMain()
	sandbox.MaybeMain()
	if os.Getenv("GORACE") == "" {
		// A race-enabled binary sleeps 1 s at exit by default: every
		// spawner's and sandbox helper's exit would wait for it.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	removeState := testbin.SandboxState()
	code := m.Run()
	removeState()
	os.Exit(code)
}

package relay

import (
	"os"
	"testing"

	"github.com/execgo/exec-server/childinit"
	"github.com/execgo/exec-server/internal/testbin"
	"github.com/execgo/exec-server/sandbox"
)

// The exec-server behind the fleet's codex test re-executes this binary
// for its child init and sandbox helper, as cmd/exec-server's main does.
func TestMain(m *testing.M) {
	childinit.MaybeMain()
	sandbox.MaybeMain()
	if os.Getenv("GORACE") == "" {
		// A race-enabled helper would sleep 1 s at each exit.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	removeState := testbin.SandboxState()
	code := m.Run()
	removeState()
	os.Exit(code)
}

package testbin

import (
	"os"
	"testing"

	"github.com/execgo/exec-server/internal/reexec"
)

// Main is the TestMain of a test binary whose code re-executes it, as the
// server does for its spawner and sandbox helper (cmd/exec-server's main):
//
//	func TestMain(m *testing.M) { testbin.Main(m) }
//
// It runs the re-executed personality when the binary was started as one
// (reexec.Main), keeps a race-enabled helper from sleeping 1 s at each
// exit (GORACE=atexit_sleep_ms=0 unless set), points the sandbox's state
// at a temporary directory (SandboxState), then runs the tests.
func Main(m *testing.M) {
	reexec.Main()
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	removeState := SandboxState()
	code := m.Run()
	removeState()
	os.Exit(code)
}

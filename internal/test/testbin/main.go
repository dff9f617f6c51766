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
	Run(m)
}

// Run is Main without the re-executed personalities, for a test binary that
// decides itself whether to run them (the sandbox's tests start a copy that
// must not, as a program embedding the server without calling reexec.Main):
// it sets GORACE and the sandbox state as Main does, runs the tests and exits.
func Run(m *testing.M) {
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	removeState := SandboxState()
	code := m.Run()
	removeState()
	os.Exit(code)
}

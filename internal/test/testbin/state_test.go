package testbin_test

import (
	"testing"

	"github.com/execgo/exec-server/internal/test/testbin"
	"github.com/execgo/exec-server/sandbox"
)

func TestSandboxStateEnv(t *testing.T) {
	if testbin.SandboxStateEnv != sandbox.StateDirEnv {
		t.Fatalf("testbin.SandboxStateEnv %q, sandbox.StateDirEnv %q", testbin.SandboxStateEnv, sandbox.StateDirEnv)
	}
}

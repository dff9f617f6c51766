package testbin

import "os"

// SandboxStateEnv is sandbox.StateDirEnv (this package cannot import the
// sandbox, whose own tests use it; a test checks that the two agree).
const SandboxStateEnv = "EXEC_SERVER_SANDBOX_STATE_DIR"

// SandboxState points the sandbox's registry of mount points at a fresh
// temporary directory for this test binary and every server it starts, so
// that tests never write the user's cache directory. The returned func
// removes it. An already set variable is kept.
func SandboxState() (remove func()) {
	if os.Getenv(SandboxStateEnv) != "" {
		return func() {}
	}
	dir, err := os.MkdirTemp("", "exec-server-sandbox-state-")
	if err != nil {
		return func() {}
	}
	os.Setenv(SandboxStateEnv, dir)
	return func() { os.RemoveAll(dir) }
}

package cli_test

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes a server die with the test binary even if the test
// panics past its cleanups.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func syscallMkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }

//go:build !windows

package cli

import (
	"os"
	"syscall"
)

// resizeSignals announce a change of the local terminal's size.
var resizeSignals = []os.Signal{syscall.SIGWINCH}

func isResize(sig os.Signal) bool { return sig == syscall.SIGWINCH }

//go:build darwin || freebsd || netbsd || openbsd

package cli

import "golang.org/x/sys/unix"

// The termios requests: the BSDs name them TIOCGETA and TIOCSETA.
const (
	ioctlGetTermios = unix.TIOCGETA
	ioctlSetTermios = unix.TIOCSETA
)

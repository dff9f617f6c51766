//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package cli

import (
	"errors"
	"io"
)

// Without termios there is no local terminal handling: exec -t still runs
// the remote command on a terminal, without raw mode or window size.

func isTerminal(any) bool { return false }

func makeRaw(io.Reader) (func(), error) {
	return nil, errors.New("raw terminal mode is not supported on this system")
}

func winsize(any) (rows, cols int, ok bool) { return 0, 0, false }

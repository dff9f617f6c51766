//go:build linux || darwin || freebsd || netbsd || openbsd

package cli

import (
	"io"

	"golang.org/x/sys/unix"
)

// fdOf returns the file descriptor behind a stream, if it has one.
func fdOf(v any) (int, bool) {
	f, ok := v.(interface{ Fd() uintptr })
	if !ok {
		return 0, false
	}
	return int(f.Fd()), true
}

// isTerminal reports whether the stream is a terminal.
func isTerminal(v any) bool {
	fd, ok := fdOf(v)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	return err == nil
}

// makeRaw puts the terminal in raw mode (as cfmakeraw does: no echo, no
// line editing, no signal keys, no output processing) and returns the
// function that restores it.
func makeRaw(v io.Reader) (restore func(), err error) {
	fd, _ := fdOf(v)
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN] = 1
	raw.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &raw); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, ioctlSetTermios, old) }, nil
}

// winsize returns a terminal's size in rows and columns.
func winsize(v any) (rows, cols int, ok bool) {
	fd, isFile := fdOf(v)
	if !isFile {
		return 0, 0, false
	}
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 || ws.Col == 0 {
		return 0, 0, false
	}
	return int(ws.Row), int(ws.Col), true
}

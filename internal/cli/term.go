package cli

import (
	"sync"

	"golang.org/x/term"
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
	return ok && term.IsTerminal(fd)
}

// rawTerminal is a local terminal put in raw mode (no echo, no line
// editing, no signal keys: Ctrl-C is a byte for the remote side). restore
// is idempotent, so every exit path can call it.
type rawTerminal struct {
	fd    int
	old   *term.State
	once  sync.Once
	mu    sync.Mutex
	isRaw bool
}

func makeRaw(v any) (*rawTerminal, error) {
	fd, _ := fdOf(v)
	old, err := term.MakeRaw(fd)
	if err != nil {
		return nil, err
	}
	return &rawTerminal{fd: fd, old: old, isRaw: true}, nil
}

func (r *rawTerminal) restore() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		_ = term.Restore(r.fd, r.old)
		r.mu.Lock()
		r.isRaw = false
		r.mu.Unlock()
	})
}

// raw reports whether the terminal is still in raw mode (output needs
// "\r\n" then: the terminal does not add the carriage return).
func (r *rawTerminal) raw() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.isRaw
}

// winsize returns a terminal's size in rows and columns.
func winsize(v any) (rows, cols int, ok bool) {
	fd, isFile := fdOf(v)
	if !isFile {
		return 0, 0, false
	}
	w, h, err := term.GetSize(fd)
	if err != nil || w <= 0 || h <= 0 {
		return 0, 0, false
	}
	return h, w, true
}

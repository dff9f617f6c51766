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

// rawTerminal is the local terminal while exec puts it in raw mode (no
// echo, no line editing, no signal keys: Ctrl-C is a byte for the remote
// side). Its zero value is a terminal left alone. restore is idempotent,
// so every exit path can call it, and safe to call from any goroutine
// (messages printed meanwhile need to know the mode).
type rawTerminal struct {
	mu  sync.Mutex
	fd  int
	old *term.State // nil when not in raw mode
}

func (r *rawTerminal) makeRaw(v any) error {
	fd, _ := fdOf(v)
	r.mu.Lock()
	defer r.mu.Unlock()
	old, err := term.MakeRaw(fd)
	if err != nil {
		return err
	}
	r.fd, r.old = fd, old
	return nil
}

func (r *rawTerminal) restore() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.old != nil {
		_ = term.Restore(r.fd, r.old)
		r.old = nil
	}
}

// raw reports whether the terminal is in raw mode (output needs "\r\n"
// then: the terminal does not add the carriage return).
func (r *rawTerminal) raw() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.old != nil
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

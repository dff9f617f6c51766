// Package syncbuf is a bytes.Buffer for tests that read a process's or a
// logger's output while it is still being written.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for one writer and concurrent readers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

package policy

import (
	"bytes"
	"sync"
)

// denialKeywords are the lower-case texts whose presence in a failed
// sandboxed command's output makes the reference report sandboxDenied.
var denialKeywords = [...]string{
	"operation not permitted",
	"permission denied",
	"read-only file system",
	"seccomp",
	"sandbox",
	"landlock",
	"failed to write file",
}

// tailLen is how many bytes of a stream are kept between chunks: enough for
// the longest keyword but one byte, plus room for a multi-byte rune (the
// Kelvin sign) that lower-cases to one of its letters.
const tailLen = len("operation not permitted") - 1 + 2

// Denial decides sandboxDenied for a sandboxed process, as the reference's
// heuristic does (see Denied). Feed it every output chunk with Write; it
// keeps only what it needs (a small tail per stream for keywords split
// across chunks), never the whole output. Safe for concurrent use.
type Denial struct {
	mu    sync.Mutex
	found bool
	tails map[string][]byte // per stream, the last bytes seen
	buf   []byte            // scratch for tail+chunk, lower-cased
}

// Write scans one chunk of stream's output. Streams are scanned separately
// (as the reference scans stdout and stderr each on its own): a keyword
// split between two streams does not count.
func (d *Denial) Write(stream string, chunk []byte) {
	if len(chunk) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.found {
		return
	}
	if d.tails == nil {
		d.tails = make(map[string][]byte, 2)
	}
	tail := d.tails[stream]
	// Only tail+chunk is examined, so a long chunk costs one pass and the
	// scratch buffer is as big as the biggest chunk (bounded by the
	// caller's read size).
	d.buf = lowerASCII(append(append(d.buf[:0], tail...), chunk...))
	for _, k := range denialKeywords {
		if bytes.Contains(d.buf, []byte(k)) {
			d.found = true
			d.tails = nil
			return
		}
	}
	// Keep the raw (not lower-cased) tail: a multi-byte rune cut by the
	// chunk boundary is lower-cased once it is whole.
	raw := append(tail, chunk...)
	if len(raw) > tailLen {
		raw = raw[len(raw)-tailLen:]
	}
	d.tails[stream] = append(tail[:0:0], raw...)
}

// Denied reports whether an exit with exitCode (128+N for a signal N)
// looks like a sandbox denial: never for 0; always when the output named
// one of the keywords; otherwise never for 2, 126 or 127 (usage errors,
// not executable, not found) and only for 159 (128+SIGSYS, a seccomp kill).
func (d *Denial) Denied(exitCode int) bool {
	if exitCode == 0 {
		return false
	}
	d.mu.Lock()
	found := d.found
	d.mu.Unlock()
	if found {
		return true
	}
	return exitCode == 128+31
}

// lowerASCII lower-cases b in place as the reference's Unicode lower-casing
// does for what the keywords can contain: ASCII letters, and the Kelvin
// sign U+212A, which lower-cases to an ASCII 'k' (observed: "landloc\u212a"
// counts). Other runes never lower-case to a lone ASCII letter.
func lowerASCII(b []byte) []byte {
	for i := 0; i < len(b); i++ {
		if c := b[i]; 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	if bytes.Contains(b, []byte("\u212a")) {
		b = bytes.ReplaceAll(b, []byte("\u212a"), []byte("k"))
	}
	return b
}

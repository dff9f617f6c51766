package sandbox

// Denial decides sandboxDenied for a sandboxed process, as the reference's
// heuristic does (see Denied). Feed it every output chunk with Write; it
// keeps only what it needs (a small tail per stream for keywords split
// across chunks), never the whole output. Safe for concurrent use.
type Denial struct {
	// implemented in denied.go by the policy work
}

// Write scans one chunk of stream's output.
func (d *Denial) Write(stream string, chunk []byte) {}

// Denied reports whether an exit with exitCode (128+N for a signal N)
// looks like a sandbox denial.
func (d *Denial) Denied(exitCode int) bool { return false }

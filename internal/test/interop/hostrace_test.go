package interop

import (
	"bytes"
	"strings"
)

// hostRace returns an error the server sent codex that shows bwrap (the
// reference's sandbox) failing on a /tmp mount point of another sandbox
// that came and went ("bwrap: Can't find source path /tmp/.git"), or "":
// the same host race as mockModel.hostRace, seen in an fs/* error rather
// than a tool's output.
func (l *rpcLog) hostRace() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if m.toServer {
			continue
		}
		if i := bytes.Index(m.raw, []byte("bwrap: Can't")); i >= 0 && bytes.Contains(m.raw[i:], []byte("tmp/.")) {
			line, _, _ := strings.Cut(string(m.raw[i:]), `"`)
			return line
		}
	}
	return ""
}

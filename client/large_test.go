package client_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/execgo/exec-server/client"
)

// A 64 MiB file (an 85 MiB response) is read whole over stdio. With the
// client's old 80 MiB message bound the response was dropped as too large
// and ReadFile waited until its context ended.
func TestReadFileLargerThanOldBound(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		if s.name == "reference" {
			t.Skip("the client's bound is the subject; one server is enough")
		}
		c := s.stdio(t, client.Options{})
		data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
		p := filepath.Join(t.TempDir(), "big")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := c.ReadFile(testCtx(t), p)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadFile = %d bytes, %v; want the %d bytes", len(got), err, len(data))
		}
	})
}

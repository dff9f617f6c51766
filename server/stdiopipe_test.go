package server

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// growPipe enlarges a pipe (either end) to stdioPipeSize and leaves a
// regular file alone.
func TestGrowPipe(t *testing.T) {
	for _, end := range []string{"read", "write"} {
		t.Run(end, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			f := w
			if end == "read" {
				f = r
			}
			before := pipeSize(t, r)
			if before >= stdioPipeSize {
				t.Skipf("pipes start at %d bytes here", before)
			}
			growPipe(f)
			if got := pipeSize(t, r); got != stdioPipeSize {
				t.Fatalf("pipe is %d bytes after growPipe, want %d (was %d)", got, stdioPipeSize, before)
			}
		})
	}
	t.Run("regular file", func(t *testing.T) {
		f, err := os.Create(filepath.Join(t.TempDir(), "f"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		growPipe(f)
		growPipe(nil)
		growPipe((*os.File)(nil))
	})
}

func pipeSize(t *testing.T, f *os.File) int {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	var ferr error
	if err := rc.Control(func(fd uintptr) { n, ferr = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) }); err != nil || ferr != nil {
		t.Fatal(err, ferr)
	}
	return n
}

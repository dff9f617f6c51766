package server

import (
	"errors"
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
			if err := growPipe(f); err != nil {
				// An unprivileged user over its pipe-user-pages-soft quota
				// (many pipes open, as in the suite's run as nobody) is
				// refused; growPipe reports it and the server serves on.
				if errors.Is(err, unix.EPERM) && os.Geteuid() != 0 {
					t.Skipf("the kernel refused to grow the pipe: %v", err)
				}
				t.Fatalf("growPipe: %v", err)
			}
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
		for _, v := range []any{f, nil, (*os.File)(nil)} {
			if err := growPipe(v); err != nil {
				t.Fatalf("growPipe(%T): %v", v, err)
			}
		}
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

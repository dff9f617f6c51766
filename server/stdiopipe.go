package server

import (
	"os"

	"golang.org/x/sys/unix"
)

// stdioPipeSize is the size asked of a pipe the server serves stdio over.
// A reply larger than the pipe is written in pipe-sized pieces, each a
// sleep of the writer until the client has drained the pipe and a wake-up
// of it: with Linux's default 64 KiB pipe a 1.4 MB fs/readBlock reply cost
// ~22 of them, and the writes were about half of the server's CPU samples
// for fs/readBlock (docs/performance.md, "Sixth round"; the effect of 1 MiB
// pipes is in its "Seventh round"). The same holds for a client's large requests on stdin (fs/writeFile). 1 MiB
// is what an unprivileged process may ask (/proc/sys/fs/pipe-max-size's
// default), and what the server gives its children's pipes (process).
const stdioPipeSize = 1 << 20

// growPipe enlarges the pipe under v (stdin or stdout) to stdioPipeSize
// when v is an *os.File on a pipe smaller than that. Best effort: a pipe
// the kernel refuses to grow (the user's pipe-user-pages-soft quota, a
// lower pipe-max-size) is served as it is, and anything that is not a pipe
// is left alone. It goes through Control, not Fd, so a descriptor in the
// runtime's poller stays non-blocking.
func growPipe(v any) {
	f, ok := v.(*os.File)
	if !ok || f == nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if unix.Fstat(int(fd), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			return
		}
		if n, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0); err == nil && n >= stdioPipeSize {
			return
		}
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, stdioPipeSize)
	})
}

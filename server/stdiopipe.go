package server

import (
	"os"

	"golang.org/x/sys/unix"
)

// stdioPipeSize is the size asked of a pipe the server serves stdio over.
// A reply larger than the pipe is written in pipe-sized pieces, each a
// sleep of the writer until the client has drained the pipe and a wake-up
// of it: with Linux's default 64 KiB pipe a 1.4 MB fs/readBlock reply went
// out in ~22 pieces, and the pipe writes were about a third of the
// server's CPU samples for fs/readBlock (docs/performance.md, "Seventh
// round"). The same holds for a client's large requests on stdin
// (fs/writeFile). 1 MiB is what an unprivileged process may ask
// (/proc/sys/fs/pipe-max-size's default), and what the server gives its
// children's pipes (process).
const stdioPipeSize = 1 << 20

// growPipe enlarges the pipe under v (stdin or stdout) to stdioPipeSize
// when v is an *os.File on a pipe smaller than that, and returns the
// kernel's refusal if it has one. The caller treats that as advice: a
// pipe the kernel refuses to grow (the user's pipe-user-pages-soft quota,
// a lower pipe-max-size) is served as it is. Anything that is not a pipe
// is left alone (nil). It goes through Control, not Fd, so a descriptor
// in the runtime's poller stays non-blocking.
func growPipe(v any) error {
	f, ok := v.(*os.File)
	if !ok || f == nil {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var serr error
	_ = rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if unix.Fstat(int(fd), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			return
		}
		if n, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0); err == nil && n >= stdioPipeSize {
			return
		}
		_, serr = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, stdioPipeSize)
	})
	return serr
}

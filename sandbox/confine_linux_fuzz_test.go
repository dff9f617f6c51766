package sandbox

import (
	"bytes"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzReadReply feeds readReply, the server's decoder of a helper's
// answer, arbitrary bytes: it must return a well-formed reply or an
// error, never panic or allocate what the header claims beyond the cap.
func FuzzReadReply(f *testing.F) {
	f.Add([]byte("O\x02\x00\x00\x00ok"))
	f.Add([]byte("E\x05\x00\x00\x00boom!"))
	f.Add([]byte("O\xff\xff\xff\xff"))
	f.Add([]byte("X\x00\x00\x00\x00"))
	f.Add([]byte("O\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		w := os.NewFile(uintptr(fds[1]), "w")
		unix.SetNonblock(fds[0], true)
		rf := os.NewFile(uintptr(fds[0]), "r")
		c, err := net.FileConn(rf)
		rf.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() { w.Write(b); w.Close() }()
		status, body, fd, err := readReply(c.(*net.UnixConn))
		if fd >= 0 {
			t.Errorf("a descriptor from nowhere: %d", fd)
			unix.Close(fd)
		}
		if err != nil {
			return
		}
		if status != replyOK && status != replyError {
			t.Errorf("status %q accepted", status)
		}
		if len(b) < 5 || !bytes.Equal(body, b[5:5+len(body)]) {
			t.Errorf("body %q from %q", body, b)
		}
	})
}

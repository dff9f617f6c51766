package sandbox

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
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

// FuzzReadMsg feeds the helper's request decoder arbitrary bytes.
func FuzzReadMsg(f *testing.F) {
	f.Add([]byte("\x02\x00\x00\x00ok\x00\x00\x00\x00"), uint32(16))
	f.Add([]byte("\xff\xff\xff\x7f"), uint32(1<<30))
	f.Add([]byte("\x01\x00"), uint32(4))
	f.Fuzz(func(t *testing.T, b []byte, max uint32) {
		r := bytes.NewReader(b)
		rest := b
		for {
			m, err := readMsg(r, max)
			if err != nil {
				if errors.Is(err, io.EOF) && len(rest) != 0 {
					t.Errorf("EOF with %d bytes left", len(rest))
				}
				return
			}
			if uint32(len(m)) > max || !bytes.Equal(m, rest[4:4+len(m)]) {
				t.Fatalf("message %q from %q (max %d)", m, rest, max)
			}
			rest = rest[4+len(m):]
		}
	})
}

// FuzzParseInitArgs feeds the init's argument decoder arbitrary argv
// (NUL-separated): it must never panic or return more than it was given.
func FuzzParseInitArgs(f *testing.F) {
	f.Add("1\x00{\"root\":1}\x00/bin/true\x00/\x00true")
	f.Add("2\x00{\"ro\x00ot\":0}\x00/p\x00/d")
	f.Add("-1\x00x")
	f.Add("9\x00")
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		ia, err := parseInitArgs(args)
		if err != nil {
			return
		}
		if len(ia.argv) > len(args) {
			t.Fatalf("more out than in: %+v", ia)
		}
	})
}

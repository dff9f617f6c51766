package sandbox

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzSplitComps: the components name the same path as the text (nothing
// but empty and "." components dropped), and none is empty or holds a
// slash.
func FuzzSplitComps(f *testing.F) {
	for _, s := range []string{"", "/", ".", "./", "a/b", "/a//b/./c/", "../x", "a/../../b", "...", "//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		comps := splitComps(p)
		for _, c := range comps {
			if c == "" || strings.Contains(c, "/") {
				t.Fatalf("splitComps(%q) = %q", p, comps)
			}
		}
		if got, want := filepath.Clean("/"+strings.Join(comps, "/")), filepath.Clean("/"+p); got != want {
			t.Fatalf("splitComps(%q) = %q: %s, want %s", p, comps, got, want)
		}
	})
}

// FuzzParseStatus: a umask and a tgid are found only when both lines are
// there and valid, and then as written.
func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("Name:\tsh\nUmask:\t0022\nState:\tS\nTgid:\t7\n"), uint16(0o22), 7)
	f.Add([]byte("Umask:\t0777\nTgid:\t1\n"), uint16(0o777), 1)
	f.Add([]byte("Tgid:\t-1\nUmask:\t9\n"), uint16(0), 0)
	f.Fuzz(func(t *testing.T, b []byte, umask uint16, tgid int) {
		u, g, ok := parseStatus(b)
		if ok && (u < 0 || u > 0o777 || g <= 0) {
			t.Fatalf("parseStatus(%q) = %o, %d, true", b, u, g)
		}
		if tgid > 0 && umask <= 0o777 {
			text := "Name:\tx\nUmask:\t" + strconv.FormatUint(uint64(umask), 8) + "\nTgid:\t" + strconv.Itoa(tgid) + "\n"
			if u, g, ok := parseStatus([]byte(text)); !ok || u != int(umask) || g != tgid {
				t.Fatalf("parseStatus(%q) = %o, %d, %v", text, u, g, ok)
			}
		}
	})
}

// FuzzDecodeCall: any notification decodes without panicking, and a
// decoded call names an operation the supervisor does.
func FuzzDecodeCall(f *testing.F) {
	f.Add(int32(257), uint64(0xffffff9c), uint64(0x1000), uint64(0o100), uint64(0o644), uint64(0))
	f.Add(int32(316), uint64(3), uint64(0x1000), uint64(4), uint64(0x2000), uint64(2))
	f.Add(int32(49), uint64(3), uint64(0x1000), uint64(110), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, nr int32, a0, a1, a2, a3, a4 uint64) {
		req := seccompNotif{Nr: nr, Arch: seccompArch, Args: [6]uint64{a0, a1, a2, a3, a4}}
		c, ok := decodeCall(&req)
		if !ok {
			return
		}
		switch c.op {
		case opOpen, opMkdir, opMknod, opLink, opSymlink, opRename:
		case opBind:
			// Its address is not a path: handle never reads it as one.
			if c.path != 0 || c.path2 != 0 || c.addr != a1 || c.addrLen != int(int32(uint32(a2))) {
				t.Fatalf("decodeCall(bind) = %+v", c)
			}
			return
		default:
			t.Fatalf("decodeCall(nr %d) = op %v", nr, c.op)
		}
		if c.path == 0 && a0 != 0 && a1 != 0 {
			t.Fatalf("decodeCall(nr %d): no path address", nr)
		}
	})
}

// FuzzUnixDiag: the sock_diag reply decoder never panics and matches only
// an attribute that names the file.
func FuzzUnixDiag(f *testing.F) {
	msg := make([]byte, 16+12)
	msg[4] = 7                           // socket inode 7
	msg[16], msg[18] = 12, 1             // UNIX_DIAG_VFS, 12 bytes
	msg[20], msg[24], msg[27] = 42, 3, 0 // vfs inode 42, dev (0, 3)
	f.Add(msg, uint64(42))
	f.Add([]byte{}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, ino uint64) {
		sock, ok := unixDiagBoundTo(b, unix.Mkdev(0, 3), ino)
		if ok && (len(b) < 16 || sock != binary.NativeEndian.Uint32(b[4:])) {
			t.Fatalf("matched socket %d from %x", sock, b)
		}
	})
}

package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// Sockets: bind to a path (it makes that path) and connect under the
// managed proxy, done in the command's place.

// pidfdThread is PIDFD_THREAD (Linux 6.9): a pidfd of the thread itself,
// whose descriptor table may be its own.
const pidfdThread = unix.O_EXCL

// bind is bind(2) done for the target on its socket (pidfd_getfd: the
// same open file): an AF_UNIX path is resolved as the target would, its
// new name checked, and bound relative to its directory; any other
// address is bound as it was read (never CONTINUE: the target could turn
// it into a path after the check).
func (s *supervisor) bind(t *target, c call, id uint64) unix.Errno {
	if c.addrLen < 0 || c.addrLen > 4096 {
		return unix.EINVAL
	}
	addr := make([]byte, c.addrLen)
	if len(addr) > 0 {
		if m, err := unix.Pread(t.mem, addr, int64(c.addr)); err != nil || m != len(addr) {
			return unix.EFAULT
		}
	}
	sock, errno := t.socket(c.sock)
	if errno != 0 {
		return errno
	}
	defer unix.Close(sock)
	dir, name := -1, ""
	if len(addr) > 2 && binary.NativeEndian.Uint16(addr) == unix.AF_UNIX && addr[2] != 0 {
		p := addr[2:]
		if i := bytes.IndexByte(p, 0); i >= 0 {
			p = p[:i]
		}
		if len(p) >= len(unix.RawSockaddrUnix{}.Path) {
			return unix.EINVAL
		}
		if s.cwd < 0 {
			return unix.EACCES
		}
		base, errno := t.base(unix.AT_FDCWD, string(p), false)
		if errno != 0 {
			return errno
		}
		d, n, slash, errno := t.walkParent(base, string(p))
		unix.Close(base)
		if errno != 0 {
			return errno
		}
		defer unix.Close(d)
		if errno := s.checkNew(d, n); errno != 0 {
			return errno
		}
		if slash {
			return existsErr(d, n, unix.ENOENT)
		}
		dir, name = d, n
	}
	if !s.idValid(id) {
		return unix.ENOENT
	}
	if dir < 0 {
		return rawBind(sock, addr)
	}
	unix.Umask(t.umask) // the socket file's mode
	if err := unix.Fchdir(dir); err != nil {
		return toErrno(err)
	}
	errno = rawBind(sock, append(append(addr[:2:2], name...), 0))
	if err := unix.Fchdir(s.cwd); err != nil {
		// Relative paths of later calls would be wrong: none is made.
		unix.Close(s.cwd)
		s.cwd = -1
	}
	return errno
}

// socket returns the target's socket fd (a copy of its descriptor).
func (t *target) socket(fd int) (int, unix.Errno) {
	pfd, err := unix.PidfdOpen(t.tid, pidfdThread)
	if err == unix.EINVAL && t.tid == t.tgid {
		pfd, err = unix.PidfdOpen(t.tid, 0)
	}
	if err != nil {
		return -1, unix.EACCES
	}
	defer unix.Close(pfd)
	sfd, err := unix.PidfdGetfd(pfd, fd, 0)
	if err == unix.EBADF {
		return -1, unix.EBADF
	}
	if err != nil {
		return -1, unix.EACCES
	}
	var st unix.Stat_t
	if unix.Fstat(sfd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(sfd)
		return -1, unix.ENOTSOCK
	}
	return sfd, 0
}

// connect is connect(2) done for the target on its socket (pidfd_getfd:
// the same open file), from the address as read once: never CONTINUE,
// which would let another thread of the target change the address after
// the check. A pathname AF_UNIX address is resolved as the target would
// (its cwd, root, /proc/self), the socket file opened (O_PATH) and
// checked: it must be reached through a writable mount, in a writable
// root of the plan, with a listener of this sandbox (listenerInside), or
// be one the server allows (AllowUnixSockets);
// anything else is EACCES. The connection is then made to that very
// inode (/proc/self/fd/N), so a name swapped meanwhile changes nothing.
// Abstract and unnamed unix addresses are connected on this thread (in
// the command's Landlock domain, which scopes abstract sockets); the other
// families by connectInet.
func (s *supervisor) connect(req *seccompNotif) {
	c := call{sock: int(int32(uint32(req.Args[0]))), addr: req.Args[1], addrLen: int(int32(uint32(req.Args[2])))}
	fail := func(errno unix.Errno) { s.answer(req.ID, noFD, errno) }
	if c.addrLen < 0 || c.addrLen > sockaddrMax {
		fail(unix.EINVAL)
		return
	}
	t, errno := openTarget(int(req.Pid))
	if errno != 0 {
		fail(errno)
		return
	}
	defer t.close()
	addr := make([]byte, c.addrLen)
	if len(addr) > 0 {
		if m, err := unix.Pread(t.mem, addr, int64(c.addr)); err != nil || m != len(addr) {
			fail(unix.EFAULT)
			return
		}
	}
	sock, errno := t.socket(c.sock)
	if errno != 0 {
		fail(errno)
		return
	}
	family := -1
	if len(addr) >= 2 {
		family = int(binary.NativeEndian.Uint16(addr))
	}
	if family != unix.AF_UNIX {
		s.connectInet(req.ID, sock, addr)
		return
	}
	defer unix.Close(sock)
	if len(addr) <= 2 || addr[2] == 0 {
		if !s.idValid(req.ID) {
			return
		}
		fail(rawConnect(sock, addr)) // abstract or unnamed
		return
	}
	p := addr[2:]
	if i := bytes.IndexByte(p, 0); i >= 0 {
		p = p[:i]
	}
	fd, errno := s.unixTarget(t, string(p))
	if errno != 0 {
		fail(errno)
		return
	}
	defer unix.Close(fd)
	if !s.idValid(req.ID) {
		return
	}
	via := append(addr[:2:2], "/proc/self/fd/"+strconv.Itoa(fd)+"\x00"...)
	fail(rawConnect(sock, via))
}

// unixTarget opens (O_PATH) the socket file a pathname connect to p from
// the target reaches, if the plan lets a command connect to it.
func (s *supervisor) unixTarget(t *target, p string) (int, unix.Errno) {
	base, errno := t.base(unix.AT_FDCWD, p, false)
	if errno != 0 {
		return -1, errno
	}
	dir, name, _, errno := t.walkParent(base, p)
	unix.Close(base)
	if errno != 0 {
		return -1, errno
	}
	fd, errno := t.openFollow(dir, name)
	unix.Close(dir)
	if errno != 0 {
		return -1, errno
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return -1, unix.ECONNREFUSED // what the kernel says of a file that is no socket
	}
	where, ok := realDir(fd)
	if !ok {
		unix.Close(fd)
		return -1, unix.EACCES
	}
	if slices.Contains(s.p.AllowUnixSockets, where) {
		return fd, 0
	}
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) != nil || fs.Flags&unix.ST_RDONLY != 0 || accessOf(s.p, where) != policy.AccessWrite {
		unix.Close(fd)
		return -1, unix.EACCES
	}
	// In a writable root: /tmp under codex's workspace-write holds host
	// daemons' sockets too (tmux, ssh-agent, X11). Only a listener of this
	// sandbox's own processes is let through.
	if errno := listenerInside(fd); errno != 0 {
		unix.Close(fd)
		return -1, errno
	}
	return fd, 0
}

// listenerInside checks that the socket file fd is listened on by a
// process of this sandbox, without touching the listener: the kernel's
// socket diagnostics (NETLINK_SOCK_DIAG, as ss -x) name each listening
// unix socket with the file it is bound to; the listener's socket inode
// must then be held by a process this sandbox's /proc shows.
func listenerInside(fd int) unix.Errno {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return toErrno(err)
	}
	socks, err := unixListeners(st.Dev, st.Ino)
	if err != nil {
		return unix.EACCES // fail closed
	}
	if len(socks) == 0 {
		return unix.ECONNREFUSED // nobody listens: what connect says
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return unix.EACCES
	}
	buf := make([]byte, 64)
	for _, pe := range procs {
		if _, err := strconv.Atoi(pe.Name()); err != nil {
			continue
		}
		dir := "/proc/" + pe.Name() + "/fd/"
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // gone, or not ours to look at
		}
		for _, f := range fds {
			n, err := unix.Readlink(dir+f.Name(), buf)
			if err != nil {
				continue
			}
			l := string(buf[:n])
			ino, ok := strings.CutPrefix(l, "socket:[")
			if !ok {
				continue
			}
			if v, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 32); err == nil && socks[uint32(v)] {
				return 0
			}
		}
	}
	return unix.EACCES
}

// unixListeners returns the socket inodes of the listening unix sockets
// bound to the file dev/ino.
func unixListeners(dev, ino uint64) (map[uint32]bool, error) {
	nl, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, err
	}
	defer unix.Close(nl)
	const (
		sockDiagByFamily = 20
		udiagShowVFS     = 0x2
		tcpListen        = 10
	)
	req := make([]byte, unix.SizeofNlMsghdr+24)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], sockDiagByFamily)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	r := req[unix.SizeofNlMsghdr:]
	r[0] = unix.AF_UNIX
	binary.NativeEndian.PutUint32(r[4:], 1<<tcpListen)  // udiag_states
	binary.NativeEndian.PutUint32(r[12:], udiagShowVFS) // udiag_show
	if err := unix.Sendto(nl, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	out := map[uint32]bool{}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(nl, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				return nil, errors.New("sock_diag: error")
			}
			if sockIno, ok := unixDiagBoundTo(m.Data, dev, ino); ok {
				out[sockIno] = true
			}
		}
	}
}

// unixDiagBoundTo decodes one unix_diag_msg with its attributes: the
// socket's inode, and whether its UNIX_DIAG_VFS attribute names the file
// dev/ino (st_dev encoding).
func unixDiagBoundTo(msg []byte, dev, ino uint64) (uint32, bool) {
	const unixDiagVFS = 1
	if len(msg) < 16 {
		return 0, false
	}
	sockIno := binary.NativeEndian.Uint32(msg[4:])
	for b := msg[16:]; len(b) >= 4; {
		alen := int(binary.NativeEndian.Uint16(b[0:]))
		if alen < 4 || alen > len(b) {
			return 0, false
		}
		typ, val := binary.NativeEndian.Uint16(b[2:]), b[4:alen]
		b = b[min((alen+3)&^3, len(b)):]
		if typ != unixDiagVFS || len(val) < 8 {
			continue
		}
		vino := binary.NativeEndian.Uint32(val[0:])
		kdev := binary.NativeEndian.Uint32(val[4:]) // the kernel's dev_t: major<<20 | minor
		if uint64(vino) == ino && unix.Mkdev(kdev>>20, kdev&0xfffff) == dev {
			return sockIno, true
		}
	}
	return 0, false
}

package peerproc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Limits of one Check's scan of /proc (fail closed past them).
const (
	maxProcs = 1 << 16
	maxFDs   = 1 << 20
)

// Checker checks peers of this process (the server).
type Checker struct {
	self    int
	uid     uint32 // the server's effective uid: its sandboxes' sockets have it
	selfMnt string
	selfNet string
	procDir string

	mu     sync.Mutex
	recent []int // processes found holding a client's socket lately, newest first
}

// recentHolders bounds Checker.recent: a client that connects again, or
// opens several connections, is found in its first few descriptor tables.
const recentHolders = 8

// New returns a Checker for this process; an error when /proc cannot tell
// this process's mount namespace (the caller then fails closed).
func New() (*Checker, error) {
	mnt, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return nil, fmt.Errorf("peerproc: %w", err)
	}
	net, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("peerproc: %w", err)
	}
	return &Checker{self: os.Getpid(), uid: uint32(os.Geteuid()), selfMnt: mnt, selfNet: net, procDir: "/proc"}, nil
}

// Check decides a connection accepted on local from remote.
func (c *Checker) Check(local, remote netip.AddrPort) Verdict {
	ino, uid, err := socketInode(remote, local)
	if err != nil {
		// Not in this network namespace (or sock_diag is not available
		// here): a remote peer, unless its address is this host's (a
		// sandbox that closed its socket at once, from one of the
		// host's addresses to another).
		if !IsLocal(local, remote) && !hostAddr(remote.Addr()) {
			return Verdict{Reason: "a remote peer"}
		}
		return Verdict{Refuse: true, Reason: "local peer's socket not found: " + err.Error()}
	}
	if ino == 0 {
		// Also when no sandbox runs any more: one could have sent a whole
		// request and ended before this check (a client that waits for
		// its answers never closes first).
		return Verdict{Refuse: true, Reason: "local peer's socket is held by no process (closed or orphaned)"}
	}
	if Sandboxes.Running() == 0 {
		// Every process of a sandbox is gone once its init is reaped
		// (the PID namespace's end waits for them), so a live socket is
		// no sandbox's.
		return Verdict{Reason: "no sandbox with the host's network running"}
	}
	return c.owner(ino, uid)
}

// owner decides by who holds socket inode ino, made by uid.
func (c *Checker) owner(ino, uid uint32) Verdict {
	link := "socket:[" + strconv.FormatUint(uint64(ino), 10) + "]"
	s := scan{c: c, parent: map[int]int{}, ours: map[int]bool{}}
	pids, err := s.pids()
	if err != nil {
		return Verdict{Refuse: true, Reason: "listing processes: " + err.Error()}
	}
	if len(pids) > maxProcs {
		return Verdict{Refuse: true, Reason: fmt.Sprintf("more than %d processes to search", maxProcs)}
	}
	var boxed, others []int
	for _, pid := range pids {
		if s.sandboxed(pid) {
			boxed = append(boxed, pid)
		} else {
			others = append(others, pid)
		}
	}
	if len(boxed) == 0 {
		// No sandbox of this server that shares its network is running:
		// the peer is none.
		return Verdict{Reason: "no sandbox with the host's network running"}
	}
	for _, pid := range boxed {
		found, err := s.holds(pid, link, true)
		if found {
			return Verdict{Refuse: true, Reason: "local peer is a sandboxed process of this server", Pid: pid}
		}
		if err != nil {
			return Verdict{Refuse: true, Reason: fmt.Sprintf("cannot search the descriptors of sandboxed process %d: %v", pid, err)}
		}
	}
	if uid != c.uid {
		// A socket another user made: never one of this server's
		// sandboxes (they run as the server's user, or as a user
		// namespace's root mapped to it, and cannot change it), and held by
		// none of them.
		return Verdict{Reason: "local peer's socket belongs to uid " + strconv.FormatUint(uint64(uid), 10)}
	}
	// Recent clients first: the whole search costs a readlink per
	// descriptor on the host.
	c.mu.Lock()
	first := append([]int(nil), c.recent...)
	c.mu.Unlock()
	isOther := make(map[int]bool, len(others))
	for _, pid := range others {
		isOther[pid] = true
	}
	searched := map[int]bool{}
	for _, pid := range append(first, others...) {
		if searched[pid] || !isOther[pid] {
			continue
		}
		searched[pid] = true
		if found, _ := s.holds(pid, link, false); found {
			c.remember(pid)
			return Verdict{Reason: "local peer is process " + strconv.Itoa(pid)}
		}
		if s.fds > maxFDs {
			break
		}
	}
	return Verdict{Refuse: true, Reason: "while a sandbox runs, the local peer's socket is held by no process this server can see"}
}

func (c *Checker) remember(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := []int{pid}
	for _, p := range c.recent {
		if p != pid && len(r) < recentHolders {
			r = append(r, p)
		}
	}
	c.recent = r
}

// scan is one Check's walk of /proc.
type scan struct {
	c      *Checker
	parent map[int]int  // pid -> ppid (-1 unknown)
	ours   map[int]bool // memo: pid descends from the server
	fds    int
}

func (s *scan) pids() ([]int, error) {
	d, err := os.Open(s.c.procDir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// sandboxed reports whether pid is in one of this server's sandboxes and
// shares the server's network (a sandbox with its own network namespace,
// such as an fs helper or a command with the network restricted, cannot
// reach the server's TCP listener): in another mount namespace than the
// server, below it in the process tree, in its network namespace. A process
// whose namespaces cannot be read is another user's (the server can read
// its own sandboxes': same user, or a user namespace it owns) or gone.
func (s *scan) sandboxed(pid int) bool {
	if pid == s.c.self {
		return false
	}
	base := s.c.procDir + "/" + strconv.Itoa(pid)
	mnt, err := os.Readlink(base + "/ns/mnt")
	if err != nil || mnt == s.c.selfMnt || !s.descends(pid) {
		return false
	}
	net, err := os.Readlink(base + "/ns/net")
	// Unreadable now (it just ended, or hid): count it, fail closed.
	return err != nil || net == s.c.selfNet
}

// descends reports whether pid has the server as an ancestor.
func (s *scan) descends(pid int) bool {
	var chain []int
	result := false
	for p, hops := pid, 0; hops < 4096; hops++ {
		if v, ok := s.ours[p]; ok {
			result = v
			break
		}
		if p == s.c.self {
			result = true
			break
		}
		if p <= 1 {
			break
		}
		chain = append(chain, p)
		pp, ok := s.ppid(p)
		if !ok {
			break
		}
		p = pp
	}
	for _, p := range chain {
		s.ours[p] = result
	}
	return result
}

func (s *scan) ppid(pid int) (int, bool) {
	if v, ok := s.parent[pid]; ok {
		return v, v >= 0
	}
	data, err := os.ReadFile(s.c.procDir + "/" + strconv.Itoa(pid) + "/stat")
	v := -1
	if err == nil {
		// "pid (comm) state ppid ...": comm may hold anything, so parse
		// after its last ')'.
		if i := strings.LastIndexByte(string(data), ')'); i >= 0 {
			if f := strings.Fields(string(data[i+1:])); len(f) >= 2 {
				if pp, err := strconv.Atoi(f[1]); err == nil {
					v = pp
				}
			}
		}
	}
	s.parent[pid] = v
	return v, v >= 0
}

// holds reports whether a descriptor of pid (of any of its threads when
// tasks is set: a thread made without CLONE_FILES has its own table) is
// link. A process that ended is not an error.
func (s *scan) holds(pid int, link string, tasks bool) (bool, error) {
	base := s.c.procDir + "/" + strconv.Itoa(pid)
	dirs := []string{base + "/fd"}
	if tasks {
		if d, err := os.Open(base + "/task"); err == nil {
			names, _ := d.Readdirnames(-1)
			d.Close()
			for _, n := range names {
				if n != strconv.Itoa(pid) {
					dirs = append(dirs, base+"/task/"+n+"/fd")
				}
			}
		}
	}
	for _, dir := range dirs {
		found, err := s.holdsIn(dir, link)
		if found || err != nil {
			return found, err
		}
	}
	return false, nil
}

func (s *scan) holdsIn(dir, link string) (bool, error) {
	d, err := os.Open(dir)
	if err != nil {
		if gone(err) {
			return false, nil
		}
		return false, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil && !gone(err) {
		return false, err
	}
	buf := make([]byte, 64)
	for _, n := range names {
		s.fds++
		k, err := unix.Readlink(dir+"/"+n, buf)
		if err == nil && string(buf[:k]) == link {
			return true, nil
		}
	}
	return false, nil
}

// hostAddr reports whether a is an address of this host's interfaces (in
// doubt, yes).
func hostAddr(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	a = a.Unmap()
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if b, ok := netip.AddrFromSlice(n.IP); ok && b.Unmap() == a {
				return true
			}
		}
	}
	return false
}

func gone(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH)
}

// socketInode looks up the TCP socket whose local address is src and
// remote address dst (the peer's socket: src is the peer) with sock_diag,
// and returns its inode (0: no descriptor holds it) and owner's uid.
func socketInode(src, dst netip.AddrPort) (ino, uid uint32, err error) {
	family := uint8(unix.AF_INET)
	if !src.Addr().Unmap().Is4() || !dst.Addr().Unmap().Is4() {
		family = unix.AF_INET6
	}
	ino, uid, err = diagLookup(family, src, dst)
	if err != nil && family == unix.AF_INET {
		// A client's IPv6 socket with v4-mapped addresses.
		if ino6, uid6, err6 := diagLookup(unix.AF_INET6, src, dst); err6 == nil {
			return ino6, uid6, nil
		}
	}
	return ino, uid, err
}

const (
	sizeofReq     = 56 // struct inet_diag_req_v2
	sizeofDiagMsg = 72 // struct inet_diag_msg
)

func diagLookup(family uint8, src, dst netip.AddrPort) (ino, uid uint32, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, 0, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	msg := make([]byte, unix.NLMSG_HDRLEN+sizeofReq)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], 1) // seq
	r := msg[unix.NLMSG_HDRLEN:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 0xffffffff) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	putAddr(id[4:20], family, src.Addr())
	putAddr(id[20:36], family, dst.Addr())
	ne.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, 0, fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("sock_diag: %w", err)
	}
	buf = buf[:n]
	if len(buf) < unix.NLMSG_HDRLEN {
		return 0, 0, errors.New("sock_diag: short reply")
	}
	switch ne.Uint16(buf[4:]) {
	case unix.NLMSG_ERROR:
		if len(buf) >= unix.NLMSG_HDRLEN+4 {
			if e := int32(ne.Uint32(buf[unix.NLMSG_HDRLEN:])); e != 0 {
				return 0, 0, syscall.Errno(-e)
			}
		}
		return 0, 0, errors.New("sock_diag: empty error reply")
	case unix.SOCK_DIAG_BY_FAMILY:
		if len(buf) < unix.NLMSG_HDRLEN+sizeofDiagMsg {
			return 0, 0, errors.New("sock_diag: short reply")
		}
		m := buf[unix.NLMSG_HDRLEN:]
		return ne.Uint32(m[68:]), ne.Uint32(m[64:]), nil
	}
	return 0, 0, fmt.Errorf("sock_diag: unexpected reply type %d", ne.Uint16(buf[4:]))
}

func putAddr(b []byte, family uint8, a netip.Addr) {
	if family == unix.AF_INET {
		a4 := a.Unmap().As4()
		copy(b, a4[:])
		return
	}
	a16 := a.As16()
	copy(b, a16[:])
}

package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// Deny globs for commands. A mount can mask only what exists when the view
// is built; a *new* path matching a deny glob (or a missing deny path, which
// sandbox/policy/resolve.go turns into a literal glob) can only be refused when it is
// made. When the plan has deny globs and something writable, the init
// supervises the command's path-creating syscalls with a seccomp user
// notification filter and does each of them itself, after checking the
// new name, relative to directories it resolved itself: never
// SECCOMP_USER_NOTIF_FLAG_CONTINUE, whose path the command could change
// between the check and the kernel's read of it.
//
// Who is where:
//   - the init's locked thread holds the Landlock domain and has no
//     capabilities (its other threads keep them: see lockdown); it is the
//     supervisor, so it is confined exactly like the command and doing the
//     work for it grants nothing the command could not do itself;
//   - a filter with a listener must be installed by the task it filters, and
//     a thread inherits the Landlock domain of the thread that made it, which
//     for a Go thread is never the locked one. So the init starts a stub,
//     this binary again ("notify" mode), from its locked thread (the stub
//     is in the same Landlock domain, which the supervisor needs to read
//     its memory: Landlock refuses /proc/PID/mem across sibling domains);
//     the stub installs the filter on itself, hands the listener to the
//     init over a socket and execs the command.
//
// The command's syscalls that the filter does not name run at full speed.

// notifyStubMode is the helper mode of the stub (argv[2]).
const notifyStubMode = "notify"

// legacyCreate names the legacy path-creating syscalls of the arch (amd64:
// open, creat, mkdir, mknod, link, symlink, rename; arm64 has none).
var legacyCreate = map[string]uintptr{}

// Supervision bounds: a directory moved under a new name is walked to
// check its descendants' new paths; past these it is refused.
const (
	renameWalkMax   = 10000
	renameWalkDepth = 64
	maxSymlinkHops  = 40
)

// superviseCreation reports whether a command under p needs the supervisor:
// deny globs and something a command could create in.
func superviseCreation(p *policy.Plan) bool {
	if len(p.DenyGlobs) == 0 {
		return false
	}
	if p.Root == policy.AccessWrite {
		return true
	}
	for _, m := range p.Mounts {
		if m.Access == policy.AccessWrite && !m.Protected && !m.Missing {
			return true
		}
	}
	return false
}

// superviseConnect reports whether a command under p needs the supervisor
// for connect(2): with the network enabled (or proxied: connect is
// allowed there too), a connect to a pathname
// AF_UNIX socket outside the writable roots (a host daemon's: docker,
// tmux, ssh-agent, systemd) is refused, and only the supervisor can read
// the address (it is in memory) and make the connection itself.
func superviseConnect(p *policy.Plan) bool {
	return p.Network != policy.NetworkRestricted && !writableEverywhere(p)
}

// writableEverywhere reports whether every path of p's view is writable
// (nothing outside a writable root: no socket to keep a command from).
func writableEverywhere(p *policy.Plan) bool {
	if p.Root != policy.AccessWrite {
		return false
	}
	for _, m := range p.Mounts {
		if m.Access != policy.AccessWrite || m.Protected {
			return false
		}
	}
	return true
}

// notifyProgram is the filter of the command: USER_NOTIF for the
// path-creating calls (open and openat only with O_CREAT: BPF reads their
// flags; openat2 always, its flags are in memory), ALLOW for everything
// else. The TSYNC filter of lockdown still applies first: its ERRNO and
// KILL beat USER_NOTIF.
//
// create supervises the path-creating calls (deny globs), connect
// connect(2) (network enabled).
func notifyProgram(create, connect bool) []unix.SockFilter {
	const retNotif = unix.SECCOMP_RET_USER_NOTIF
	p := []unix.SockFilter{
		bpfStmt(ldW, offArch),
		bpfJump(jeqK, seccompArch, 1, 0),
		bpfStmt(retK, retAllow), // the other filter kills foreign arches
		bpfStmt(ldW, offNr),
	}
	if connect {
		p = append(p, bpfJump(jeqK, unix.SYS_CONNECT, 0, 1), bpfStmt(retK, retNotif))
	}
	if !create {
		return append(p, bpfStmt(retK, retAllow))
	}
	// bind: an AF_UNIX socket bound to a path makes that path (its
	// address is in memory; with a restricted network the other filter's
	// EPERM comes first).
	always := []uintptr{unix.SYS_OPENAT2, unix.SYS_MKDIRAT, unix.SYS_MKNODAT, unix.SYS_LINKAT,
		unix.SYS_SYMLINKAT, unix.SYS_RENAMEAT, unix.SYS_RENAMEAT2, unix.SYS_BIND}
	for _, n := range []string{"creat", "mkdir", "mknod", "link", "symlink", "rename"} {
		if nr, ok := legacyCreate[n]; ok {
			always = append(always, nr)
		}
	}
	for _, nr := range always {
		p = append(p, bpfJump(jeqK, uint32(nr), 0, 1), bpfStmt(retK, retNotif))
	}
	withCreat := func(nr uintptr, off uint32) {
		p = append(p,
			bpfJump(jeqK, uint32(nr), 0, 4),
			bpfStmt(ldW, off),
			bpfJump(jsetK, unix.O_CREAT, 0, 1),
			bpfStmt(retK, retNotif),
			bpfStmt(retK, retAllow))
	}
	withCreat(unix.SYS_OPENAT, offArg2)
	if nr, ok := legacyCreate["open"]; ok {
		withCreat(nr, offArg1)
	}
	return append(p, bpfStmt(retK, retAllow))
}

// ---- the stub ----

// stubMain is the "notify" helper mode: installs the notification filter
// on its (locked) thread, sends the listener on fd 3, execs the command.
func stubMain(args []string) {
	if len(args) < 1 {
		initFail(errors.New("notify: bad arguments"))
	}
	if len(args) < 2 {
		initFail(errors.New("notify: bad arguments"))
	}
	path, argv := args[1], args[2:]
	prog := notifyProgram(strings.Contains(args[0], "c"), strings.Contains(args[0], "n"))
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// WAIT_KILLABLE_RECV (Linux 5.19): once the supervisor has a
	// notification, only a fatal signal interrupts the call. Otherwise a
	// signal (Go's preemption, a timer) restarts a call the supervisor
	// already did: an O_EXCL creation then fails with EEXIST on its own
	// file, a mkdir on its own directory. Older kernels go without.
	lfd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, uintptr(unsafe.Pointer(&fprog)))
	if e == unix.EINVAL {
		lfd, _, e = unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
			unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&fprog)))
	}
	runtime.KeepAlive(prog)
	if e != 0 {
		initFail(stepErr("seccomp listener", e))
	}
	if err := unix.Sendmsg(helperSock, []byte{1}, unix.UnixRights(int(lfd)), nil, 0); err != nil {
		initFail(stepErr("seccomp listener: send", err))
	}
	unix.Close(int(lfd))
	unix.Close(helperSock)
	err := syscall.Exec(path, argv, unwrapEnv(os.Environ()))
	fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
	if errors.Is(err, syscall.ENOENT) {
		os.Exit(127)
	}
	os.Exit(126)
}

// startSupervised starts the command through the stub from the calling
// (locked, confined) thread and returns its pid and the listener (-1 when
// the stub failed before sending it: its exit status then says why).
func startSupervised(p *policy.Plan, path string, argv []string) (int, int, error) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, -1, stepErr("seccomp listener: socketpair", err)
	}
	defer unix.Close(sp[0])
	what := "-" // what the stub's filter supervises: c creations, n connect
	if superviseCreation(p) {
		what += "c"
	}
	if superviseConnect(p) {
		what += "n"
	}
	args := append([]string{"exec-server-sandbox", helperArg, notifyStubMode, what, path}, argv...)
	// The stub gets the init's environment as it is (wrapped: nothing of it
	// acts on the stub) and unwraps it for the command.
	pid, err := syscall.ForkExec("/proc/self/exe", args, &syscall.ProcAttr{
		Env: os.Environ(), Files: []uintptr{0, 1, 2, uintptr(sp[1])}})
	unix.Close(sp[1])
	if err != nil {
		return 0, -1, stepErr("start the command", err)
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sp[0], buf, oob, unix.MSG_CMSG_CLOEXEC)
	for err == unix.EINTR {
		_, oobn, _, _, err = unix.Recvmsg(sp[0], buf, oob, unix.MSG_CMSG_CLOEXEC)
	}
	if err != nil || oobn == 0 {
		return pid, -1, nil
	}
	lfd := -1
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if fds, perr := unix.ParseUnixRights(&m); perr == nil {
				for _, fd := range fds {
					if lfd < 0 {
						lfd = fd
					} else {
						unix.Close(fd)
					}
				}
			}
		}
	}
	return pid, lfd, nil
}

// ---- the supervisor ----

// Kernel structures of the notification API (uapi/linux/seccomp.h).
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

type seccompAddfd struct {
	ID         uint64
	Flags      uint32
	Srcfd      uint32
	Newfd      uint32
	NewfdFlags uint32
}

const (
	ioctlNotifIDValid = 0x40082102 // _IOW('!', 2, __u64)
	ioctlNotifAddfd   = 0x40182103 // _IOW('!', 3, struct seccomp_notif_addfd)
	openHowSize       = 24         // OPEN_HOW_SIZE_VER0
)

// supervisor serves the notifications of one command tree.
type supervisor struct {
	listener int
	p        *policy.Plan
	pending  []pendingOpen
	// cwd is the init's directory (O_PATH), to come back to after a bind
	// made relative to another one (this thread's own: CLONE_FS
	// unshared); -1: binds to a path are refused.
	cwd int
	// lock is the creation lock (creationLock), -1 without deny globs.
	lock int
}

// pendingOpen is an O_CREAT open of an existing FIFO for writing that has
// no reader yet: the kernel would wait; the supervisor retries it between
// notifications rather than block them all.
type pendingOpen struct {
	id    uint64
	dir   int
	name  string
	flags int
}

// serve handles notifications until the listener fails (every command
// process gone). It runs on the init's locked thread.
func (s *supervisor) serve() {
	// The pending opens are retried every 5 ms, also while notifications
	// keep coming (a poll that never times out would starve them).
	var retried time.Time
	for {
		timeout := -1
		if len(s.pending) > 0 {
			timeout = 5
			if time.Since(retried) >= 5*time.Millisecond {
				s.retryPending()
				retried = time.Now()
				continue
			}
		}
		fds := []unix.PollFd{{Fd: int32(s.listener), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if n == 0 {
			continue // the retry is due
		}
		if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 && fds[0].Revents&unix.POLLIN == 0 {
			return
		}
		var req seccompNotif
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s.listener), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); e != 0 {
			if e == unix.EINTR || e == unix.ENOENT {
				continue
			}
			return
		}
		if uintptr(req.Nr) == unix.SYS_CONNECT && req.Arch == seccompArch {
			s.connect(&req)
			continue
		}
		fd, errno, pend := s.handle(&req)
		if pend != nil {
			pend.id = req.ID
			s.pending = append(s.pending, *pend)
			continue
		}
		s.answer(req.ID, fd, errno)
	}
}

// answer completes notification id: with fd installed in the target (the
// syscall's result) when fd >= 0 (closed here), else with errno (0: the
// call returns 0). An answer to a notification gone meanwhile (the target
// was interrupted or died) fails with ENOENT: nothing to do.
func (s *supervisor) answer(id uint64, fd fdResult, errno unix.Errno) {
	if fd.fd >= 0 {
		add := seccompAddfd{ID: id, Flags: unix.SECCOMP_ADDFD_FLAG_SEND, Srcfd: uint32(fd.fd)}
		if fd.cloexec {
			add.NewfdFlags = unix.O_CLOEXEC
		}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s.listener), ioctlNotifAddfd, uintptr(unsafe.Pointer(&add)))
		unix.Close(fd.fd)
		if e == 0 || e == unix.ENOENT {
			return
		}
		errno = e // fail closed: the call fails with the reason
	}
	resp := seccompResp{ID: id}
	if errno != 0 {
		resp.Error = -int32(errno)
	}
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(s.listener), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
}

func (s *supervisor) idValid(id uint64) bool {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s.listener), ioctlNotifIDValid, uintptr(unsafe.Pointer(&id)))
	return e == 0
}

func (s *supervisor) retryPending() {
	keep := s.pending[:0]
	for _, po := range s.pending {
		if !s.idValid(po.id) { // interrupted or gone: the kernel asks again
			unix.Close(po.dir)
			continue
		}
		fd, errno, again := openFIFO(po.dir, po.name, po.flags)
		if again {
			keep = append(keep, po)
			continue
		}
		unix.Close(po.dir)
		s.answer(po.id, fdResult{fd, po.flags&unix.O_CLOEXEC != 0}, errno)
	}
	s.pending = keep
}

// fdResult is a descriptor to install in the target (-1 for none).
type fdResult struct {
	fd      int
	cloexec bool
}

var noFD = fdResult{fd: -1}

// target is what the supervisor knows of the task behind a notification.
type target struct {
	tid, tgid int
	umask     int
	mem       int // /proc/TID/mem
	root      int // "/" of the view (the command cannot chroot)
}

func (t *target) close() {
	for _, fd := range []int{t.mem, t.root} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// call is a notification decoded: which operation, on which paths.
type call struct {
	op            string // open, mkdir, mknod, link, symlink, rename
	dirfd, dirfd2 int
	path, path2   uint64 // addresses; path2 is link's/rename's new path, symlink's link path
	flags         int
	mode          uint32
	dev           uint64
	how           uint64 // openat2's struct open_how
	howSize       uint64
	sock          int    // bind's socket, in the target
	addr          uint64 // bind's address and its length
	addrLen       int
}

func decodeCall(req *seccompNotif) (call, bool) {
	a := req.Args
	fdOf := func(v uint64) int { return int(int32(uint32(v))) }
	nr := uintptr(req.Nr)
	switch nr {
	case unix.SYS_OPENAT:
		return call{op: "open", dirfd: fdOf(a[0]), path: a[1], flags: int(int32(a[2])), mode: uint32(a[3])}, true
	case unix.SYS_OPENAT2:
		return call{op: "open", dirfd: fdOf(a[0]), path: a[1], how: a[2], howSize: a[3]}, true
	case unix.SYS_MKDIRAT:
		return call{op: "mkdir", dirfd: fdOf(a[0]), path: a[1], mode: uint32(a[2])}, true
	case unix.SYS_MKNODAT:
		return call{op: "mknod", dirfd: fdOf(a[0]), path: a[1], mode: uint32(a[2]), dev: a[3]}, true
	case unix.SYS_LINKAT:
		return call{op: "link", dirfd: fdOf(a[0]), path: a[1], dirfd2: fdOf(a[2]), path2: a[3], flags: int(int32(a[4]))}, true
	case unix.SYS_SYMLINKAT:
		return call{op: "symlink", path: a[0], dirfd2: fdOf(a[1]), path2: a[2]}, true
	case unix.SYS_RENAMEAT:
		return call{op: "rename", dirfd: fdOf(a[0]), path: a[1], dirfd2: fdOf(a[2]), path2: a[3]}, true
	case unix.SYS_BIND:
		return call{op: "bind", sock: fdOf(a[0]), addr: a[1], addrLen: int(int32(uint32(a[2])))}, true
	case unix.SYS_RENAMEAT2:
		return call{op: "rename", dirfd: fdOf(a[0]), path: a[1], dirfd2: fdOf(a[2]), path2: a[3], flags: int(int32(a[4]))}, true
	}
	cwd := unix.AT_FDCWD
	for name, lnr := range legacyCreate {
		if lnr != nr {
			continue
		}
		switch name {
		case "open":
			return call{op: "open", dirfd: cwd, path: a[0], flags: int(int32(a[1])), mode: uint32(a[2])}, true
		case "creat":
			return call{op: "open", dirfd: cwd, path: a[0], flags: unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC, mode: uint32(a[1])}, true
		case "mkdir":
			return call{op: "mkdir", dirfd: cwd, path: a[0], mode: uint32(a[1])}, true
		case "mknod":
			return call{op: "mknod", dirfd: cwd, path: a[0], mode: uint32(a[1]), dev: a[2]}, true
		case "link":
			return call{op: "link", dirfd: cwd, path: a[0], dirfd2: cwd, path2: a[1]}, true
		case "symlink":
			return call{op: "symlink", path: a[0], dirfd2: cwd, path2: a[1]}, true
		case "rename":
			return call{op: "rename", dirfd: cwd, path: a[0], dirfd2: cwd, path2: a[1]}, true
		}
	}
	return call{}, false
}

// handle does one notification's call; every failure is an errno (fail
// closed), never a continue.
func (s *supervisor) handle(req *seccompNotif) (fdResult, unix.Errno, *pendingOpen) {
	c, ok := decodeCall(req)
	if !ok || req.Arch != seccompArch {
		return noFD, unix.ENOSYS, nil
	}
	t, errno := openTarget(int(req.Pid))
	if errno != 0 {
		return noFD, errno, nil
	}
	defer t.close()
	if c.op == "bind" {
		unlock, errno := lockCreation(s.lock, false)
		if errno != 0 {
			return noFD, errno, nil
		}
		defer unlock()
		return noFD, s.bind(t, c, req.ID), nil
	}
	// Read everything from the target's memory first, then check that the
	// notification still stands (the tid was not reused: /proc/TID is the
	// notifying task), then act on the copies only.
	var p1, p2 string
	var how unix.OpenHow
	if c.op == "open" && c.how != 0 {
		if errno = t.readHow(c.how, c.howSize, &how); errno != 0 {
			return noFD, errno, nil
		}
		c.flags, c.mode = int(how.Flags), uint32(how.Mode)
		// openat2 refuses what openat ignores: a mode with bits beyond
		// 07777, or one without O_CREAT or O_TMPFILE.
		if how.Flags>>32 != 0 || how.Mode&^0o7777 != 0 ||
			(how.Mode != 0 && how.Flags&(unix.O_CREAT|(unix.O_TMPFILE&^unix.O_DIRECTORY)) == 0) {
			return noFD, unix.EINVAL, nil
		}
		// No set-user-ID or set-group-ID file (the other filter checks
		// the modes of every other call).
		if how.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			return noFD, unix.EPERM, nil
		}
	}
	if p1, errno = t.readPath(c.path); errno != 0 {
		return noFD, errno, nil
	}
	if c.path2 != 0 {
		if p2, errno = t.readPath(c.path2); errno != 0 {
			return noFD, errno, nil
		}
	}
	base1, base2 := -1, -1
	defer func() {
		for _, fd := range []int{base1, base2} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	if c.op != "symlink" {
		if base1, errno = t.base(c.dirfd, p1, c.op == "link" && c.flags&unix.AT_EMPTY_PATH != 0); errno != 0 {
			return noFD, errno, nil
		}
	}
	if c.path2 != 0 {
		if base2, errno = t.base(c.dirfd2, p2, false); errno != 0 {
			return noFD, errno, nil
		}
	}
	if !s.idValid(req.ID) {
		return noFD, unix.ENOENT, nil
	}
	// From the check of a new name to its creation, no supervised rename
	// (of any sandbox, of any server) may move a directory on its path;
	// a rename, walked and done, excludes every creation.
	unlock, errno := lockCreation(s.lock, c.op == "rename")
	if errno != 0 {
		return noFD, errno, nil
	}
	defer unlock()
	unix.Umask(t.umask) // the target's, for what the kernel makes here
	switch c.op {
	case "open":
		fd, errno, pend := s.open(t, c, base1, p1, how)
		if fd.fd >= 0 && inSupervisor(fd.fd) {
			// Reopened through a descriptor of the command that names a
			// file of the supervisor (an O_PATH one on /proc/1/mem).
			unix.Close(fd.fd)
			return noFD, unix.EACCES, nil
		}
		return fd, errno, pend
	case "mkdir", "mknod", "symlink":
		dir, name, slash, errno := t.walkParent(base1Or2(c, base1, base2), pathOf(c, p1, p2))
		if errno != 0 {
			return noFD, errno, nil
		}
		defer unix.Close(dir)
		if errno := s.checkNew(dir, name); errno != 0 {
			return noFD, errno, nil
		}
		var err error
		switch c.op {
		case "mkdir":
			err = unix.Mkdirat(dir, name, c.mode)
		case "mknod":
			if slash {
				return noFD, existsErr(dir, name, unix.ENOENT), nil
			}
			err = unix.Mknodat(dir, name, c.mode, int(c.dev))
		case "symlink":
			if slash {
				return noFD, existsErr(dir, name, unix.ENOENT), nil
			}
			if errno := s.checkSymlink(t, dir, name, p1); errno != 0 {
				return noFD, errno, nil
			}
			err = unix.Symlinkat(p1, dir, name)
		}
		return noFD, toErrno(err), nil
	case "link":
		return noFD, s.link(t, base1, p1, base2, p2, c.flags), nil
	case "rename":
		return noFD, s.rename(t, base1, p1, base2, p2, c.flags), nil
	}
	return noFD, unix.ENOSYS, nil
}

// open is the open family: openat2 without O_CREAT, or a creating open.
func (s *supervisor) open(t *target, c call, base int, p string, how unix.OpenHow) (fdResult, unix.Errno, *pendingOpen) {
	if c.flags&unix.O_CREAT != 0 && c.flags&(unix.O_TMPFILE&^unix.O_DIRECTORY) != 0 {
		return noFD, unix.EINVAL, nil
	}
	if c.how != 0 && c.flags&unix.O_CREAT == 0 {
		// openat2 without O_CREAT creates nothing: done as asked,
		// from a directory resolved here (for /proc/self).
		return s.openPlain(t, base, p, how)
	}
	return s.openCreate(t, base, p, c.flags, c.mode, how.Resolve)
}

func base1Or2(c call, b1, b2 int) int {
	if c.op == "symlink" {
		return b2
	}
	return b1
}

func pathOf(c call, p1, p2 string) string {
	if c.op == "symlink" {
		return p2
	}
	return p1
}

// existsErr is EEXIST when dir/name exists, else def.
func existsErr(dir int, name string, def unix.Errno) unix.Errno {
	var st unix.Stat_t
	if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		return unix.EEXIST
	}
	return def
}

func toErrno(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EACCES
}

func openTarget(tid int) (*target, unix.Errno) {
	t := &target{tid: tid, mem: -1, root: -1}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return nil, unix.EACCES
	}
	var ok bool
	if t.umask, t.tgid, ok = parseStatus(b); !ok {
		return nil, unix.EACCES
	}
	if t.mem, err = unix.Open("/proc/"+strconv.Itoa(tid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return nil, unix.EACCES
	}
	if t.root, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		t.close()
		return nil, unix.EACCES
	}
	return t, 0
}

// parseStatus reads the umask and the thread group id from a
// /proc/PID/status text.
func parseStatus(b []byte) (umask, tgid int, ok bool) {
	umask, tgid = -1, -1
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "Umask":
			if n, err := strconv.ParseUint(v, 8, 32); err == nil && n <= 0o777 {
				umask = int(n)
			}
		case "Tgid":
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				tgid = n
			}
		}
	}
	return umask, tgid, umask >= 0 && tgid > 0
}

// readPath reads a NUL-terminated path of at most PATH_MAX bytes from the
// target's memory, a page at a time (a read past the end of a mapping
// fails).
func (t *target) readPath(addr uint64) (string, unix.Errno) {
	if addr == 0 {
		return "", unix.EFAULT
	}
	var out []byte
	buf := make([]byte, 4096)
	for len(out) < unix.PathMax {
		n := 4096 - int(addr%4096)
		n = min(n, unix.PathMax-len(out))
		m, err := unix.Pread(t.mem, buf[:n], int64(addr))
		if err != nil || m <= 0 {
			return "", unix.EFAULT
		}
		for i := 0; i < m; i++ {
			if buf[i] == 0 {
				return string(append(out, buf[:i]...)), 0
			}
		}
		out = append(out, buf[:m]...)
		addr += uint64(m)
	}
	return "", unix.ENAMETOOLONG
}

func (t *target) readHow(addr, size uint64, how *unix.OpenHow) unix.Errno {
	if size < openHowSize {
		return unix.EINVAL
	}
	if size > 4096 {
		return unix.E2BIG
	}
	b := make([]byte, size)
	if m, err := unix.Pread(t.mem, b, int64(addr)); err != nil || m != len(b) {
		return unix.EFAULT
	}
	for _, x := range b[openHowSize:] {
		if x != 0 {
			return unix.E2BIG
		}
	}
	*how = *(*unix.OpenHow)(unsafe.Pointer(&b[0]))
	return 0
}

// base opens the directory a path is relative to, as the target sees it:
// its root for an absolute path, its cwd for AT_FDCWD, else its
// descriptor dirfd (reopened through /proc, which follows it to the same
// file). emptyOK allows a file that is not a directory (AT_EMPTY_PATH).
func (t *target) base(dirfd int, p string, emptyOK bool) (int, unix.Errno) {
	if strings.HasPrefix(p, "/") {
		fd, err := unix.Dup(t.root)
		if err != nil {
			return -1, unix.EMFILE
		}
		unix.CloseOnExec(fd)
		return fd, 0
	}
	var link string
	if dirfd == unix.AT_FDCWD {
		link = "/proc/" + strconv.Itoa(t.tid) + "/cwd"
	} else if dirfd >= 0 {
		link = "/proc/" + strconv.Itoa(t.tid) + "/fd/" + strconv.Itoa(dirfd)
	} else {
		return -1, unix.EBADF
	}
	fd, err := unix.Open(link, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return -1, unix.EBADF
		}
		return -1, unix.EACCES
	}
	if !emptyOK || p != "" {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return -1, unix.ENOTDIR
		}
	}
	return fd, 0
}

// walkParent resolves p from base as the kernel would for the target, but
// its last component: every symlink on the way is followed here, with the
// target's /proc/self (procfs's self and thread-self links name the
// caller). It returns the last directory (O_PATH), the last component
// ("." for "/") and whether p ended in a slash.
func (t *target) walkParent(base int, p string) (int, string, bool, unix.Errno) {
	if p == "" {
		return -1, "", false, unix.ENOENT
	}
	slash := strings.HasSuffix(p, "/")
	comps := splitComps(p)
	dir, err := unix.Dup(base)
	if err != nil {
		return -1, "", false, unix.EMFILE
	}
	unix.CloseOnExec(dir)
	if strings.HasPrefix(p, "/") {
		unix.Close(dir)
		dir, _ = unix.Dup(t.root)
		unix.CloseOnExec(dir)
	}
	if inSupervisor(dir) {
		unix.Close(dir)
		return -1, "", false, unix.EACCES
	}
	if len(comps) == 0 {
		return dir, ".", slash, 0
	}
	hops := 0
	for len(comps) > 1 {
		c := comps[0]
		comps = comps[1:]
		next, rest, errno := t.step(dir, c, &hops)
		if errno != 0 {
			unix.Close(dir)
			return -1, "", false, errno
		}
		if next >= 0 {
			unix.Close(dir)
			dir = next
		}
		if rest != nil {
			// A symlink: its target's components come first.
			if rest.abs {
				unix.Close(dir)
				dir, _ = unix.Dup(t.root)
				unix.CloseOnExec(dir)
			}
			comps = append(rest.comps, comps...)
			if len(comps) == 0 {
				comps = []string{"."}
			}
		}
	}
	return dir, comps[0], slash, 0
}

type linkRest struct {
	abs   bool
	comps []string
}

// path is the rest of the walk as a path (absolute when the link was).
func (l *linkRest) path() string {
	p := strings.Join(l.comps, "/")
	if l.abs {
		p = "/" + p
	}
	return p
}

// step walks one intermediate component c from dir: a new directory, or a
// symlink's target to walk instead.
func (t *target) step(dir int, c string, hops *int) (int, *linkRest, unix.Errno) {
	fd, err := unix.Openat(dir, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, toErrno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, toErrno(err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if inSupervisor(fd) {
			unix.Close(fd)
			return -1, nil, unix.EACCES
		}
		return fd, nil, 0
	case unix.S_IFLNK:
		unix.Close(fd)
		if *hops++; *hops > maxSymlinkHops {
			return -1, nil, unix.ELOOP
		}
		rest, magic, errno := t.readLink(dir, c)
		if errno != 0 {
			return -1, nil, errno
		}
		if magic {
			// A procfs link of the target (fd/N, cwd, root): the kernel
			// follows it to the same object for anyone allowed to.
			fd, err := unix.Openat(dir, c, unix.O_PATH|unix.O_CLOEXEC, 0)
			if err != nil {
				return -1, nil, toErrno(err)
			}
			if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				unix.Close(fd)
				return -1, nil, unix.ENOTDIR
			}
			if inSupervisor(fd) {
				unix.Close(fd)
				return -1, nil, unix.EACCES
			}
			return fd, nil, 0
		}
		return -1, rest, 0
	}
	unix.Close(fd)
	return -1, nil, unix.ENOTDIR
}

// readLink reads the symlink dir/c as the target would follow it: procfs's
// self and thread-self name the target, other procfs links are magic
// (followed by the kernel, never by their text).
func (t *target) readLink(dir int, c string) (*linkRest, bool, unix.Errno) {
	var fs unix.Statfs_t
	if unix.Fstatfs(dir, &fs) == nil && fs.Type == unix.PROC_SUPER_MAGIC {
		var st unix.Stat_t
		if unix.Fstat(dir, &st) == nil && st.Ino == 1 && (c == "self" || c == "thread-self") {
			s := strconv.Itoa(t.tgid)
			if c == "thread-self" {
				s += "/task/" + strconv.Itoa(t.tid)
			}
			return &linkRest{comps: splitComps(s)}, false, 0
		}
		return nil, true, 0
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, c, buf)
	if err != nil {
		return nil, false, toErrno(err)
	}
	s := string(buf[:n])
	return &linkRest{abs: strings.HasPrefix(s, "/"), comps: splitComps(s)}, false, 0
}

// splitComps splits a path into its components, dropping empty ones and
// "." (kept as the only one of a path that names its start: "." or "/").
func splitComps(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	if len(out) == 0 && strings.Trim(p, "/") != "" {
		out = []string{"."}
	}
	return out
}

// inSupervisor reports whether fd is in a procfs directory of the init's
// own process (/proc/1, its tasks): the supervisor may open its own memory,
// descriptors (the listener) and the like where the command may not, so it
// never goes there for the command. Fail closed: true when unsure.
func inSupervisor(fd int) bool {
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) != nil {
		return true
	}
	if fs.Type != unix.PROC_SUPER_MAGIC {
		return false
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	if err != nil {
		return true
	}
	p := string(buf[:n])
	if p == "/proc" {
		return false
	}
	rest, ok := strings.CutPrefix(p, "/proc/")
	if !ok {
		return true
	}
	first, _, _ := strings.Cut(rest, "/")
	pid, err := strconv.Atoi(first)
	if err != nil {
		return false // /proc/sys and the like: the same for both
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return true
	}
	_, tgid, ok := parseStatus(b)
	return !ok || tgid == os.Getpid()
}

// realDir is dir's path in the view (= on the host: the view mounts every
// path where it is on the host).
func realDir(dir int) (string, bool) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(dir), buf)
	if err != nil {
		return "", false
	}
	s := string(buf[:n])
	return s, strings.HasPrefix(s, "/") && !strings.HasSuffix(s, " (deleted)")
}

// checkNew refuses a new name in dir that a deny glob matches (or a path
// in a denied directory); EACCES when dir cannot be named (fail closed).
func (s *supervisor) checkNew(dir int, name string) unix.Errno {
	if name == "." || name == ".." {
		return 0 // names nothing new
	}
	d, ok := realDir(dir)
	if !ok {
		return unix.EACCES
	}
	if s.p.DeniedByGlob(filepath.Join(d, name)) {
		return unix.EACCES
	}
	return 0
}

// openCreate is open with O_CREAT: a missing name is checked and created
// with O_EXCL (a name that appears meanwhile is looked at again); an
// existing one is opened without O_CREAT (one that goes meanwhile is looked
// at again); a symlink is followed as the kernel would (unless O_EXCL or
// O_NOFOLLOW), so that a dangling one cannot create a denied target.
func (s *supervisor) openCreate(t *target, base int, p string, flags int, mode uint32, resolve uint64) (fdResult, unix.Errno, *pendingOpen) {
	cloexec := flags&unix.O_CLOEXEC != 0
	flags |= unix.O_CLOEXEC
	var dir int
	var name string
	var slash bool
	var errno unix.Errno
	if resolve != 0 {
		// openat2's resolve rules: the directory is found by the kernel
		// under them; a final symlink is not followed here.
		d, n := filepath.Split(p)
		if n == "" {
			return noFD, unix.EISDIR, nil
		}
		if d == "" {
			d = "."
		}
		fd, errno := openParent2(base, d, resolve)
		if errno != 0 {
			return noFD, errno, nil
		}
		dir, name = fd, n
	} else if dir, name, slash, errno = t.walkParent(base, p); errno != 0 {
		return noFD, errno, nil
	}
	defer func() { unix.Close(dir) }()
	if slash {
		return noFD, unix.EISDIR, nil
	}
	hops := 0
	for try := 0; try < 100; try++ {
		var st unix.Stat_t
		err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err == unix.ENOENT:
			if errno := s.checkNew(dir, name); errno != 0 {
				return noFD, errno, nil
			}
			fd, err := unix.Openat(dir, name, flags|unix.O_EXCL|unix.O_NOFOLLOW, mode)
			if err == unix.EEXIST && flags&unix.O_EXCL == 0 {
				continue // made meanwhile (by the host): look again
			}
			if err != nil {
				return noFD, toErrno(err), nil
			}
			return fdResult{fd, cloexec}, 0, nil
		case err != nil:
			return noFD, toErrno(err), nil
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			if flags&unix.O_EXCL != 0 {
				return noFD, unix.EEXIST, nil
			}
			if flags&unix.O_NOFOLLOW != 0 || resolve&unix.RESOLVE_NO_SYMLINKS != 0 {
				return noFD, unix.ELOOP, nil
			}
			if resolve != 0 {
				return noFD, unix.EACCES, nil // not emulated: refused
			}
			if hops++; hops > maxSymlinkHops {
				return noFD, unix.ELOOP, nil
			}
			rest, magic, errno := t.readLink(dir, name)
			if errno != 0 {
				return noFD, errno, nil
			}
			if magic {
				// A procfs link of the target names an existing object:
				// nothing is created through it.
				fd, err := unix.Openat(dir, name, flags&^(unix.O_CREAT|unix.O_EXCL), 0)
				if err != nil {
					return noFD, toErrno(err), nil
				}
				return fdResult{fd, cloexec}, 0, nil
			}
			nd, nn, nslash, errno := t.walkParent(dir, rest.path())
			if errno != 0 {
				return noFD, errno, nil
			}
			unix.Close(dir)
			dir, name = nd, nn
			if nslash {
				return noFD, unix.EISDIR, nil
			}
		default:
			if flags&unix.O_EXCL != 0 {
				return noFD, unix.EEXIST, nil
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return noFD, unix.EISDIR, nil
			}
			if st.Mode&unix.S_IFMT == unix.S_IFIFO && flags&unix.O_NONBLOCK == 0 {
				fd, errno, again := openFIFO(dir, name, flags)
				if again {
					d, _ := unix.Dup(dir)
					unix.CloseOnExec(d)
					return noFD, 0, &pendingOpen{dir: d, name: name, flags: flags}
				}
				return fdResult{fd, cloexec}, errno, nil
			}
			fd, err := unix.Openat(dir, name, (flags&^unix.O_CREAT)|unix.O_NOFOLLOW, 0)
			if (err == unix.ENOENT || err == unix.ELOOP) && flags&unix.O_NOFOLLOW == 0 {
				continue // removed or replaced meanwhile: look again
			}
			if err != nil {
				return noFD, toErrno(err), nil
			}
			return fdResult{fd, cloexec}, 0, nil
		}
	}
	return noFD, unix.EAGAIN, nil
}

// openParent2 opens directory d from base under openat2's resolve rules
// (the kernel's walk: its /proc/self is the supervisor's, hence the check).
func openParent2(base int, d string, resolve uint64) (int, unix.Errno) {
	fd, err := unix.Openat2(base, d, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return -1, toErrno(err)
	}
	if inSupervisor(fd) {
		unix.Close(fd)
		return -1, unix.EACCES
	}
	return fd, 0
}

// openPlain is openat2 without O_CREAT: the directory is resolved here
// (with resolve rules, by the kernel and checked), the last component
// opened as asked. A final symlink is followed here too, never by the
// kernel's walk for the supervisor, whose /proc/self is the init's (its
// descriptors, the target's memory); with resolve rules it is refused
// (not emulated), as for a creating open.
func (s *supervisor) openPlain(t *target, base int, p string, how unix.OpenHow) (fdResult, unix.Errno, *pendingOpen) {
	var dir int
	var name string
	var errno unix.Errno
	if how.Resolve != 0 {
		d, n := filepath.Split(p)
		if n == "" {
			n = "."
		}
		if d == "" {
			d = "."
		}
		if dir, errno = openParent2(base, d, how.Resolve); errno != 0 {
			return noFD, errno, nil
		}
		name = n
	} else if dir, name, _, errno = t.walkParent(base, p); errno != 0 {
		return noFD, errno, nil
	}
	defer func() { unix.Close(dir) }()
	cloexec := how.Flags&unix.O_CLOEXEC != 0
	flags := how.Flags | unix.O_CLOEXEC
	// A trailing slash follows a final symlink whatever O_NOFOLLOW says,
	// and wants a directory: opened without it, O_DIRECTORY says the same.
	slash := strings.HasSuffix(p, "/")
	if slash {
		flags |= unix.O_DIRECTORY
	}
	follow := how.Flags&unix.O_NOFOLLOW == 0 || slash
	hops := 0
	for try := 0; try < 100; try++ {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK && follow {
			if how.Resolve&unix.RESOLVE_NO_SYMLINKS != 0 {
				return noFD, unix.ELOOP, nil
			}
			if how.Resolve != 0 {
				return noFD, unix.EACCES, nil // not emulated: refused
			}
			if hops++; hops > maxSymlinkHops {
				return noFD, unix.ELOOP, nil
			}
			rest, magic, errno := t.readLink(dir, name)
			if errno != 0 {
				return noFD, errno, nil
			}
			if magic {
				// A procfs link in a directory of the target (never the
				// init's: walkParent refuses those) names its object.
				fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: flags, Mode: how.Mode})
				if err != nil {
					return noFD, toErrno(err), nil
				}
				return fdResult{fd, cloexec}, 0, nil
			}
			nd, nn, nslash, errno := t.walkParent(dir, rest.path())
			if errno != 0 {
				return noFD, errno, nil
			}
			unix.Close(dir)
			dir, name = nd, nn
			if nslash {
				flags |= unix.O_DIRECTORY
			}
			continue
		}
		// Not a symlink (or not to be followed): O_NOFOLLOW keeps the
		// kernel from following one put there meanwhile.
		fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: flags | unix.O_NOFOLLOW, Mode: how.Mode, Resolve: how.Resolve})
		if err == unix.ELOOP && follow {
			continue // replaced by a symlink meanwhile: look again
		}
		if err != nil {
			return noFD, toErrno(err), nil
		}
		return fdResult{fd, cloexec}, 0, nil
	}
	return noFD, unix.EAGAIN, nil
}

// openFIFO opens an existing FIFO without waiting (again: no reader yet
// for a writer, try later) and makes it blocking as asked.
func openFIFO(dir int, name string, flags int) (int, unix.Errno, bool) {
	fd, err := unix.Openat(dir, name, (flags&^unix.O_CREAT)|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err == unix.ENXIO {
		return -1, 0, true
	}
	if err != nil {
		return -1, toErrno(err), false
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	return fd, 0, false
}

// link is linkat: the new name is checked; AT_EMPTY_PATH links the
// target's descriptor through /proc (the same file).
func (s *supervisor) link(t *target, base1 int, p1 string, base2 int, p2 string, flags int) unix.Errno {
	if flags&^(unix.AT_SYMLINK_FOLLOW|unix.AT_EMPTY_PATH) != 0 {
		return unix.EINVAL
	}
	nd, nn, nslash, errno := t.walkParent(base2, p2)
	if errno != 0 {
		return errno
	}
	defer unix.Close(nd)
	if errno := s.checkNew(nd, nn); errno != 0 {
		return errno
	}
	if nslash {
		return existsErr(nd, nn, unix.ENOENT)
	}
	if p1 == "" && flags&unix.AT_EMPTY_PATH != 0 {
		src := "/proc/self/fd/" + strconv.Itoa(base1)
		return toErrno(unix.Linkat(unix.AT_FDCWD, src, nd, nn, unix.AT_SYMLINK_FOLLOW))
	}
	od, on, _, errno := t.walkParent(base1, p1)
	if errno != 0 {
		return errno
	}
	defer unix.Close(od)
	if flags&unix.AT_SYMLINK_FOLLOW == 0 {
		// A hard link to a symlink is a symlink at the new name.
		if errno := s.checkMovedSymlink(t, od, on, nd, nn); errno != 0 {
			return errno
		}
	}
	if flags&unix.AT_SYMLINK_FOLLOW != 0 {
		// Resolve a final symlink here too (procfs's self is the target's).
		var st unix.Stat_t
		if unix.Fstatat(od, on, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			fd, errno := t.openFollow(od, on)
			if errno != 0 {
				return errno
			}
			defer unix.Close(fd)
			return toErrno(unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), nd, nn, unix.AT_SYMLINK_FOLLOW))
		}
	}
	return toErrno(unix.Linkat(od, on, nd, nn, 0))
}

// openFollow opens (O_PATH) what the symlink dir/name leads to, as the
// target would follow it.
func (t *target) openFollow(dir int, name string) (int, unix.Errno) {
	hops := 0
	d, err := unix.Dup(dir)
	if err != nil {
		return -1, unix.EMFILE
	}
	unix.CloseOnExec(d)
	for {
		var st unix.Stat_t
		if err := unix.Fstatat(d, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Close(d)
			return -1, toErrno(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			fd, err := unix.Openat(d, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(d)
			return fd, toErrno(err)
		}
		if hops++; hops > maxSymlinkHops {
			unix.Close(d)
			return -1, unix.ELOOP
		}
		rest, magic, errno := t.readLink(d, name)
		if errno != 0 {
			unix.Close(d)
			return -1, errno
		}
		if magic {
			fd, err := unix.Openat(d, name, unix.O_PATH|unix.O_CLOEXEC, 0)
			unix.Close(d)
			return fd, toErrno(err)
		}
		nd, nn, _, errno := t.walkParent(d, rest.path())
		unix.Close(d)
		if errno != 0 {
			return -1, errno
		}
		d, name = nd, nn
	}
}

// rename is renameat2: the new name is checked, and so is every path a
// moved directory's descendants get; with RENAME_EXCHANGE, both ways.
func (s *supervisor) rename(t *target, base1 int, p1 string, base2 int, p2 string, flags int) unix.Errno {
	od, on, _, errno := t.walkParent(base1, p1)
	if errno != 0 {
		return errno
	}
	defer unix.Close(od)
	nd, nn, _, errno := t.walkParent(base2, p2)
	if errno != 0 {
		return errno
	}
	defer unix.Close(nd)
	if errno := s.checkMove(od, on, nd, nn); errno != 0 {
		return errno
	}
	if errno := s.checkMovedSymlink(t, od, on, nd, nn); errno != 0 {
		return errno
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		if errno := s.checkMove(nd, nn, od, on); errno != 0 {
			return errno
		}
		if errno := s.checkMovedSymlink(t, nd, nn, od, on); errno != 0 {
			return errno
		}
	}
	return toErrno(unix.Renameat2(od, on, nd, nn, uint(flags)))
}

// checkMove checks the paths that moving fromDir/from to toDir/to makes.
func (s *supervisor) checkMove(fromDir int, from string, toDir int, to string) unix.Errno {
	if errno := s.checkNew(toDir, to); errno != 0 {
		return errno
	}
	if to == "." || to == ".." {
		return 0
	}
	d, ok := realDir(toDir)
	if !ok {
		return unix.EACCES
	}
	fd, err := unix.Openat(fromDir, from, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOTDIR || err == unix.ELOOP || err == unix.ENOENT {
		return 0 // not a directory: nothing moves below it
	}
	if err != nil {
		return unix.EACCES // cannot be walked: refused
	}
	count := 0
	if !s.walkClean(fd, filepath.Join(d, to), 0, &count) {
		return unix.EACCES
	}
	return 0
}

// walkClean reports whether no entry under the directory fd (closed here),
// named newPath after the move, matches a deny glob or is a mount point,
// within the bounds.
func (s *supervisor) walkClean(fd int, newPath string, depth int, count *int) bool {
	defer unix.Close(fd)
	if depth > renameWalkDepth {
		return false
	}
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return false
		}
		if n == 0 {
			return true
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			if *count++; *count > renameWalkMax {
				return false
			}
			child := newPath + "/" + name
			if s.p.DeniedByGlob(child) || mountRoot(fd, name) {
				return false
			}
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == unix.ENOTDIR || err == unix.ELOOP || err == unix.ENOENT {
				continue
			}
			if err != nil || !s.walkClean(sub, child, depth+1, count) {
				return false
			}
		}
	}
}

// checkMovedSymlink is checkSymlink for fromDir/from when it is a symlink
// that a rename or a link puts at toDir/to.
func (s *supervisor) checkMovedSymlink(t *target, fromDir int, from string, toDir int, to string) unix.Errno {
	var st unix.Stat_t
	if unix.Fstatat(fromDir, from, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return 0 // not a symlink (or gone: the call fails by itself)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fromDir, from, buf)
	if err != nil {
		return unix.EACCES
	}
	return s.checkSymlink(t, toDir, to, string(buf[:n]))
}

// checkSymlink refuses a symlink dir/name -> text that would give a path a
// deny glob matches to a place the glob does not cover. Deny globs are
// checked on canonical paths; a symlink at W/cfg to a directory in another
// writable root T would let the command make T/x/.env, which W/**/*.env
// does not match, and leave it at W/cfg/.env, which it does. So a symlink
// inside a glob's fixed prefix must lead (now) inside that prefix too, or
// to a file that cannot be replaced (on a read-only mount); a directory
// outside (even read-only: a writable root may be below it), a missing
// target outside, or anything unresolvable is refused.
func (s *supervisor) checkSymlink(t *target, dir int, name, text string) unix.Errno {
	d, ok := realDir(dir)
	if !ok {
		return unix.EACCES
	}
	at := filepath.Join(d, name)
	var scopes []string
	for _, g := range s.p.DenyGlobs {
		if f := fixedPrefix(g); policy.Within(at, f) {
			scopes = append(scopes, f)
		}
	}
	if len(scopes) == 0 {
		return 0
	}
	// procfs links change with the process (fd/N, cwd, root): refused.
	if policy.Within(filepath.Join(d, text), "/proc") || (filepath.IsAbs(text) && policy.Within(filepath.Clean(text), "/proc")) {
		return unix.EACCES
	}
	td, tn, _, errno := t.walkParent(dir, text)
	if errno != 0 {
		return unix.EACCES
	}
	defer unix.Close(td)
	var st unix.Stat_t
	var where string
	if err := unix.Fstatat(td, tn, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
		// Dangling: whatever is made there later is checked where it is.
		td2, ok := realDir(td)
		if !ok {
			return unix.EACCES
		}
		var fs unix.Statfs_t
		if unix.Fstatfs(td, &fs) == nil && fs.Flags&unix.ST_RDONLY != 0 {
			return 0 // it can never be made
		}
		where = filepath.Join(td2, tn)
	} else {
		fd, errno := t.openFollow(td, tn)
		if errno != 0 {
			return unix.EACCES
		}
		defer unix.Close(fd)
		if where, ok = realDir(fd); !ok || unix.Fstat(fd, &st) != nil {
			return unix.EACCES
		}
		var fs unix.Statfs_t
		if st.Mode&unix.S_IFMT != unix.S_IFDIR && unix.Fstatfs(fd, &fs) == nil && fs.Flags&unix.ST_RDONLY != 0 {
			return 0 // a file that stays what it is
		}
	}
	for _, f := range scopes {
		if !policy.Within(where, f) {
			return unix.EACCES
		}
	}
	return 0
}

// fixedPrefix is the directory of a glob's components before its first
// one with a wildcard (an escape counts as one: shorter is safer).
func fixedPrefix(g string) string {
	comps := policy.SplitPath(g)
	n := 0
	for n < len(comps) && !policy.HasMeta(comps[n]) {
		n++
	}
	return "/" + strings.Join(comps[:n], "/")
}

// mountRoot reports whether dir/name is a mount point (true when unsure):
// the kernel moves a mount along with a directory renamed above it, which
// would take a mask or a read-only carve-out off the path the policy names
// and let that path be made anew.
func mountRoot(dir int, name string) bool {
	var stx unix.Statx_t
	if unix.Statx(dir, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_TYPE, &stx) != nil {
		return true
	}
	return stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

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

func rawBind(fd int, sa []byte) unix.Errno {
	var p unsafe.Pointer
	if len(sa) > 0 {
		p = unsafe.Pointer(&sa[0])
	}
	_, _, e := unix.Syscall(unix.SYS_BIND, uintptr(fd), uintptr(p), uintptr(len(sa)))
	runtime.KeepAlive(sa)
	return e
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
// families on a goroutine, since a blocking TCP connect may take minutes
// and other notifications must not wait for it.
func (s *supervisor) connect(req *seccompNotif) {
	c := call{sock: int(int32(uint32(req.Args[0]))), addr: req.Args[1], addrLen: int(int32(uint32(req.Args[2])))}
	fail := func(errno unix.Errno) { s.answer(req.ID, noFD, errno) }
	if c.addrLen < 0 || c.addrLen > int(unsafe.Sizeof(unix.RawSockaddrAny{})) {
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
		if !s.idValid(req.ID) {
			unix.Close(sock)
			return
		}
		go func() {
			errno := rawConnect(sock, addr)
			unix.Close(sock)
			s.answer(req.ID, noFD, errno)
		}()
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

func rawConnect(fd int, sa []byte) unix.Errno {
	var p unsafe.Pointer
	if len(sa) > 0 {
		p = unsafe.Pointer(&sa[0])
	}
	_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(p), uintptr(len(sa)))
	runtime.KeepAlive(sa)
	return e
}

// superviseInit runs the command under the supervisor: it never returns
// (the init exits with the command's status).
func superviseInit(p *policy.Plan, lock int, path string, argv []string) {
	pid, lfd, err := startSupervised(p, path, argv)
	if err != nil {
		initFail(err)
	}
	go func() {
		os.Exit(waitCommand(pid))
	}()
	if lfd < 0 {
		select {} // the stub failed and says why; its status is the init's
	}
	s := &supervisor{listener: lfd, p: p, cwd: -1, lock: lock}
	// A bind to a path is made relative to its directory: this thread's
	// working directory must be its own to change.
	if unix.Unshare(unix.CLONE_FS) == nil {
		if fd, err := unix.Open(".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			s.cwd = fd
		}
	}
	s.serve()
	// Every command process is gone (or the listener broke: the pending
	// and future calls then fail with ENOSYS). The wait goroutine exits.
	unix.Close(lfd)
	for {
		time.Sleep(time.Hour)
	}
}

// ---- the creation lock ----

// Deny globs hold under concurrency. A supervisor checks a new name's
// path and then makes it relative to the directory it checked; another
// sandbox's supervisor checks a rename's new paths (walking a moved
// directory) and then renames. Each is sound alone, but interleaved a
// creation checked as d/f lands in secrets/f when d becomes secrets in
// between (TestCommandDenyGlobConcurrentRename: every run within 2 000
// tries). So every supervised creation (and every fs helper call of a
// plan with deny globs) holds a shared flock on one machine-wide lock file
// from its check to its creation, and every supervised rename holds it
// exclusively from its walk to the rename: no interleaving of sandboxes
// of any number of servers, of any user, is left. The file is in /dev/shm,
// which no sandbox view shows (each gets a fresh /dev), opened by the
// helper before it builds its view; where there is no /dev/shm, it is in
// the state directory's parent.

// creationLockName is the lock file's name.
const creationLockName = "exec-server-sandbox-creation.lock"

// creationLockWait bounds a wait for the lock (a process outside every
// sandbox holding it cannot stall a sandbox for longer): the call then
// fails with EAGAIN.
const creationLockWait = 30 * time.Second

// creationLockPath is where the lock file is ("" when nowhere).
func creationLockPath() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && unix.Access("/dev/shm", unix.W_OK|unix.X_OK) == nil {
		return "/dev/shm/" + creationLockName
	}
	if d := registryDir(); d != "" {
		return filepath.Join(filepath.Dir(d), creationLockName)
	}
	return ""
}

// openCreationLock opens (making it if needed, 0644: a shared flock needs
// only reading) the lock file at path, read-only and close-on-exec.
func openCreationLock(path string) (int, error) {
	if path == "" {
		return -1, errors.New("no place for the creation lock (no /dev/shm, no state directory)")
	}
	for try := 0; try < 10; try++ {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != unix.ENOENT {
			if err != nil {
				return -1, fmt.Errorf("creation lock %s: %w", path, err)
			}
			var st unix.Stat_t
			if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				unix.Close(fd)
				return -1, fmt.Errorf("creation lock %s: not a regular file", path)
			}
			return fd, nil
		}
		_ = os.MkdirAll(filepath.Dir(path), 0o700)
		// O_EXCL: never through a name planted meanwhile (protected_regular
		// would refuse O_CREAT on another user's file in a sticky dir).
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err == nil {
			_ = unix.Fchmod(fd, 0o644) // whatever the umask
			return fd, nil
		}
		if err != unix.EEXIST {
			return -1, fmt.Errorf("creation lock %s: %w", path, err)
		}
	}
	return -1, fmt.Errorf("creation lock %s: keeps changing", path)
}

// lockCreation takes the creation lock (exclusive for a rename), waiting
// at most creationLockWait; the returned func releases it. fd < 0: no lock
// (a plan without deny globs).
func lockCreation(fd int, exclusive bool) (func(), unix.Errno) {
	if fd < 0 {
		return func() {}, 0
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	deadline := time.Now().Add(creationLockWait)
	wait := 50 * time.Microsecond
	for {
		err := unix.Flock(fd, how|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(fd, unix.LOCK_UN) }, 0
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			return nil, unix.EACCES // fail closed
		}
		if time.Now().After(deadline) {
			return nil, unix.EAGAIN
		}
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Millisecond)
	}
}

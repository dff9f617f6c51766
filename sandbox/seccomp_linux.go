package sandbox

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// The seccomp filter is hand-written classic BPF (libseccomp needs cgo and
// headers; see docs/sandbox.md). It allows by default and denies, with
// EPERM, what the sandbox never needs: the reference's rule set plus the
// kernel attack surface of docs/sandbox.md ("Threat model").

// seccompArch is the AUDIT_ARCH of the running binary, 0 when unsupported
// (the sandbox then fails closed).
var seccompArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"arm64": unix.AUDIT_ARCH_AARCH64,
}[runtime.GOARCH]

// Offsets in struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on little-endian: both supported arches
	offArg1 = 24
	offArg2 = 32
	offArg3 = 40
)

// Syscalls denied under every policy.
var alwaysDenied = []uintptr{
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_KEYCTL,
	// The mount API: the view is final. Capabilities already make these
	// fail on the thread that runs foreign code, but seccomp covers every
	// thread of the helper, including Go runtime threads that kept theirs.
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR, unix.SYS_SETNS,
	// Host-wide switches (the fs helper shares the host's UTS namespace).
	unix.SYS_REBOOT, unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT, unix.SYS_SETHOSTNAME,
	unix.SYS_SETDOMAINNAME, unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD,
	// Host files without a path: a file handle names any file of a
	// filesystem (open_by_handle_at above; name_to_handle_at makes them);
	// fanotify marks a whole filesystem or mount and hands out descriptors
	// of whatever is accessed there. userfaultfd is kernel attack surface
	// a command never needs.
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_FANOTIFY_INIT, unix.SYS_FANOTIFY_MARK,
	unix.SYS_USERFAULTFD, unix.SYS_NFSSERVCTL,
}

// archDenied are denied syscalls that exist on some arches only.
var archDenied []uintptr

// legacyMknod is mknod(2)'s number where it exists (amd64), -1 elsewhere.
var legacyMknod = -1

// Syscalls denied when the network is restricted (as the reference's:
// recvfrom stays allowed for unix socketpairs).
var networkDenied = []uintptr{
	unix.SYS_CONNECT, unix.SYS_ACCEPT, unix.SYS_ACCEPT4, unix.SYS_BIND, unix.SYS_LISTEN,
	unix.SYS_GETPEERNAME, unix.SYS_GETSOCKNAME, unix.SYS_SHUTDOWN, unix.SYS_SENDTO,
	unix.SYS_SENDMMSG, unix.SYS_RECVMMSG, unix.SYS_GETSOCKOPT, unix.SYS_SETSOCKOPT,
}

// setIDCall is a syscall that sets a file mode: the offset of its mode
// argument, and of its open flags (0: it always applies the mode).
type setIDCall struct {
	nr          uintptr
	mode, flags uint32
}

// setIDCalls are the mode-setting calls checked for S_ISUID and S_ISGID
// (mknod and mknodat are checked with their device rule); arch files add
// the legacy ones.
var setIDCalls = []setIDCall{
	{unix.SYS_FCHMOD, offArg1, 0},
	{unix.SYS_FCHMODAT, offArg2, 0},
	{unix.SYS_FCHMODAT2, offArg2, 0},
	{unix.SYS_OPENAT, offArg3, offArg2},
}

// oTmpfileBit is __O_TMPFILE, the bit O_TMPFILE adds to O_DIRECTORY: an
// O_TMPFILE open applies its mode too.
const oTmpfileBit = unix.O_TMPFILE &^ unix.O_DIRECTORY

// noSetID answers EPERM when the mode at off has S_ISUID or S_ISGID, and
// falls through (nr still in the accumulator) otherwise. With flags, only
// when the flags at that offset create a file.
func noSetID(off, flags uint32) []unix.SockFilter {
	var p []unix.SockFilter
	if flags != 0 {
		p = append(p,
			bpfStmt(ldW, flags),
			bpfJump(jsetK, unix.O_CREAT|oTmpfileBit, 0, 3))
	}
	return append(p,
		bpfStmt(ldW, off),
		bpfJump(jsetK, unix.S_ISUID|unix.S_ISGID, 0, 1),
		bpfStmt(retK, retEPERM),
		bpfStmt(ldW, offNr))
}

func bpfStmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retNOSYS  = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retEACCES = unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)

	retEAFNOSUPPORT    = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
	retESOCKTNOSUPPORT = unix.SECCOMP_RET_ERRNO | uint32(unix.ESOCKTNOSUPPORT)
	retEPROTONOSUPPORT = unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)
	retKill            = unix.SECCOMP_RET_KILL_PROCESS
	ldW                = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeqK               = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jgeK               = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	jsetK              = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	retK               = unix.BPF_RET | unix.BPF_K
)

// seccompProgram builds the filter for a network mode. unixDgram allows
// AF_UNIX datagram sockets (a plan in which every path is writable).
func seccompProgram(network policy.Network, unixDgram bool) []unix.SockFilter {
	p := []unix.SockFilter{
		bpfStmt(ldW, offArch),
		bpfJump(jeqK, seccompArch, 1, 0),
		bpfStmt(retK, retKill), // a foreign arch (e.g. i386 int 0x80 on amd64)
		bpfStmt(ldW, offNr),
	}
	if runtime.GOARCH == "amd64" {
		// x32 syscall numbers: the same calls under other numbers.
		p = append(p, bpfJump(jgeK, 0x40000000, 0, 1), bpfStmt(retK, retKill))
	}
	deny := func(nr uintptr, ret uint32) {
		p = append(p, bpfJump(jeqK, uint32(nr), 0, 1), bpfStmt(retK, ret))
	}
	// block runs only for syscall nr; it must end in returns, so that the
	// code after it still has nr in the accumulator.
	argBlock := func(nr uintptr, block ...unix.SockFilter) {
		p = append(p, bpfJump(jeqK, uint32(nr), 0, uint8(len(block))))
		p = append(p, block...)
	}
	for _, nr := range append(alwaysDenied, archDenied...) {
		deny(nr, retEPERM)
	}
	// clone3 passes its flags in memory, which BPF cannot read: ENOSYS
	// makes libc fall back to clone, whose flags it can.
	deny(unix.SYS_CLONE3, retNOSYS)
	noNewUser := []unix.SockFilter{
		bpfStmt(ldW, offArg0),
		bpfJump(jsetK, unix.CLONE_NEWUSER, 0, 1),
		bpfStmt(retK, retEPERM),
		bpfStmt(retK, retAllow),
	}
	// No device nodes, whatever a thread's capabilities.
	noDevice := func(off uint32) []unix.SockFilter {
		return []unix.SockFilter{
			bpfStmt(ldW, off),
			bpfStmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, unix.S_IFMT),
			bpfJump(jeqK, unix.S_IFCHR, 2, 0),
			bpfJump(jeqK, unix.S_IFBLK, 1, 0),
			bpfStmt(retK, retAllow),
			bpfStmt(retK, retEPERM),
		}
	}
	argBlock(unix.SYS_MKNODAT, append(noSetID(offArg2, 0), noDevice(offArg2)...)...)
	if legacyMknod >= 0 {
		argBlock(uintptr(legacyMknod), append(noSetID(offArg1, 0), noDevice(offArg1)...)...)
	}
	// No set-user-ID or set-group-ID file (systemd's RestrictSUIDSGID=): a
	// root server's sandbox would otherwise leave a root-owned setuid
	// binary in a writable root (or /tmp) for any local user to run. The
	// chmod family always; open and openat when they create (their mode
	// is garbage otherwise: musl passes whatever is in the register).
	// openat2 carries its mode in memory: see commandProgram.
	for _, c := range setIDCalls {
		argBlock(c.nr, append(noSetID(c.mode, c.flags), bpfStmt(retK, retAllow))...)
	}
	// File leases: a lease on a host file readable through the view
	// (F_SETLEASE needs only ownership, and a root server's sandbox owns
	// root's files) stalls every host writer for the lease-break time.
	argBlock(unix.SYS_FCNTL,
		bpfStmt(ldW, offArg1),
		bpfJump(jeqK, unix.F_SETLEASE, 0, 1),
		bpfStmt(retK, retEPERM),
		bpfStmt(retK, retAllow))
	// No setting another process's limits (prlimit64 with a pid and a
	// new limit): the sandbox's init (PID 1) runs as the command's user,
	// and a soft RLIMIT_NOFILE of 0 set on it left its supervisor unable
	// to serve. A process still sets its own (libc's and Go's setrlimit
	// pass pid 0) and reads anyone's.
	argBlock(unix.SYS_PRLIMIT64,
		bpfStmt(ldW, offArg0),
		bpfJump(jeqK, 0, 4, 0), // pid 0: itself
		bpfStmt(ldW, offArg2),
		bpfJump(jeqK, 0, 0, 3),
		bpfStmt(ldW, offArg2+4),
		bpfJump(jeqK, 0, 0, 1), // new_limit NULL: a read
		bpfStmt(retK, retAllow),
		bpfStmt(retK, retEPERM))
	argBlock(unix.SYS_CLONE, noNewUser...)
	argBlock(unix.SYS_UNSHARE, noNewUser...)
	// AF_UNIX datagram sockets (SOCK_RAW is one too) take a destination
	// in sendmsg's msghdr, in memory that BPF cannot read: a command would
	// reach any host datagram socket it can name (/dev/log, journald),
	// even with the network restricted. Only stream and seqpacket sockets
	// (whose sendmsg refuses or ignores a destination) are left; their
	// connect is supervised (notify_socket_linux.go) when the network is enabled.
	unixSock := []unix.SockFilter{bpfStmt(retK, retAllow)}
	if !unixDgram {
		unixSock = []unix.SockFilter{
			bpfStmt(ldW, offArg1),
			bpfStmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, 0xf), // SOCK_TYPE_MASK
			bpfJump(jeqK, unix.SOCK_STREAM, 1, 0),
			bpfJump(jeqK, unix.SOCK_SEQPACKET, 0, 1),
			bpfStmt(retK, retAllow),
			bpfStmt(retK, retEACCES),
		}
	}
	var sock []unix.SockFilter
	if network == policy.NetworkRestricted {
		for _, nr := range networkDenied {
			deny(nr, retEPERM)
		}
		sock = []unix.SockFilter{
			bpfStmt(ldW, offArg0),
			bpfJump(jeqK, unix.AF_UNIX, 1, 0),
			bpfStmt(retK, retEPERM),
		}
	} else {
		// With the network on, the families and protocols a command may
		// open are the ones whose connect the supervisor answers without
		// holding its thread (notify_connect_linux.go): TCP and MPTCP
		// streams (waited for in its epoll), datagram and raw sockets,
		// netlink and packet sockets (no connect that waits), AF_UNIX.
		// The rest (SCTP, DCCP, SMC, TIPC, RDS, vsock, Bluetooth, …) is
		// answered as a kernel without them would, so a program takes
		// them for absent: a blocking SCTP connect nobody answered held
		// every other supervised call of the sandbox for minutes. They
		// are also kernel attack surface a command does not need.
		sock = []unix.SockFilter{
			bpfStmt(ldW, offArg0),
			bpfJump(jeqK, unix.AF_UNIX, 17, 0), // → unixSock
			bpfJump(jeqK, unix.AF_INET, 4, 0),  // → inet
			bpfJump(jeqK, unix.AF_INET6, 3, 0), // → inet
			bpfJump(jeqK, unix.AF_NETLINK, 13, 0),
			bpfJump(jeqK, unix.AF_PACKET, 12, 0),
			bpfStmt(retK, retEAFNOSUPPORT),
			// inet: the socket type, then a stream's protocol.
			bpfStmt(ldW, offArg1),
			bpfStmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, 0xf), // SOCK_TYPE_MASK
			bpfJump(jeqK, unix.SOCK_DGRAM, 8, 0),
			bpfJump(jeqK, unix.SOCK_RAW, 7, 0),
			bpfJump(jeqK, unix.SOCK_STREAM, 1, 0),
			bpfStmt(retK, retESOCKTNOSUPPORT), // SEQPACKET (SCTP), DCCP
			bpfStmt(ldW, offArg2),
			bpfJump(jeqK, 0, 3, 0),
			bpfJump(jeqK, unix.IPPROTO_TCP, 2, 0),
			bpfJump(jeqK, unix.IPPROTO_MPTCP, 1, 0),
			bpfStmt(retK, retEPROTONOSUPPORT), // SCTP, SMC
			bpfStmt(retK, retAllow),
		}
	}
	sock = append(sock, unixSock...)
	argBlock(unix.SYS_SOCKET, sock...)
	argBlock(unix.SYS_SOCKETPAIR, sock...)
	return append(p, bpfStmt(retK, retAllow))
}

// installSeccomp installs the filter on every thread of the process
// (TSYNC). no_new_privs must already be set on the calling thread.
func installSeccomp(network policy.Network, unixDgram bool) error {
	if seccompArch == 0 {
		return errors.New("seccomp: unsupported architecture " + runtime.GOARCH)
	}
	r, e := seccompSetFilter(unix.SECCOMP_FILTER_FLAG_TSYNC, seccompProgram(network, unixDgram))
	if e != 0 {
		return e
	}
	if r != 0 { // TSYNC could not sync thread r
		return fmt.Errorf("seccomp: thread %d could not be synchronized", r)
	}
	return nil
}

// commandProgram is the filter the init adds on its locked thread just
// before it forks an unsupervised command: openat2 answers ENOSYS (libc and
// Go fall back to openat, whose flags and mode the filter can read), as
// under systemd's RestrictSUIDSGID=, because its mode (set-user-ID or not)
// is in memory. A supervised command's openat2 goes to the supervisor,
// which reads the mode itself; the init's own threads keep openat2.
func commandProgram() []unix.SockFilter {
	return []unix.SockFilter{
		bpfStmt(ldW, offArch),
		bpfJump(jeqK, seccompArch, 1, 0),
		bpfStmt(retK, retAllow), // the other filter kills foreign arches
		bpfStmt(ldW, offNr),
		bpfJump(jeqK, unix.SYS_OPENAT2, 0, 1),
		bpfStmt(retK, retNOSYS),
		bpfStmt(retK, retAllow),
	}
}

// installCommandFilter installs commandProgram on the calling thread only
// (what it forks inherits it).
func installCommandFilter() error {
	if _, e := seccompSetFilter(0, commandProgram()); e != 0 {
		return e
	}
	return nil
}

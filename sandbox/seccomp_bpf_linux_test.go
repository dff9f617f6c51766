package sandbox

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// The hand-written filters (seccompProgram, notifyProgram, commandProgram)
// run here in golang.org/x/net/bpf's classic-BPF interpreter, without a
// kernel and without root, as gVisor tests its generated programs
// (pkg/seccomp/seccomp_test.go). The real sandboxes of confine_linux_test.go
// and notify_linux_test.go check that the kernel agrees.
//
// x/net/bpf is a packet VM: its absolute loads are big-endian, while the
// kernel loads seccomp_data's words in host order. The filters only load
// aligned 32-bit words (checked by runFilter), so the input is struct
// seccomp_data with each word written big-endian: the VM then sees the
// value the kernel would.

// seccompCall is one system call as the filter sees it.
type seccompCall struct {
	nr   uintptr
	arch uint32 // 0: the running binary's
	args [6]uint64
}

// seccompData encodes c as the VM must read it (see above).
func seccompData(c seccompCall) []byte {
	b := make([]byte, 64) // struct seccomp_data: nr, arch, ip, args[6]
	arch := c.arch
	if arch == 0 {
		arch = seccompArch
	}
	binary.BigEndian.PutUint32(b[offNr:], uint32(c.nr))
	binary.BigEndian.PutUint32(b[offArch:], arch)
	for i, a := range c.args {
		off := offArg0 + 8*i
		// args[i] is a u64: its low word first on little-endian arches.
		binary.BigEndian.PutUint32(b[off:], uint32(a))
		binary.BigEndian.PutUint32(b[off+4:], uint32(a>>32))
	}
	return b
}

// runFilter runs prog on c and returns the seccomp action it answers.
func runFilter(t *testing.T, prog []unix.SockFilter, c seccompCall) uint32 {
	t.Helper()
	ins := make([]bpf.Instruction, len(prog))
	for i, f := range prog {
		ins[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}.Disassemble()
		if ld, ok := ins[i].(bpf.LoadAbsolute); ok && (ld.Size != 4 || ld.Off%4 != 0) {
			t.Fatalf("instruction %d loads %d bytes at %d: the test's input layout assumes aligned words", i, ld.Size, ld.Off)
		}
	}
	vm, err := bpf.NewVM(ins) // rejects unknown opcodes and jumps out of the program, as the kernel does
	if err != nil {
		t.Fatalf("the program does not load: %v", err)
	}
	ret, err := vm.Run(seccompData(c))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return uint32(ret)
}

func actionName(a uint32) string {
	switch a {
	case retAllow:
		return "allow"
	case retEPERM:
		return "EPERM"
	case retNOSYS:
		return "ENOSYS"
	case retEACCES:
		return "EACCES"
	case retKill:
		return "kill"
	case unix.SECCOMP_RET_USER_NOTIF:
		return "notify"
	}
	return fmt.Sprintf("%#x", a)
}

func needSeccompArch(t *testing.T) {
	if seccompArch == 0 {
		t.Skip("no seccomp filter for", runtime.GOARCH)
	}
}

// TestSeccompProgramTable: seccompProgram's answer for each call, per
// network mode (NetworkProxied is NetworkEnabled to seccomp: the namespace
// cuts the rest) and with or without AF_UNIX datagram sockets.
func TestSeccompProgramTable(t *testing.T) {
	needSeccompArch(t)
	const (
		allow  = retAllow
		eperm  = retEPERM
		enosys = retNOSYS
		eacces = retEACCES

		eafnosupport    = retEAFNOSUPPORT
		esocktnosupport = retESOCKTNOSUPPORT
		eprotonosupport = retEPROTONOSUPPORT
		kill            = retKill
	)
	type row struct {
		name                string
		call                seccompCall
		restricted, enabled uint32
		dgram               uint32 // with unixDgram; 0: as without
	}
	args := func(a ...uint64) (r [6]uint64) { copy(r[:], a); return r }
	sys := func(nr uintptr, a ...uint64) seccompCall { return seccompCall{nr: nr, args: args(a...)} }
	same := func(name string, c seccompCall, want uint32) row {
		return row{name: name, call: c, restricted: want, enabled: want}
	}
	rows := []row{
		same("getpid", sys(unix.SYS_GETPID), allow),
		same("foreign arch", seccompCall{nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_I386}, kill),
		same("ptrace", sys(unix.SYS_PTRACE), eperm),
		same("io_uring_setup", sys(unix.SYS_IO_URING_SETUP), eperm),
		same("bpf", sys(unix.SYS_BPF), eperm),
		same("mount", sys(unix.SYS_MOUNT), eperm),
		same("setns", sys(unix.SYS_SETNS), eperm),
		same("open_by_handle_at", sys(unix.SYS_OPEN_BY_HANDLE_AT), eperm),
		same("userfaultfd", sys(unix.SYS_USERFAULTFD), eperm),
		same("clone3", sys(unix.SYS_CLONE3), enosys),
		same("clone thread", sys(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_THREAD), allow),
		same("clone newuser", sys(unix.SYS_CLONE, unix.CLONE_NEWUSER), eperm),
		same("unshare newns", sys(unix.SYS_UNSHARE, unix.CLONE_NEWNS), allow),
		same("unshare newuser", sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER|unix.CLONE_NEWNS), eperm),
		same("mknodat fifo", sys(unix.SYS_MKNODAT, 0, 0, unix.S_IFIFO|0o644), allow),
		same("mknodat file", sys(unix.SYS_MKNODAT, 0, 0, unix.S_IFREG|0o644), allow),
		same("mknodat char device", sys(unix.SYS_MKNODAT, 0, 0, unix.S_IFCHR|0o644), eperm),
		same("mknodat block device", sys(unix.SYS_MKNODAT, 0, 0, unix.S_IFBLK|0o644), eperm),
		same("mknodat setuid file", sys(unix.SYS_MKNODAT, 0, 0, unix.S_IFREG|unix.S_ISUID|0o755), eperm),
		same("fchmod 0755", sys(unix.SYS_FCHMOD, 3, 0o755), allow),
		same("fchmod setuid", sys(unix.SYS_FCHMOD, 3, unix.S_ISUID|0o755), eperm),
		same("fchmodat setgid", sys(unix.SYS_FCHMODAT, 0, 0, unix.S_ISGID|0o755), eperm),
		same("fchmodat2 setuid", sys(unix.SYS_FCHMODAT2, 0, 0, unix.S_ISUID|0o755), eperm),
		same("openat read, mode garbage", sys(unix.SYS_OPENAT, 0, 0, unix.O_RDONLY, unix.S_ISUID), allow),
		same("openat create 0644", sys(unix.SYS_OPENAT, 0, 0, unix.O_CREAT|unix.O_WRONLY, 0o644), allow),
		same("openat create setuid", sys(unix.SYS_OPENAT, 0, 0, unix.O_CREAT|unix.O_WRONLY, unix.S_ISUID|0o755), eperm),
		same("openat tmpfile setgid", sys(unix.SYS_OPENAT, 0, 0, unix.O_TMPFILE|unix.O_RDWR, unix.S_ISGID|0o755), eperm),
		same("openat2 (mode in memory)", sys(unix.SYS_OPENAT2), allow),
		same("fcntl getfl", sys(unix.SYS_FCNTL, 3, unix.F_GETFL), allow),
		same("fcntl setlease", sys(unix.SYS_FCNTL, 3, unix.F_SETLEASE), eperm),
		same("prlimit64 own, set", sys(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_NOFILE, 0x7ffd0000, 0), allow),
		same("prlimit64 own, read", sys(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_NOFILE, 0, 0x7ffd0000), allow),
		same("prlimit64 pid 1, read", sys(unix.SYS_PRLIMIT64, 1, unix.RLIMIT_NOFILE, 0, 0x7ffd0000), allow),
		same("prlimit64 pid 1, set", sys(unix.SYS_PRLIMIT64, 1, unix.RLIMIT_NOFILE, 0x7ffd0000, 0), eperm),
		same("prlimit64 pid 1, set (high word)", sys(unix.SYS_PRLIMIT64, 1, unix.RLIMIT_NOFILE, 0x7f0000000000, 0), eperm),
		{name: "socket inet", call: sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM), restricted: eperm, enabled: allow},
		{name: "socket inet6 dgram", call: sys(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM), restricted: eperm, enabled: allow},
		{name: "socket netlink", call: sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW), restricted: eperm, enabled: allow},
		{name: "socket vsock", call: sys(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM), restricted: eperm, enabled: eafnosupport},
		{name: "socket inet tcp", call: sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, unix.IPPROTO_TCP), restricted: eperm, enabled: allow},
		{name: "socket inet6 mptcp", call: sys(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP), restricted: eperm, enabled: allow},
		{name: "socket inet icmp", call: sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP), restricted: eperm, enabled: allow},
		{name: "socket inet raw", call: sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP), restricted: eperm, enabled: allow},
		{name: "socket packet", call: sys(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_DGRAM), restricted: eperm, enabled: allow},
		{name: "socket inet sctp stream", call: sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP), restricted: eperm, enabled: eprotonosupport},
		{name: "socket inet6 smc", call: sys(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM, 256), restricted: eperm, enabled: eprotonosupport},
		{name: "socket inet sctp seqpacket", call: sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC), restricted: eperm, enabled: esocktnosupport},
		{name: "socket inet6 dccp", call: sys(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DCCP), restricted: eperm, enabled: esocktnosupport},
		{name: "socket tipc", call: sys(unix.SYS_SOCKET, unix.AF_TIPC, unix.SOCK_STREAM), restricted: eperm, enabled: eafnosupport},
		{name: "socket smc", call: sys(unix.SYS_SOCKET, unix.AF_SMC, unix.SOCK_STREAM), restricted: eperm, enabled: eafnosupport},
		{name: "socket alg", call: sys(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET), restricted: eperm, enabled: eafnosupport},
		same("socket unix stream", sys(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), allow),
		same("socket unix seqpacket", sys(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_SEQPACKET), allow),
		{name: "socket unix dgram", call: sys(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC), restricted: eacces, enabled: eacces, dgram: allow},
		{name: "socket unix raw", call: sys(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_RAW), restricted: eacces, enabled: eacces, dgram: allow},
		{name: "socketpair unix dgram", call: sys(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM), restricted: eacces, enabled: eacces, dgram: allow},
		same("socketpair unix stream", sys(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM), allow),
		{name: "connect", call: sys(unix.SYS_CONNECT, 3), restricted: eperm, enabled: allow},
		{name: "bind", call: sys(unix.SYS_BIND, 3), restricted: eperm, enabled: allow},
		{name: "sendto", call: sys(unix.SYS_SENDTO, 3), restricted: eperm, enabled: allow},
		same("sendmsg (socketpairs)", sys(unix.SYS_SENDMSG, 3), allow),
		same("recvfrom (socketpairs)", sys(unix.SYS_RECVFROM, 3), allow),
	}
	if runtime.GOARCH == "amd64" {
		rows = append(rows,
			same("x32 getpid", sys(0x40000000|unix.SYS_GETPID), kill),
			same("iopl", sys(unix.SYS_IOPL), eperm),
			same("mknod char device", sys(unix.SYS_MKNOD, 0, unix.S_IFCHR|0o644), eperm),
			same("mknod fifo", sys(unix.SYS_MKNOD, 0, unix.S_IFIFO|0o644), allow),
			same("chmod setuid", sys(unix.SYS_CHMOD, 0, unix.S_ISUID|0o755), eperm),
			same("open create setuid", sys(unix.SYS_OPEN, 0, unix.O_CREAT, unix.S_ISUID|0o755), eperm),
			same("open read, mode garbage", sys(unix.SYS_OPEN, 0, unix.O_RDONLY, unix.S_ISUID), allow),
			same("creat setgid", sys(unix.SYS_CREAT, 0, unix.S_ISGID|0o755), eperm),
		)
	}
	modes := []struct {
		name    string
		network policy.Network
	}{
		{"restricted", policy.NetworkRestricted},
		{"enabled", policy.NetworkEnabled},
		{"proxied", policy.NetworkProxied},
	}
	for _, m := range modes {
		for _, dgram := range []bool{false, true} {
			prog := seccompProgram(m.network, dgram)
			for _, r := range rows {
				want := r.enabled
				if m.network == policy.NetworkRestricted {
					want = r.restricted
				}
				if dgram && r.dgram != 0 {
					want = r.dgram
				}
				if got := runFilter(t, prog, r.call); got != want {
					t.Errorf("%s, unixDgram=%v: %s = %s, want %s", m.name, dgram, r.name, actionName(got), actionName(want))
				}
			}
		}
	}
}

// TestNotifyProgramTable: which calls notifyProgram hands to the
// supervisor, for each of its two jobs (path creation under deny globs,
// connect under the managed proxy).
func TestNotifyProgramTable(t *testing.T) {
	needSeccompArch(t)
	const notify = unix.SECCOMP_RET_USER_NOTIF
	sys := func(nr uintptr, a ...uint64) seccompCall {
		c := seccompCall{nr: nr}
		copy(c.args[:], a)
		return c
	}
	type notifyRow struct {
		name            string
		call            seccompCall
		create, connect bool // answered notify when the program has that job
	}
	rows := []notifyRow{
		{"getpid", sys(unix.SYS_GETPID), false, false},
		{"foreign arch connect", seccompCall{nr: unix.SYS_CONNECT, arch: unix.AUDIT_ARCH_I386}, false, false},
		{"connect", sys(unix.SYS_CONNECT, 3), false, true},
		{"openat2", sys(unix.SYS_OPENAT2), true, false},
		{"mkdirat", sys(unix.SYS_MKDIRAT), true, false},
		{"mknodat", sys(unix.SYS_MKNODAT), true, false},
		{"linkat", sys(unix.SYS_LINKAT), true, false},
		{"symlinkat", sys(unix.SYS_SYMLINKAT), true, false},
		{"renameat", sys(unix.SYS_RENAMEAT), true, false},
		{"renameat2", sys(unix.SYS_RENAMEAT2), true, false},
		{"bind", sys(unix.SYS_BIND, 3), true, false},
		{"openat read", sys(unix.SYS_OPENAT, 0, 0, unix.O_RDONLY), false, false},
		{"openat create", sys(unix.SYS_OPENAT, 0, 0, unix.O_CREAT|unix.O_WRONLY), true, false},
		{"unlinkat", sys(unix.SYS_UNLINKAT), false, false},
	}
	if runtime.GOARCH == "amd64" {
		rows = append(rows,
			notifyRow{"open create", sys(unix.SYS_OPEN, 0, unix.O_CREAT), true, false},
			notifyRow{"open read", sys(unix.SYS_OPEN, 0, unix.O_RDONLY), false, false},
			notifyRow{"mkdir", sys(unix.SYS_MKDIR), true, false},
			notifyRow{"rename", sys(unix.SYS_RENAME), true, false},
		)
	}
	for _, create := range []bool{false, true} {
		for _, connect := range []bool{false, true} {
			prog := notifyProgram(create, connect)
			for _, r := range rows {
				want := uint32(retAllow)
				if create && r.create || connect && r.connect {
					want = notify
				}
				if got := runFilter(t, prog, r.call); got != want {
					t.Errorf("create=%v connect=%v: %s = %s, want %s", create, connect, r.name, actionName(got), actionName(want))
				}
			}
		}
	}
}

// TestCommandProgramTable: commandProgram turns only openat2 away, and
// leaves foreign arches to seccompProgram (which kills them).
func TestCommandProgramTable(t *testing.T) {
	needSeccompArch(t)
	prog := commandProgram()
	for _, tc := range []struct {
		name string
		call seccompCall
		want uint32
	}{
		{"openat2", seccompCall{nr: unix.SYS_OPENAT2}, retNOSYS},
		{"openat", seccompCall{nr: unix.SYS_OPENAT}, retAllow},
		{"getpid", seccompCall{nr: unix.SYS_GETPID}, retAllow},
		{"foreign arch openat2", seccompCall{nr: unix.SYS_OPENAT2, arch: unix.AUDIT_ARCH_I386}, retAllow},
	} {
		if got := runFilter(t, prog, tc.call); got != tc.want {
			t.Errorf("%s = %s, want %s", tc.name, actionName(got), actionName(tc.want))
		}
	}
}

package sandbox

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel ABI of the sandbox: the structures of the seccomp
// notification API and every call that needs package unsafe (as gVisor
// keeps its in pkg/seccomp/seccomp_unsafe.go). The rest of the package
// passes Go values; the pointers live here only.

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

// seccompSetFilter installs prog with seccomp(2) SECCOMP_SET_MODE_FILTER and
// flags. r is what the call returns: the listener with
// SECCOMP_FILTER_FLAG_NEW_LISTENER, the thread that could not be
// synchronized when TSYNC fails.
func seccompSetFilter(flags uintptr, prog []unix.SockFilter) (r uintptr, e unix.Errno) {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, e = unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	return r, e
}

// notifIoctl is ioctl(2) req on a notification listener, with arg: a
// seccompNotif to receive, a seccompResp to answer, a seccompAddfd, an id.
func notifIoctl[T seccompNotif | seccompResp | seccompAddfd | uint64](listener int, req uintptr, arg *T) unix.Errno {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), req, uintptr(unsafe.Pointer(arg)))
	return e
}

// notifAddfd installs a descriptor in a notifying task
// (SECCOMP_IOCTL_NOTIF_ADDFD) and returns its number there.
func notifAddfd(listener int, arg *seccompAddfd) (int, unix.Errno) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), ioctlNotifAddfd, uintptr(unsafe.Pointer(arg)))
	return int(r), e
}

// openHowOf decodes struct open_how from b (at least openHowSize bytes,
// read from the target's memory).
func openHowOf(b []byte) unix.OpenHow {
	_ = b[openHowSize-1]
	return *(*unix.OpenHow)(unsafe.Pointer(&b[0]))
}

// sockaddrMax is the largest socket address (struct sockaddr_storage).
const sockaddrMax = int(unsafe.Sizeof(unix.RawSockaddrAny{}))

func rawBind(fd int, sa []byte) unix.Errno {
	var p unsafe.Pointer
	if len(sa) > 0 {
		p = unsafe.Pointer(&sa[0])
	}
	_, _, e := unix.Syscall(unix.SYS_BIND, uintptr(fd), uintptr(p), uintptr(len(sa)))
	runtime.KeepAlive(sa)
	return e
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

// landlockCreateRuleset is landlock_create_ruleset(2) with the first
// fields fields of attr (an older ABI refuses a larger struct).
func landlockCreateRuleset(attr *rulesetAttr, fields int) (uintptr, unix.Errno) {
	size := uintptr(fields) * unsafe.Sizeof(attr.fs)
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(attr)), size, 0)
	return fd, e
}

// landlockAddPathRule is landlock_add_rule(2) of a path-beneath rule.
func landlockAddPathRule(ruleset uintptr, pb *unix.LandlockPathBeneathAttr) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, ruleset, unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(pb)), 0, 0, 0)
	return e
}

// capsetAllThreads is capset(2) on every thread of the process.
func capsetAllThreads(hdr *unix.CapUserHeader, data *[2]unix.CapUserData) syscall.Errno {
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	return e
}

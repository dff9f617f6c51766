package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// Privilege drop. Credentials, no_new_privs and a Landlock domain belong
// to a thread: everything here runs on the locked thread that then runs
// the operation or forks the command (which inherits that thread's state).
// seccomp is synced to every thread.

// Landlock access rights (uapi/linux/landlock.h), by the ABI that added them.
const (
	llExecute    = 1 << 0
	llWriteFile  = 1 << 1
	llReadFile   = 1 << 2
	llReadDir    = 1 << 3
	llRemoveDir  = 1 << 4
	llRemoveFile = 1 << 5
	llMakeChar   = 1 << 6
	llMakeDir    = 1 << 7
	llMakeReg    = 1 << 8
	llMakeSock   = 1 << 9
	llMakeFifo   = 1 << 10
	llMakeBlock  = 1 << 11
	llMakeSym    = 1 << 12
	llRefer      = 1 << 13 // ABI 2
	llTruncate   = 1 << 14 // ABI 3
	llIoctlDev   = 1 << 15 // ABI 5

	llBindTCP    = 1 << 0 // ABI 4
	llConnectTCP = 1 << 1

	llScopeAbstractUnix = 1 << 0 // ABI 6
	llScopeSignal       = 1 << 1

	llFileRights = llExecute | llWriteFile | llReadFile | llTruncate | llIoctlDev

	llRO  = llExecute | llReadFile | llReadDir
	llRW  = llRO | llWriteFile | llRemoveDir | llRemoveFile | llMakeDir | llMakeReg | llMakeSock | llMakeFifo | llMakeSym | llRefer | llTruncate
	llDev = llReadFile | llWriteFile | llTruncate | llIoctlDev
)

// landlockRule grants access beneath path (a path of the view).
type landlockRule struct {
	path   string
	access uint64
}

// landlockABI is the kernel's Landlock ABI version, 0 when unavailable.
func landlockABI() int {
	r, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(r)
}

// handledFS is every filesystem right the ABI knows.
func handledFS(abi int) uint64 {
	h := uint64(llExecute | llWriteFile | llReadFile | llReadDir | llRemoveDir | llRemoveFile |
		llMakeChar | llMakeDir | llMakeReg | llMakeSock | llMakeFifo | llMakeBlock | llMakeSym)
	if abi >= 2 {
		h |= llRefer
	}
	if abi >= 3 {
		h |= llTruncate
	}
	if abi >= 5 {
		h |= llIoctlDev
	}
	return h
}

// rulesetAttr is struct landlock_ruleset_attr up to ABI 6 (the kernel
// accepts a shorter struct than its own).
type rulesetAttr struct {
	fs, net, scoped uint64
}

// landlockRuleset makes a Landlock ruleset with rules, at the kernel's ABI
// (best effort: what an older ABI cannot express is left to the mount view
// and seccomp, the first layers). It runs before the capabilities go:
// opening a rule's path may need them.
func landlockRuleset(rules []landlockRule, network policy.Network) (int, error) {
	abi := landlockABI()
	if abi < 1 {
		return -1, fmt.Errorf("landlock: not available")
	}
	handled := handledFS(abi)
	attr := rulesetAttr{fs: handled}
	fields := 1 // how much of rulesetAttr this ABI reads
	if abi >= 4 {
		fields++
		if network == policy.NetworkRestricted {
			attr.net = llBindTCP | llConnectTCP // no rule: no TCP at all
		}
	}
	if abi >= 6 {
		fields++
		attr.scoped = llScopeAbstractUnix | llScopeSignal
	}
	fd, e := landlockCreateRuleset(&attr, fields)
	if e != 0 {
		return -1, fmt.Errorf("landlock: create ruleset: %w", e)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(int(fd))
		}
	}()
	for _, r := range rules {
		pfd, err := unix.Open(r.path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			if err == unix.ENOENT {
				continue // not in the view: nothing to grant
			}
			return -1, fmt.Errorf("landlock: open %s: %w", r.path, err)
		}
		access := r.access & handled
		var st unix.Stat_t
		if unix.Fstat(pfd, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access &= llFileRights // a file rule takes file rights only
		}
		pb := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(pfd)}
		e := landlockAddPathRule(fd, &pb)
		unix.Close(pfd)
		if e != 0 {
			return -1, fmt.Errorf("landlock: rule %s: %w", r.path, e)
		}
	}
	ok = true
	return int(fd), nil
}

// lockdown confines the calling thread (and, for seccomp, the process):
// the Landlock ruleset is made while the capabilities are still there,
// then they go, then Landlock and seccomp are enforced.
//
// At Landlock ABI 1 (kernels 5.13 to 5.18) a domain forbids every rename
// or link across directories, even inside writable roots: as go-landlock's
// best effort, the layer is then left out (the mount view, the empty
// capability sets and seccomp still hold).
// unixDgram allows AF_UNIX datagram sockets (see seccompProgram).
func lockdown(rules []landlockRule, network policy.Network, unixDgram bool) error {
	ruleset := -1
	if landlockABI() >= 2 {
		var err error
		if ruleset, err = landlockRuleset(rules, network); err != nil {
			return stepErr("landlock", err)
		}
		defer unix.Close(ruleset)
	}
	if err := dropPrivileges(); err != nil {
		return stepErr("drop privileges", err)
	}
	if ruleset >= 0 {
		if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); e != 0 {
			return stepErr("landlock", fmt.Errorf("restrict: %w", e))
		}
	}
	return stepErr("seccomp", installSeccomp(network, unixDgram))
}

// dropPrivileges empties every capability set of the calling thread and
// sets no_new_privs.
func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	last := 63
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("bounding set: drop %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return dropOtherThreads(&hdr, &data)
}

// dropOtherThreads empties the capability sets of every other thread of
// the process too and sets no_new_privs there (credentials are per
// thread: the Go runtime's threads kept everything the locked one
// dropped, which only seccomp then limited). With no permitted set left
// and no_new_privs, a thread's bounding set no longer matters. A binary
// built with cgo cannot reach its threads (syscall.AllThreadsSyscall says
// ENOTSUP: cgo makes threads the runtime does not know): its other threads
// stay as they were, behind seccomp; the shipped binary is built without
// cgo (.ci/run checks it is static).
func dropOtherThreads(hdr *unix.CapUserHeader, data *[2]unix.CapUserData) error {
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
	if e == syscall.ENOTSUP {
		return nil
	}
	if e != 0 {
		return fmt.Errorf("no_new_privs on every thread: %w", e)
	}
	if _, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("ambient capabilities of every thread: %w", e)
	}
	if e := capsetAllThreads(hdr, data); e != 0 {
		return fmt.Errorf("capset on every thread: %w", e)
	}
	return nil
}

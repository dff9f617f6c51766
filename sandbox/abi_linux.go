package sandbox

// The kernel ABI of the sandbox: the structures of the seccomp
// notification API.

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

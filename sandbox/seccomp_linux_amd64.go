package sandbox

import "golang.org/x/sys/unix"

func init() {
	legacyMknod = unix.SYS_MKNOD
	archDenied = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM}
}

package sandbox

import "golang.org/x/sys/unix"

func init() {
	legacyMknod = unix.SYS_MKNOD
	archDenied = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM}
}

func init() {
	legacyCreate = map[string]uintptr{
		"open": unix.SYS_OPEN, "creat": unix.SYS_CREAT, "mkdir": unix.SYS_MKDIR, "mknod": unix.SYS_MKNOD,
		"link": unix.SYS_LINK, "symlink": unix.SYS_SYMLINK, "rename": unix.SYS_RENAME,
	}
}

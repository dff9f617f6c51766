package sandbox

import "golang.org/x/sys/unix"

func init() {
	legacyMknod = unix.SYS_MKNOD
	archDenied = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_LOOKUP_DCOOKIE}
	setIDCalls = append(setIDCalls,
		setIDCall{unix.SYS_CHMOD, offArg1, 0},
		setIDCall{unix.SYS_OPEN, offArg2, offArg1},
		setIDCall{unix.SYS_CREAT, offArg1, 0})
}

func init() {
	legacyCreate = map[string]uintptr{
		"open": unix.SYS_OPEN, "creat": unix.SYS_CREAT, "mkdir": unix.SYS_MKDIR, "mknod": unix.SYS_MKNOD,
		"link": unix.SYS_LINK, "symlink": unix.SYS_SYMLINK, "rename": unix.SYS_RENAME,
	}
}

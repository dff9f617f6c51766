//go:build !linux

package protocol

import "syscall"

// muslText is empty off Linux: the musl texts belong to Linux errno numbers,
// and a client on macOS or a BSD renders its own system's errors with Go's
// texts (OSErrorText's fallback). A nil map answers every lookup with "absent".
var muslText map[syscall.Errno]string

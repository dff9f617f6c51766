//go:build !linux

package rawsock

import (
	"errors"
	"net"
	"syscall"
)

// Wrap returns c.
func Wrap(c net.Conn) net.Conn { return c }

// RawConn is nil: no raw writes here.
func RawConn(net.Conn) syscall.RawConn { return nil }

// WritevOnce needs Linux.
func WritevOnce(syscall.RawConn, [][]byte) (int, error) {
	return 0, errors.New("rawsock: writes that do not wait need Linux")
}

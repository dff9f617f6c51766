//go:build !linux

package relay

import (
	"errors"
	"net"
	"syscall"
)

// rawConn: writes that do not wait are built for Linux only (the relay's
// platform); elsewhere a peer link's frames go through the legs'
// goroutines (linkGather takes none).
func rawConn(net.Conn) syscall.RawConn { return nil }

func writevOnce(syscall.RawConn, [][]byte) (int, error) {
	return 0, errors.New("relay: writes that do not wait need Linux")
}

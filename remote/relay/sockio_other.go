//go:build !linux

package relay

import (
	"errors"
	"net"
	"syscall"
)

// Raw socket reads and writes are built for Linux only (the relay's
// platform, sockio_linux.go); elsewhere sockets are the net package's,
// and a peer link's frames go through the legs' goroutines (linkGather
// takes none: no descriptor).

func wrapSock(c net.Conn) net.Conn { return c }

func rawConn(net.Conn) syscall.RawConn { return nil }

func writevOnce(syscall.RawConn, [][]byte) (int, error) {
	return 0, errors.New("relay: writes that do not wait need Linux")
}

//go:build !linux

package rawsock

import (
	"errors"
	"net"
)

// Conn is not built here: Wrap returns connections as they are and Of
// gives nil.
type Conn struct{ net.Conn }

// Wrap returns c.
func Wrap(c net.Conn) net.Conn { return c }

// Of is nil.
func Of(net.Conn) *Conn { return nil }

// Writev writes iov whole.
func (c *Conn) Writev(iov [][]byte) (int, error) {
	b := net.Buffers(iov)
	n, err := b.WriteTo(c.Conn)
	return int(n), err
}

// TryWritev needs Linux.
func (c *Conn) TryWritev([][]byte) (int, error) {
	return 0, errors.New("rawsock: writes that do not wait need Linux")
}

//go:build !linux

package transport

import (
	"net"
	"syscall"
)

// socketOf is nil off Linux: reads go straight to the connection.
func socketOf(net.Conn) syscall.RawConn { return nil }

func setRcvlowat(syscall.RawConn, int) {}

func (co *coalescer) readAtLeast(p []byte, _ int) (int, error) { return co.Conn.Read(p) }

type batchRead struct{ pending error }

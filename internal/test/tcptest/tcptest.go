// Package tcptest is the servers tests stand up on a local socket: a
// listener whose every connection is handed to a function, and an echo.
package tcptest

import (
	"io"
	"net"
	"testing"
)

// Serve listens on network and addr ("tcp", "127.0.0.1:0"; "unix", a
// path) and runs handle on a goroutine of its own for each connection
// until the test ends, which closes the listener. handle owns the
// connection.
func Serve(t testing.TB, network, addr string, handle func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln
}

// Close is a handler that closes each connection at once.
func Close(c net.Conn) { c.Close() }

// Echo is a 127.0.0.1 TCP server writing back what each connection
// sends; its address.
func Echo(t testing.TB) string {
	t.Helper()
	return Serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(c, c)
	}).Addr().String()
}

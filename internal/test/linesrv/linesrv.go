// Package linesrv is the TCP server of the network proxy tests: on a
// loopback address of the host it answers each line a client sends with
// reply(line), and counts the connections it accepted (so a test can
// prove a refused connection never reached it).
package linesrv

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// Pong answers every line with "pong\n".
func Pong(string) string { return "pong\n" }

// Start serves on addr (an IP, port chosen by the kernel) until the test
// ends and returns the port and the count of accepted connections.
// 127.0.0.1 always exists, so failing to listen there fails the test;
// other loopback addresses (127.0.0.2, ...) are not routable on every
// host, and a test that needs one skips.
func Start(t testing.TB, addr string, reply func(line string) string) (int, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		if addr == "127.0.0.1" {
			t.Fatal(err)
		}
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := io.WriteString(c, reply(sc.Text())); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, &n
}

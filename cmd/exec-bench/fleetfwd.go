package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/execgo/exec-server/internal/rawsock"
)

// The floor of one more process on a frame's path. A cross-node frame
// crosses one more relay process than a node-local one; how much of what
// that adds is the relay's, and how much any process in the way costs on
// this machine (the wake-up of an idle process, the extra socket each way,
// the cores it shares with everything else)? The single_forwarded rows put
// a bare forwarder between the harness clients and the single-node relay:
// a process that reads each connection's bytes and writes them to the
// other side, nothing else (no websocket, no frame, no sealing), so what
// it adds is a lower bound on what any separate process on the path adds.
// It copies through user space, as a relay must to read its frames (a
// splice would keep the bytes in the kernel), with the relay's raw socket
// reads and writes (internal/rawsock), so that what it adds is not the Go
// runtime's sysmon waking with every message.

// fleetForward listens on loopback, prints its address, and forwards each
// connection to target until stdin closes.
func fleetForward(target string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			c = rawsock.Wrap(c)
			d, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer d.Close()
			d = rawsock.Wrap(d)
			done := make(chan struct{}, 2)
			go func() { copyPlain(d, c); done <- struct{}{} }()
			go func() { copyPlain(c, d); done <- struct{}{} }()
			<-done
		}()
	}
}

// copyPlain copies src to dst through a buffer of its own, one write for
// each read (io.Copy would splice between two TCP sockets).
func copyPlain(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// startForwarder starts fleetForward in a process of its own, in front of
// the relay at base (an http URL): the process, the address it listens
// on, and stop, which ends it (once; later calls do nothing).
func startForwarder(base string) (p *fleetProc, addr string, stop func(), err error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, "", nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, "", nil, err
	}
	cmd := exec.Command(self, "fleet-forward", u.Host)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", nil, err
	}
	stop = sync.OnceFunc(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		stop()
		return nil, "", nil, fmt.Errorf("forwarder: %w", err)
	}
	return &fleetProc{name: "forwarder", cmd: cmd}, strings.TrimSpace(line), stop, nil
}

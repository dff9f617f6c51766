package sandbox

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// handOver connects to path as an init would and sends a listening
// socket; it returns the byte the server answered (0 when none).
func handOver(t *testing.T, path string) byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.(*net.UnixConn).WriteMsgUnix([]byte{1}, unix.UnixRights(int(f.Fd())), nil); err != nil {
		return 0 // already dropped
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var ack [1]byte
	_, _ = c.Read(ack[:])
	return ack[0]
}

// TestProxyHandoffChecksPeer: the handoff takes listeners only from the
// init it waits for; another process (another sandboxed command that can
// see the socket) is dropped.
func TestProxyHandoffChecksPeer(t *testing.T) {
	h, path, err := NewProxyHandoff(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.Accept(ctx, 1, os.Getpid()+1_000_000) // not this process
		done <- err
	}()
	if ack := handOver(t, path); ack != 0 {
		t.Fatalf("an impostor's listeners were taken (ack %d)", ack)
	}
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept: %v, want the deadline", err)
	}

	h2, path2, err := NewProxyHandoff(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	go func() {
		lns, err := h2.Accept(context.Background(), 1, os.Getpid())
		for _, l := range lns {
			l.Close()
		}
		done <- err
	}()
	if ack := handOver(t, path2); ack != 1 {
		t.Fatalf("the expected peer's listeners were not taken (ack %d)", ack)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

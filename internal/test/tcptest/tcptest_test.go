package tcptest

import (
	"io"
	"net"
	"testing"
	"time"
)

func TestEchoAndClose(t *testing.T) {
	c, err := net.Dial("tcp", Echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
		t.Fatalf("echo %q, %v", b, err)
	}
	ln := Serve(t, "tcp", "127.0.0.1:0", Close)
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := d.Read(b); err != io.EOF {
		t.Fatalf("read %d, %v from a closed connection; want EOF", n, err)
	}
}

package peerproc

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/asnobody"
)

const childEnv = "PEERPROC_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		child(mode, os.Getenv("PEERPROC_TEST_ADDR"))
		return
	}
	os.Exit(m.Run())
}

// child connects to addr as mode says, reports "connected" and waits for
// stdin to close.
func child(mode, addr string) {
	d := net.Dialer{}
	if src := os.Getenv("PEERPROC_TEST_SRC"); src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	c.Write([]byte("x"))
	switch mode {
	case "hold":
	case "close":
		c.Close()
	case "inflight":
		// The socket travels in a unix socket's queue: no descriptor
		// table holds it.
		sp, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		f, _ := c.(*net.TCPConn).File()
		if err := syscall.Sendmsg(sp[0], []byte{0}, syscall.UnixRights(int(f.Fd())), nil, 0); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		f.Close()
		c.Close()
	}
	fmt.Println("connected")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

type fixture struct {
	t  *testing.T
	l  net.Listener
	ck *Checker
}

func newFixture(t *testing.T) *fixture {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ck, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t, l, ck}
}

// accept takes the next connection and checks it.
func (x *fixture) accept() Verdict {
	x.t.Helper()
	x.l.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := x.l.Accept()
	if err != nil {
		x.t.Fatal(err)
	}
	defer c.Close()
	return x.ck.Check(c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort())
}

// hostAddrs lists this host's IPv4 addresses other than loopback.
func hostAddrs() []string {
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			out = append(out, n.IP.String())
		}
	}
	return out
}

// startFrom runs a sandboxed child whose socket is bound to src; nil when
// it cannot connect from there.
func (x *fixture) startFrom(mode, src string) *exec.Cmd {
	x.t.Helper()
	return x.startEnv(mode, true, "PEERPROC_TEST_SRC="+src)
}

// start runs a child that connects in mode; sandboxed: in a new mount
// namespace (and user namespace when not root), as the server's sandboxes.
func (x *fixture) start(mode string, sandboxed bool) *exec.Cmd {
	x.t.Helper()
	cmd := x.startEnv(mode, sandboxed)
	if cmd == nil {
		x.t.Fatal("child could not connect")
	}
	return cmd
}

func (x *fixture) startEnv(mode string, sandboxed bool, env ...string) *exec.Cmd {
	x.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode, "PEERPROC_TEST_ADDR="+x.l.Addr().String()), env...)
	if sandboxed {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
		if os.Getuid() != 0 {
			cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		}
	}
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		x.t.Skipf("cannot start a process in a new mount namespace: %v", err)
	}
	x.t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "connected" {
		x.t.Logf("child: %q", line)
		return nil
	}
	return cmd
}

func TestCheck(t *testing.T) {
	x := newFixture(t)
	// No sandbox counted: a live socket is served, one nobody holds any
	// more is not (a sandbox that sent its request and ended).
	x.start("hold", true)
	if v := x.accept(); v.Refuse {
		t.Fatalf("no sandbox counted: %+v", v)
	}
	x.start("close", true)
	if v := x.accept(); !v.Refuse {
		t.Fatalf("no sandbox counted, a closed socket: %+v", v)
	}
	// From here on the sandboxed children are counted, as process/start
	// counts its sandboxes with the host's network.
	t.Cleanup(Sandboxes.Begin())
	// This process, no sandbox running.
	c, err := net.Dial("tcp", x.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if v := x.accept(); v.Refuse {
		t.Fatalf("own connection, no sandbox: %+v", v)
	}
	c.Close()
	// A child in the server's own namespace: not a sandbox.
	x.start("hold", false)
	if v := x.accept(); v.Refuse {
		t.Fatalf("unsandboxed child: %+v", v)
	}
	// A child in another mount namespace, below the server: a sandbox.
	box := x.start("hold", true)
	if v := x.accept(); !v.Refuse || v.Pid != box.Process.Pid {
		t.Fatalf("sandboxed child %d: %+v", box.Process.Pid, v)
	}
	// While it runs, this process still connects.
	c, err = net.Dial("tcp", x.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if v := x.accept(); v.Refuse || !strings.Contains(v.Reason, fmt.Sprint(os.Getpid())) {
		t.Fatalf("own connection while a sandbox runs: %+v", v)
	}
	c.Close()
	// A sandboxed peer bound to another address of the host.
	if addrs := hostAddrs(); len(addrs) > 0 {
		for _, a := range addrs {
			if box := x.startFrom("hold", a); box != nil {
				if v := x.accept(); !v.Refuse || v.Pid != box.Process.Pid {
					t.Fatalf("sandboxed child bound to %s: %+v", a, v)
				}
				break
			}
		}
	}
	// A sandboxed peer that closed its socket, or hid it in flight.
	for _, mode := range []string{"close", "inflight"} {
		x.start(mode, true)
		if v := x.accept(); !v.Refuse {
			t.Fatalf("sandboxed child, %s: %+v", mode, v)
		} else {
			t.Logf("%s: %s", mode, v.Reason)
		}
	}
}

func TestIsLocal(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, c := range []struct {
		local, remote string
		want          bool
	}{
		{"127.0.0.1:80", "127.0.0.1:5000", true},
		{"127.0.0.1:80", "127.0.0.2:5000", true},
		{"[::1]:80", "[::1]:5000", true},
		{"[::ffff:127.0.0.1]:80", "[::ffff:127.0.0.1]:5000", true},
		{"10.0.0.5:80", "10.0.0.5:5000", true},
		{"10.0.0.5:80", "10.0.0.6:5000", false},
		{"127.0.0.1:80", "10.0.0.6:5000", true},
	} {
		if got := IsLocal(ap(c.local), ap(c.remote)); got != c.want {
			t.Errorf("IsLocal(%s, %s) = %v", c.local, c.remote, got)
		}
	}
}

// The cost of a local client's check, with and without a sandbox running.
func BenchmarkCheck(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ck, err := New()
	if err != nil {
		b.Fatal(err)
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	local, remote := s.LocalAddr().(*net.TCPAddr).AddrPort(), s.RemoteAddr().(*net.TCPAddr).AddrPort()
	run := func(b *testing.B) {
		for b.Loop() {
			if v := ck.Check(local, remote); v.Refuse {
				b.Fatal(v)
			}
		}
	}
	b.Run("no sandbox", run)
	uncount := Sandboxes.Begin()
	b.Run("no sandbox, one counted", run)
	uncount()
	b.Run("remote peer's extra: host addresses", func(b *testing.B) {
		a := netip.MustParseAddr("198.51.100.7")
		for b.Loop() {
			if hostAddr(a) {
				b.Fatal("198.51.100.7 is this host's")
			}
		}
	})
	b.Run("sock_diag only", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := socketInode(remote, local); err != nil {
				b.Fatal(err)
			}
		}
	})
	cmd := exec.Command("unshare", "-m", "sleep", "60")
	if os.Getuid() != 0 {
		cmd = exec.Command("unshare", "-U", "-m", "sleep", "60")
	}
	if err := cmd.Start(); err != nil {
		b.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(100 * time.Millisecond) // until unshare has entered the namespace
	b.Run("a sandbox, not counted", run)
	defer Sandboxes.Begin()()
	b.Run("one sandbox running", run)
}

// The same for a server that is not root (its sandboxes in user
// namespaces it owns).
func TestCheckAsNobody(t *testing.T) {
	asnobody.Run(t, "", "^TestCheck$", nil, "cannot start a process in a new mount namespace")
}

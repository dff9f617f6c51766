package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// The managed proxy's route into a NetworkProxied sandbox. The command's
// network namespace holds only loopback; the init, still root there and
// before it builds the view, brings lo up, listens on the route's ports on
// 127.0.0.1 and sends the listening sockets (SCM_RIGHTS) over the unix
// socket at ProxyRoute.Socket to the server. The server then accepts the
// command's connections on them directly: no relay process, no copy in
// the sandbox, and nothing the command can reach but those two ports (a
// socket keeps the namespace it was made in, so the server's outbound
// connections are the host's while the listeners stay the command's).

// proxyListen is the init's side; it does nothing without a route.
func proxyListen(p *policy.Plan) error {
	if p.Network != policy.NetworkProxied {
		return nil
	}
	r := p.Proxy
	if r == nil || r.HTTPPort == 0 {
		return errors.New("network proxy: no route")
	}
	if err := loopbackUp(); err != nil {
		return stepErr("network proxy: loopback up", err)
	}
	fds := make([]int, 0, 4)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, port := range []uint16{r.HTTPPort, r.SOCKSPort} {
		if port == 0 {
			continue
		}
		fd, err := listenLoopback(port)
		if err != nil {
			return stepErr(fmt.Sprintf("network proxy: listen on 127.0.0.1:%d", port), err)
		}
		fds = append(fds, fd)
	}
	if r.TransparentPort != 0 {
		tfds, err := transparentListen(r.TransparentPort) // transparent_linux.go
		if err != nil {
			return err
		}
		fds = append(fds, tfds...)
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return stepErr("network proxy: socket", err)
	}
	defer unix.Close(s)
	if err := unix.Connect(s, &unix.SockaddrUnix{Name: r.Socket}); err != nil {
		return stepErr("network proxy: connect "+r.Socket, err)
	}
	if err := unix.Sendmsg(s, []byte{byte(len(fds))}, unix.UnixRights(fds...), nil, 0); err != nil {
		return stepErr("network proxy: hand over the listeners", err)
	}
	// Wait for the server to have taken them: the command must not run
	// before its proxy is there to answer (its connections would queue,
	// not fail, but a server that could not take them must stop it).
	var ack [1]byte
	if n, err := unix.Read(s, ack[:]); err != nil || n != 1 || ack[0] != 1 {
		return fmt.Errorf("network proxy: the server did not take the listeners (%v)", err)
	}
	return nil
}

// loopbackUp sets lo up in the current network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

func listenLoopback(port uint16) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Listen(fd, 1024); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// ProxyHandoff is the server's side of a route: a unix socket in a
// private directory that one init connects to.
type ProxyHandoff struct {
	dir string
	ln  *net.UnixListener
}

// NewProxyHandoff makes the socket of a route in a new private directory
// under base ("" for the temporary directory).
func NewProxyHandoff(base string) (*ProxyHandoff, string, error) {
	dir, err := os.MkdirTemp(base, "exec-server-netproxy-")
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	return &ProxyHandoff{dir: dir, ln: ln}, path, nil
}

// Accept waits (until ctx ends) for the init, the process pid, and returns
// the listeners it sends: n of them, in the route's order (HTTP, then
// SOCKS5). A connection from any other process is dropped: the socket's
// directory may be visible to other sandboxed commands (a read-only view
// of the host still lets them connect to a socket), and one of them must
// not hand over its own listeners in place of the init's to get this
// process's policy.
func (h *ProxyHandoff) Accept(ctx context.Context, n, pid int) ([]net.Listener, error) {
	stop := context.AfterFunc(ctx, func() { h.ln.Close() })
	defer stop()
	var c *net.UnixConn
	for {
		var err error
		c, err = h.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if peerPid(c) == pid {
			break
		}
		c.Close()
	}
	defer c.Close()
	context.AfterFunc(ctx, func() { c.Close() })
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err == nil {
		for _, m := range msgs {
			got, err := unix.ParseUnixRights(&m)
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	var lns []net.Listener
	fail := func(err error) ([]net.Listener, error) {
		for _, l := range lns {
			l.Close()
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	if len(fds) != n {
		return fail(fmt.Errorf("network proxy: the sandbox sent %d listeners, want %d", len(fds), n))
	}
	for len(fds) > 0 {
		f := os.NewFile(uintptr(fds[0]), "netproxy-listener")
		fds = fds[1:]
		l, err := net.FileListener(f) // dups the descriptor
		f.Close()
		if err != nil {
			return fail(err)
		}
		lns = append(lns, l)
	}
	if _, err := c.Write([]byte{1}); err != nil {
		return fail(err)
	}
	return lns, nil
}

// peerPid is the pid of the process that connected c (SO_PEERCRED, in
// the server's PID namespace), or -1.
func peerPid(c *net.UnixConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1
	}
	pid := -1
	_ = rc.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// Close removes the socket and its directory.
func (h *ProxyHandoff) Close() {
	h.ln.Close()
	os.RemoveAll(h.dir)
}

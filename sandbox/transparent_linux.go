package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Transparent TCP (the reference's networkProxyTransparentTcp): raw TCP
// connect()s of a NetworkProxied command to any address but its own
// 127.0.0.1 and ::1 land on the managed proxy, which learns where they
// were going (SO_ORIGINAL_DST) and applies the policy. In the command's
// network namespace, before the view is built, the init:
//
//   - listens on 127.0.0.1:T and [::1]:T (ProxyRoute.TransparentPort)
//     and hands both sockets to the server with the other listeners;
//   - adds default routes (IPv4 and IPv6) through lo: without a route a
//     connect() fails before netfilter sees it. Nothing leaves through
//     them: lo only loops back, and the namespace has no other device;
//   - installs one nftables table (family inet): in the nat hook of
//     output, TCP to an address other than 127.0.0.1 / ::1 is redirected
//     to port T; in the filter hook of output, anything left for an
//     address outside 127.0.0.0/8 / ::1 (UDP, ICMP, …) is dropped, so
//     sendmsg fails with EPERM at once.
//
// The command has no capability in the namespace afterwards, so it can
// change neither the routes nor the table. Why netfilter and not the
// seccomp supervisor replacing the socket (SECCOMP_IOCTL_NOTIF_ADDFD): the
// socket would have to be made outside the namespace, losing its options
// and binding, and every connect() would stop in the supervisor; with
// REDIRECT the kernel does the routing and conntrack remembers the target.

// transparentTable is the nftables table of a namespace's redirect.
const transparentTable = "exec_server_transparent"

// transparentListen opens the two transparent listeners (IPv4 first),
// then routes the namespace's TCP to them. It runs in the init, in the
// command's network namespace, with lo up.
func transparentListen(port uint16) ([]int, error) {
	v4, err := listenLoopback(port)
	if err != nil {
		return nil, stepErr(fmt.Sprintf("transparent TCP: listen on 127.0.0.1:%d", port), err)
	}
	v6, err := listenLoopback6(port)
	if err != nil {
		unix.Close(v4)
		return nil, stepErr(fmt.Sprintf("transparent TCP: listen on [::1]:%d", port), err)
	}
	if err := transparentRoute(port); err != nil {
		unix.Close(v4)
		unix.Close(v6)
		return nil, err
	}
	return []int{v4, v6}, nil
}

func listenLoopback6(port uint16) (int, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: int(port), Addr: [16]byte{15: 1}}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Listen(fd, 1024); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// transparentRoute adds the routes and the nftables table of the current
// network namespace (lo must be up).
func transparentRoute(port uint16) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return stepErr("transparent TCP: find lo", err)
	}
	for _, r := range []*netlink.Route{
		{LinkIndex: lo.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Src: net.IPv4(127, 0, 0, 1)},
		{LinkIndex: lo.Attrs().Index, Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}},
	} {
		if err := netlink.RouteAdd(r); err != nil {
			return stepErr("transparent TCP: route "+r.Dst.String()+" via lo", err)
		}
	}
	c, err := nftables.New()
	if err != nil {
		return stepErr("transparent TCP: nftables", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: transparentTable})
	nat := c.AddChain(&nftables.Chain{Name: "redirect", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	accept := nftables.ChainPolicyAccept
	filter := c.AddChain(&nftables.Chain{Name: "drop", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	v4lo, v6lo := []byte{127, 0, 0, 1}, net.IPv6loopback.To16()
	redirect := []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1, Flags: 2}, // NF_NAT_RANGE_PROTO_SPECIFIED
	}
	// TCP to anything but 127.0.0.1 / ::1 goes to the transparent port.
	c.AddRule(&nftables.Rule{Table: t, Chain: nat, Exprs: concat(
		family(unix.NFPROTO_IPV4), tcp(), daddr(16, nil, v4lo, expr.CmpOpNeq), redirect)})
	c.AddRule(&nftables.Rule{Table: t, Chain: nat, Exprs: concat(
		family(unix.NFPROTO_IPV6), tcp(), daddr(24, nil, v6lo, expr.CmpOpNeq), redirect)})
	// What is left for anything outside loopback is dropped (after the
	// redirect, whose packets now go to 127.0.0.1 / ::1).
	drop := []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}
	c.AddRule(&nftables.Rule{Table: t, Chain: filter, Exprs: concat(
		family(unix.NFPROTO_IPV4), daddr(16, []byte{255, 0, 0, 0}, []byte{127, 0, 0, 0}, expr.CmpOpNeq), drop)})
	c.AddRule(&nftables.Rule{Table: t, Chain: filter, Exprs: concat(
		family(unix.NFPROTO_IPV6), daddr(24, nil, v6lo, expr.CmpOpNeq), drop)})
	if err := c.Flush(); err != nil {
		return stepErr("transparent TCP: nftables rules", err)
	}
	return nil
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// family matches the packet's protocol family (inet tables see both).
func family(f byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f}},
	}
}

func tcp() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
}

// daddr compares the destination address (at off in the network header,
// masked when mask is not nil) with want.
func daddr(off uint32, mask, want []byte, op expr.CmpOp) []expr.Any {
	e := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(want))}}
	if mask != nil {
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(mask)), Mask: mask, Xor: make([]byte, len(mask))})
	}
	return append(e, &expr.Cmp{Op: op, Register: 1, Data: want})
}

// transparentProbeMode is the helper mode that tries the setup in a new,
// empty network namespace and exits 0 when it worked.
const transparentProbeMode = "transparent-probe"

func transparentProbeMain() {
	if err := loopbackUp(); err != nil {
		initFail(stepErr("transparent TCP: loopback up", err))
	}
	if _, err := transparentListen(40000); err != nil {
		initFail(err)
	}
	os.Exit(0)
}

var (
	transparentMu sync.Mutex
	transparentOK bool
)

// TransparentSupport reports whether this host can route a command's raw
// TCP into its proxy (nftables NAT in a network namespace, IPv6 on lo):
// the setup is tried in a throwaway namespace by a helper, until it has
// worked once (a failure, maybe of a loaded host, is tried again). A
// request for transparent TCP must be refused when it returns an error.
// SimulateEnv's "transparent" makes it fail.
func TransparentSupport() error {
	for _, f := range strings.Split(os.Getenv(SimulateEnv), ",") {
		if strings.TrimSpace(f) == "transparent" {
			return errors.New("transparent TCP routing is unavailable (simulated by " + SimulateEnv + ")")
		}
	}
	if s := Probe(); !s.Available {
		return fmt.Errorf("transparent TCP needs the sandbox: missing %s", s.Missing)
	}
	transparentMu.Lock()
	defer transparentMu.Unlock()
	if transparentOK {
		return nil
	}
	if err := probeTransparent(); err != nil {
		return err
	}
	transparentOK = true
	return nil
}

func probeTransparent() error {
	var stderr bytes.Buffer
	cmd := &exec.Cmd{
		Path:   "/proc/self/exe",
		Args:   []string{"exec-server-sandbox", helperArg, transparentProbeMode},
		Stderr: &stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWNET,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if os.Getuid() != 0 {
		uid, gid := idMaps()
		cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = sysMaps(uid), sysMaps(gid)
		cmd.SysProcAttr.GidMappingsEnableSetgroups = false
	}
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("transparent TCP probe: %w", err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("transparent TCP routing is unavailable: %s (%v)", strings.TrimSpace(stderr.String()), err)
		}
		return nil
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		return errors.New("transparent TCP probe: no answer within a minute")
	}
}

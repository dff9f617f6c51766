package netproxy

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (SOL_IP) and IP6T_SO_ORIGINAL_DST
// (SOL_IPV6): the destination conntrack recorded before the redirect.
const soOriginalDst = 80

// sockOriginalDst reads fd's original destination: a sockaddr_in, or a
// sockaddr_in6 when v6.
func sockOriginalDst(fd int, v6 bool) (netip.AddrPort, error) {
	var buf [unix.SizeofSockaddrInet6]byte
	level := unix.SOL_IP
	if v6 {
		level = unix.SOL_IPV6
	}
	n := uint32(len(buf))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), soOriginalDst,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0); e != 0 {
		return netip.AddrPort{}, e
	}
	// Both start with the family (host order) and the port (network
	// order); the address follows (at 4 for IPv4, at 8 for IPv6).
	port := binary.BigEndian.Uint16(buf[2:4])
	if v6 {
		if n < unix.SizeofSockaddrInet6 {
			return netip.AddrPort{}, unix.EINVAL
		}
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(buf[8:24])), port), nil
	}
	if n < unix.SizeofSockaddrInet4 {
		return netip.AddrPort{}, unix.EINVAL
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[4:8])), port), nil
}

//go:build !linux

package netproxy

import (
	"errors"
	"net/netip"
)

func sockOriginalDst(int, bool) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("transparent proxy: needs Linux")
}

//go:build !linux

package sandbox

import "errors"

// TransparentSupport: routing raw TCP into the proxy needs a Linux network
// namespace with nftables.
func TransparentSupport() error {
	return errors.New("transparent TCP routing needs Linux network namespaces and nftables")
}

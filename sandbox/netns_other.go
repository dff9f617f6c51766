//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"net"
)

// ProxyHandoff is not available off Linux: NetworkProxied needs a network
// namespace.
type ProxyHandoff struct{}

// NewProxyHandoff fails off Linux.
func NewProxyHandoff(string) (*ProxyHandoff, string, error) {
	return nil, "", errors.New("a managed network proxy needs Linux network namespaces")
}

// Accept fails off Linux.
func (*ProxyHandoff) Accept(context.Context, int, int) ([]net.Listener, error) {
	return nil, errors.New("a managed network proxy needs Linux network namespaces")
}

// Close does nothing.
func (*ProxyHandoff) Close() {}

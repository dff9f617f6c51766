package protocol

import (
	"slices"
	"strconv"

	"github.com/execgo/exec-server/jsonrpc"
)

// Capabilities are environmentInfo.capabilities: which optional features
// the executor implements. A client reads it as a map; on the wire the
// reference's keys come first, in the order 0.171 sends them
// (CapabilityOrder), then this server's own keys sorted. encoding/json
// would sort every key, which a client that compares the object with the
// reference's (or a human reading both) sees as a different answer.
type Capabilities map[string]bool

// The reference's capability keys (0.171), in its order.
const (
	CapNetworkProxyLaunch                          = "networkProxyLaunch"
	CapNetworkProxyReviewDomains                   = "networkProxyReviewDomains"
	CapNetworkProxyTransparentTCP                  = "networkProxyTransparentTcp"
	CapCredentialMasking                           = "credentialMasking"
	CapCredentialMaskingCustomProviders            = "credentialMaskingCustomProviders"
	CapCapabilityDiscoverySandbox                  = "capabilityDiscoverySandbox"
	CapFsWatchMissing                              = "fsWatchMissing"
	CapCapabilityDiscoveryV2                       = "capabilityDiscoveryV2"
	CapEnvironmentConfigRead                       = "environmentConfigRead"
	CapHTTPHeaderEnvVars                           = "httpHeaderEnvVars"
	CapSandboxedFileStreaming                      = "sandboxedFileStreaming"
	CapFileWriteStreaming                          = "fileWriteStreaming"
	CapShellSnapshotV2                             = "shellSnapshotV2"
	CapWindowsMxc                                  = "windowsMxc"
	CapLinuxRootWritePreservesDevices              = "linuxRootWritePreservesDevices"
	CapLinuxApprovedRootWritePreservesRestrictions = "linuxApprovedRootWritePreservesRestrictions"
)

// CapabilityOrder is the reference's key order (measured: initialize on
// `codex exec-server --listen stdio`, 0.171.0; 0.169.0 is the same
// without networkProxyTransparentTcp).
var CapabilityOrder = []string{
	CapNetworkProxyLaunch,
	CapNetworkProxyReviewDomains,
	CapNetworkProxyTransparentTCP,
	CapCredentialMasking,
	CapCredentialMaskingCustomProviders,
	CapCapabilityDiscoverySandbox,
	CapFsWatchMissing,
	CapCapabilityDiscoveryV2,
	CapEnvironmentConfigRead,
	CapHTTPHeaderEnvVars,
	CapSandboxedFileStreaming,
	CapFileWriteStreaming,
	CapShellSnapshotV2,
	CapWindowsMxc,
	CapLinuxRootWritePreservesDevices,
	CapLinuxApprovedRootWritePreservesRestrictions,
}

// MarshalJSON writes the reference's keys in CapabilityOrder, then the
// others sorted.
func (c Capabilities) MarshalJSON() ([]byte, error) {
	if c == nil {
		return []byte("null"), nil
	}
	b := make([]byte, 0, 64*len(c))
	b = append(b, '{')
	add := func(k string, v bool) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = jsonrpc.AppendString(b, k)
		b = append(b, ':')
		b = strconv.AppendBool(b, v)
	}
	for _, k := range CapabilityOrder {
		if v, ok := c[k]; ok {
			add(k, v)
		}
	}
	var rest []string
	for k := range c {
		if !slices.Contains(CapabilityOrder, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		add(k, c[k])
	}
	return append(b, '}'), nil
}

package server

import (
	"regexp"
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// TestEnvInfoCapabilityOrder: environment/info's capabilities are the
// reference's sixteen keys in 0.171's order (as its initialize answered),
// then this server's own keys sorted; executorVersion is 0.171.0.
func TestEnvInfoCapabilityOrder(t *testing.T) {
	p := stdioPeer(t, New(Config{}))
	p.init()
	raw := string(p.call("environment/info", map[string]any{}))
	if !strings.Contains(raw, `"executorVersion":"0.171.0"`) {
		t.Errorf("executorVersion: %s", raw)
	}
	m := regexp.MustCompile(`"capabilities":\{([^}]*)\}`).FindStringSubmatch(raw)
	if m == nil {
		t.Fatalf("no capabilities in %s", raw)
	}
	var keys []string
	for _, kv := range strings.Split(m[1], ",") {
		k, _, _ := strings.Cut(kv, ":")
		keys = append(keys, strings.Trim(k, `"`))
	}
	// The reference 0.171.0's order, from its initialize answer.
	ref := "networkProxyLaunch networkProxyReviewDomains networkProxyTransparentTcp credentialMasking " +
		"credentialMaskingCustomProviders capabilityDiscoverySandbox fsWatchMissing capabilityDiscoveryV2 " +
		"environmentConfigRead httpHeaderEnvVars sandboxedFileStreaming fileWriteStreaming shellSnapshotV2 " +
		"windowsMxc linuxRootWritePreservesDevices linuxApprovedRootWritePreservesRestrictions"
	want := ref + " fsWatch linuxSandbox processList processTimeout terminateGrace"
	if got := strings.Join(keys, " "); got != want {
		t.Errorf("capability keys\n got %s\nwant %s", got, want)
	}
	if strings.Join(protocol.CapabilityOrder, " ") != ref {
		t.Errorf("protocol.CapabilityOrder differs from the reference's: %v", protocol.CapabilityOrder)
	}
}

package sandbox

import "testing"

// TestTransparentSupport: on this host (nftables NAT, IPv6) the probe
// helper sets the redirect up in a throwaway namespace.
func TestTransparentSupport(t *testing.T) {
	if s := Probe(); !s.Available {
		t.Skipf("sandbox not available: %s", s.Missing)
	}
	if err := TransparentSupport(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(SimulateEnv, "transparent")
	if err := TransparentSupport(); err == nil {
		t.Fatal("simulated: no error")
	}
}

package netproxy

import (
	"net/netip"
	"testing"
)

func TestPolicyCheck(t *testing.T) {
	domains := map[string]string{
		"Example.COM.":        "allow",
		"*.sub.example.org":   "allow",
		"**.apex.example":     "allow",
		"region*.tunnel.net":  "allow",
		"bad.sub.example.org": "deny",
		"localhost":           "allow",
		"10.0.0.7":            "allow",
		"[::1]":               "allow",
		"*.review.example":    "review",
	}
	p, err := NewPolicy(domains, []string{"watched.example.com"}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host    string
		allowed bool
		reason  string
		review  bool
	}{
		{"example.com", true, "", false},
		{"api.example.com", false, ReasonNotAllowed, true},
		{"a.sub.example.org", true, "", false},
		{"a.b.sub.example.org", true, "", false},
		{"sub.example.org", false, ReasonNotAllowed, true}, // *. is not the apex
		{"bad.sub.example.org", false, ReasonDenied, false},
		{"apex.example", true, "", false},
		{"x.apex.example", true, "", false},
		{"region1.tunnel.net", true, "", false},
		{"xregion1.tunnel.net", false, ReasonNotAllowed, true},
		{"localhost", true, "", false},
		{"127.0.0.1", false, ReasonNotAllowedLocal, false},
		{"192.168.1.1", false, ReasonNotAllowedLocal, false},
		{"100.64.0.1", false, ReasonNotAllowedLocal, false},
		{"10.0.0.7", true, "", false},
		{"::1", true, "", false},
		{"fe80::1", false, ReasonNotAllowedLocal, false},
		{"8.8.8.8", false, ReasonNotAllowed, true},
		{"a.review.example", false, ReasonNotAllowed, true},
		{"watched.example.com", false, ReasonNotAllowed, true},
		{"x.localhost", false, ReasonNotAllowedLocal, false},
		{"", false, ReasonNotAllowed, false},
	}
	for _, c := range cases {
		v := p.Check(c.host, "GET", false)
		if v.Allowed != c.allowed || v.Reason != c.reason || v.Review != c.review {
			t.Errorf("%q: got %+v, want allowed %v reason %q review %v", c.host, v, c.allowed, c.reason, c.review)
		}
	}
	if v := p.Check("localhost", "GET", false); !v.LocalOK {
		t.Error("an explicitly allowed localhost must be dialable")
	}
	if v := p.Check("example.com", "GET", false); v.LocalOK {
		t.Error("example.com must not reach local addresses")
	}
}

func TestPolicyModesAndErrors(t *testing.T) {
	all, err := NewPolicy(map[string]string{"*": "allow"}, nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method string
		tunnel bool
		ok     bool
	}{{"GET", false, true}, {"HEAD", false, true}, {"OPTIONS", false, true}, {"POST", false, false}, {"CONNECT", true, false}} {
		if v := all.Check("any.example", c.method, c.tunnel); v.Allowed != c.ok {
			t.Errorf("limited %s: %+v", c.method, v)
		}
	}
	if v := all.Check("127.0.0.1", "GET", false); v.Allowed {
		t.Error("* must not allow local addresses")
	}
	local, _ := NewPolicy(map[string]string{"*": "allow"}, nil, false, true)
	if v := local.Check("127.0.0.1", "POST", false); !v.Allowed || !v.LocalOK {
		t.Errorf("allowLocalBinding: %+v", v)
	}
	for _, bad := range []map[string]string{{"*": "deny"}, {"x": "maybe"}, {"": "allow"}, {"[a": "allow"}} {
		if _, err := NewPolicy(bad, nil, false, false); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM.":   "example.com",
		"example.com:80": "example.com",
		"[::1]:443":      "::1",
		"::1":            "::1",
		" a.b ":          "a.b",
		"fe80::1%25lo0":  "fe80::1%lo0",
	} {
		if got := NormalizeHost(in); got != want {
			t.Errorf("NormalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "1.1.1.1": true, "2606:4700::1111": true,
		"127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.0.1": false, "169.254.1.1": false,
		"0.0.0.0": false, "100.64.0.1": false, "198.18.0.1": false, "224.0.0.1": false, "255.255.255.255": false,
		"::1": false, "fc00::1": false, "fe80::1": false, "::ffff:127.0.0.1": false, "::": false,
	} {
		if got := IsPublic(netip.MustParseAddr(addr)); got != want {
			t.Errorf("IsPublic(%s) = %v", addr, got)
		}
	}
}

// FuzzPolicy: any pattern and host: NewPolicy refuses or compiles, Check
// never panics, a denied pattern always wins over the same allowed one.
func FuzzPolicy(f *testing.F) {
	f.Add("*.example.com", "a.example.com")
	f.Add("**.Example.COM.", "example.com")
	f.Add("[::1]", "::1")
	f.Add("region*.x.net", "region1.x.net")
	f.Add("[a-", "a")
	f.Fuzz(func(t *testing.T, pattern, host string) {
		p, err := NewPolicy(map[string]string{pattern: "allow"}, nil, false, false)
		if err != nil {
			return
		}
		h := NormalizeHost(host)
		v := p.Check(h, "GET", false)
		if v.Allowed && IsLocalHost(h) && !p.exact[h] {
			t.Fatalf("local host %q allowed by pattern %q", h, pattern)
		}
		if d, err := NewPolicy(map[string]string{pattern: "deny"}, nil, false, false); err == nil {
			d.allow = p.allow
			if d.Check(h, "GET", false).Allowed {
				t.Fatalf("%q both allowed and denied, allowed", h)
			}
		}
	})
}

package netproxy

import "testing"

// TestPolicyReviewDomains pins the reference 0.171's review-domain
// semantics, measured on its executor (networkProxy.proxy.reviewDomains):
// an allowlisted review domain still goes to the decider (a miss without
// one); patterns and case as for domains; the deny list and the local
// check come first; a "none" value is no entry.
func TestPolicyReviewDomains(t *testing.T) {
	p, err := NewPolicy(map[string]string{
		"a.example": "allow", "*.w.example": "allow", "e.example": "deny", "*": "allow", "n.example": "none",
		"127.0.0.1": "allow",
	}, []string{"a.example", "*.w.example", "e.example", "OK.G.example", "127.0.0.2"}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host    string
		allowed bool
		reason  string
		review  bool
	}{
		{"a.example", false, ReasonNotAllowed, true},   // allowlisted, reviewed
		{"q.w.example", false, ReasonNotAllowed, true}, // by pattern
		{"w.example", true, "", false},                 // *. is not the apex; "*" allows it
		{"e.example", false, ReasonDenied, false},      // deny first, never asked
		{"ok.g.example", false, ReasonNotAllowed, true},
		{"127.0.0.2", false, ReasonNotAllowedLocal, false}, // local first, never asked
		{"n.example", true, "", false},                     // none: "*" decides
		{"other.example", true, "", false},
	}
	for _, c := range cases {
		v := p.Check(c.host, "GET", false)
		if v.Allowed != c.allowed || v.Reason != c.reason || v.Review != c.review {
			t.Errorf("%q: got %+v, want allowed %v reason %q review %v", c.host, v, c.allowed, c.reason, c.review)
		}
	}
	if _, err := NewPolicy(map[string]string{"x.example": "maybe"}, nil, false, false); err == nil {
		t.Error("an unknown value was accepted")
	}
}

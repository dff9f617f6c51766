package main

import "testing"

// row.check reads the three target kinds; a delta target (the relay
// rows) compares ours minus ref, not their ratio.
func TestCheck(t *testing.T) {
	st := func(med float64) *stats { return &stats{N: 10, Median: med} }
	cases := []struct {
		target   string
		ours     *stats
		ref      *stats
		want     *bool
		wantRate bool
	}{
		{"delta <= 0.3", st(0.5), st(0.25), ptrBool(true), true},
		{"delta <= 0.3", st(0.6), st(0.25), ptrBool(false), true},
		{"delta <= 0.3", st(0.1), nil, nil, false},
		{"ratio >= 0.5", st(40), st(100), ptrBool(false), true},
		{"ratio >= 0.5", st(60), st(100), ptrBool(true), true},
		{"abs <= 0.2", st(0.19), nil, ptrBool(true), false},
		{"abs <= 0.2", &stats{N: 10, Median: 0.1, Err: "boom"}, nil, nil, false},
	}
	for _, c := range cases {
		r := &row{Target: c.target, Ours: c.ours, Ref: c.ref}
		r.check()
		if (r.Met == nil) != (c.want == nil) || (r.Met != nil && *r.Met != *c.want) {
			t.Errorf("%s ours %v ref %v: met %v, want %v", c.target, c.ours, c.ref, r.Met, c.want)
		}
		if (r.Ratio != nil) != c.wantRate {
			t.Errorf("%s: ratio %v", c.target, r.Ratio)
		}
	}
}

func ptrBool(b bool) *bool { return &b }

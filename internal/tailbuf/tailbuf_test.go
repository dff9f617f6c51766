package tailbuf

import "testing"

func TestKeepsTheTail(t *testing.T) {
	cases := []struct {
		writes []string
		want   string
	}{
		{[]string{"ab"}, "ab"},
		{[]string{"abc", "de"}, "bcde"},
		{[]string{"abcdefgh"}, "efgh"},
		{nil, ""},
	}
	for _, tc := range cases {
		b := &Buffer{Max: 4}
		for _, w := range tc.writes {
			if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write(%q) = %d, %v", w, n, err)
			}
		}
		if got := b.String(); got != tc.want {
			t.Errorf("after %q: %q, want %q", tc.writes, got, tc.want)
		}
	}
}

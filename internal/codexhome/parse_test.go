package codexhome

import "testing"

// TestParseTOMLRules: what a differential run against the reference showed
// (the first TOML library tried lost the other elements of an array that
// holds an inline table, and accepted extending an inline table), and the
// scalar forms the reference rewrites. Expected texts are the reference's.
func TestParseTOMLRules(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`k = ['C:\x', { "" = "" }, 1e-7]` + "\n", `k = ['C:\x', { "" = "" }, 0.0000001]` + "\n"},
		{"d = 1979-05-27T07:32:00+00:00\ne = 1979-05-27t07:32:00.000z\nf = 07:32:00.1000000009\n",
			"d = 1979-05-27T07:32:00+00:00\ne = 1979-05-27T07:32:00Z\nf = 07:32:00.1\n"},
		{"[a.b]\nx = 1\n[a]\ny = 2\n", "[a]\ny = 2\n\n[a.b]\nx = 1\n"},
		{"i = 0o17\nj = 0b11\nk = 1_000\nl = +5\nm = -nan\nn = +inf\n", "i = 15\nj = 3\nk = 1000\nl = 5\nm = nan\nn = inf\n"},
		{"s = \"\"\"\nml\\\n  cont\"\"\"\nr = '''\nraw\\n'''\n", "s = \"mlcont\"\nr = 'raw\\n'\n"},
	} {
		tab, err := ParseTOML(c.doc)
		if err != nil {
			t.Errorf("%q: %v", c.doc, err)
			continue
		}
		if got := Encode(tab); got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.doc, got, c.want)
		}
	}
	for _, bad := range []string{
		"a = {x = 1}\n[a.b]\ny = 2\n",
		"a = 1\na = 2\n",
		"x = [{a = 1}]\n[[x]]\n",
		"[t]\n[t]\n",
	} {
		if _, err := ParseTOML(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

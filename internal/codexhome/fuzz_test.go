package codexhome

import "testing"

// FuzzEncode: whatever the decoder accepts, Encode writes a document that
// decodes again to the same thing (compared through a second Encode), and
// Project never panics on it.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{
		"a = 1\n[b]\nc = \"x\"\n",
		"[[a]]\nx = 1\n[a.s]\ny = 'q\"'\n[[a]]\n",
		"s = \"a'b\\\"c\\n\\u0001\"\nt = 1979-05-27T07:32:00.5-07:00\nf = -0.0\n",
		"x = [{a = 1}, {b = [1, 2]}]\n\"k k\" = {}\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		tab, err := ParseTOML(doc)
		if err != nil {
			return
		}
		out := Encode(tab)
		again, err := ParseTOML(out)
		if err != nil {
			t.Fatalf("encoded document does not parse: %v\ninput %q\noutput %q", err, doc, out)
		}
		if out2 := Encode(again); out2 != out {
			t.Fatalf("not stable:\n%q\n%q", out, out2)
		}
		_ = Encode(Project(tab, [][]string{{"a"}, {"x", "y"}}))
	})
}

package codexhome

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestSkills: the reference's answers for the same tree (codex 0.169.0):
// sorted by path, hidden and nested directories scanned, the name from the
// directory when the front matter has none, descriptions on one line, and
// files without front matter or description left out with a warning.
func TestSkills(t *testing.T) {
	root := filepath.Join(t.TempDir(), "skills")
	files := map[string]string{
		"a/SKILL.md":         "---\nname: zzz\ndescription: first one\n---\nbody\n",
		"b/SKILL.md":         "---\nname: aaa\ndescription: \"quoted: desc\"\n---\n",
		".hidden/x/SKILL.md": "---\nname: hid\ndescription: hidden\n---\n",
		"d/SKILL.md":         "---\nname: dname\ndescription: with short\nmetadata:\n  short-description: shorty\n---\n",
		"e/SKILL.md":         "---\nname: ename\n---\n",
		"f/SKILL.md":         "---\nname: fname\ndescription: >\n  folded\n  text\nlicense: MIT\n---\n",
		"g/SKILL.md":         "---\nname: outer\ndescription: outer one\n---\n",
		"g/inner/SKILL.md":   "---\nname: inner\ndescription: inner one\n---\n",
		"l/SKILL.md":         "---\nname: 'single q'\ndescription: |\n  line1\n  line2\n---\n",
		"m/SKILL.md":         "---\nname: mm\ndescription: plain # comment\n---\n",
		"n/SKILL.md":         "---\ndescription: noname\n---\n",
		"o/SKILL.md":         "---\nname: cont\ndescription: Deploys\n  the app.\n---\n",
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	skills, bad := Skills(root)
	var got [][2]string
	for _, s := range skills {
		got = append(got, [2]string{s.Name, s.Description})
	}
	want := [][2]string{{"hid", "hidden"}, {"zzz", "first one"}, {"aaa", "quoted: desc"}, {"dname", "with short"},
		{"fname", "folded text"}, {"outer", "outer one"}, {"inner", "inner one"}, {"single q", "line1 line2"}, {"mm", "plain"}, {"n", "noname"}, {"cont", "Deploys the app."}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if !bad {
		t.Error("e/SKILL.md has no description: no warning")
	}
	if err := os.Remove(filepath.Join(root, "e", "SKILL.md")); err != nil {
		t.Fatal(err)
	}
	if _, bad := Skills(root); bad {
		t.Error("warning without a bad file")
	}
	if skills[3].ShortDescription == nil || *skills[3].ShortDescription != "shorty" || skills[0].ShortDescription != nil {
		t.Errorf("short descriptions: %v %v", skills[3].ShortDescription, skills[0].ShortDescription)
	}
	if err := os.MkdirAll(filepath.Join(root, "k"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "k", "SKILL.md"), []byte("no front matter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, bad := Skills(root); !bad {
		t.Error("a SKILL.md without front matter: no warning")
	}
	if s, bad := Skills(filepath.Join(root, "nope")); len(s) != 0 || bad {
		t.Errorf("missing root: %v %v", s, bad)
	}
}

func FuzzFrontMatter(f *testing.F) {
	f.Add("---\nname: a\ndescription: |\n  x\n  y\nmetadata:\n  short-description: \"s\\\"q\"\n---\n")
	f.Add("---\nname: 'it''s'\n---")
	f.Fuzz(func(t *testing.T, doc string) {
		m, ok := frontMatter(doc)
		if !ok && m != nil {
			t.Fatal("a refused document returned values")
		}
	})
}

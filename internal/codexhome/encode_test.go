package codexhome

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The expected texts are the reference's answers (codex 0.169.0) for the
// same documents and paths; internal/test/interop/codex_parity_test.go compares the two
// servers directly when the reference is at hand.
func TestEncodeMatchesReference(t *testing.T) {
	tests := []struct {
		name  string
		doc   string
		paths [][]string
		want  string
	}{
		{
			name:  "mcp servers, command and url forms",
			doc:   "model = \"gpt-5.5\"\n[mcp_servers.x]\nurl = \"http://127.0.0.1:9/mcp\"\n[mcp_servers.y]\ncommand = \"/bin/true\"\nargs = [\"a\", \"b\"]\n[mcp_servers.y.env]\nK = \"V\"\n",
			paths: [][]string{{"mcp_servers"}},
			want:  "[mcp_servers.x]\nurl = \"http://127.0.0.1:9/mcp\"\n\n[mcp_servers.y]\ncommand = \"/bin/true\"\nargs = [\"a\", \"b\"]\n\n[mcp_servers.y.env]\nK = \"V\"\n",
		},
		{
			name:  "values before tables, document order, not request order",
			doc:   "zeta = 1\nmodel = \"m\"\nalpha.beta = \"dotted\"\n[mcp_servers.zz]\nurl = \"u\"\nhttp_headers = { \"X-A\" = \"1\", b = \"two\" }\n",
			paths: [][]string{{"mcp_servers"}, {"zeta"}, {"model"}, {"alpha"}},
			want:  "zeta = 1\nmodel = \"m\"\n\n[alpha]\nbeta = \"dotted\"\n\n[mcp_servers.zz]\nurl = \"u\"\n\n[mcp_servers.zz.http_headers]\nX-A = \"1\"\nb = \"two\"\n",
		},
		{
			name:  "missing leaf keeps the empty parent",
			doc:   "[mcp_servers.x]\nurl = \"u\"\n",
			paths: [][]string{{"mcp_servers", "s"}},
			want:  "[mcp_servers]\n",
		},
		{
			name:  "a path past a scalar keeps the scalar",
			doc:   "top = \"x\"\n",
			paths: [][]string{{"top", "x"}},
			want:  "top = \"x\"\n",
		},
		{
			name:  "nothing selected",
			doc:   "top = 1\n",
			paths: [][]string{{"nothere"}},
			want:  "",
		},
		{
			name: "arrays of tables, inline arrays and empty tables",
			doc: "mixedarr = [1, {a = 1}, \"s\"]\nemptyinl = {}\narrempty = [{}]\nnested = [[1,2],[\"a\"]]\ne = []\n" +
				"[onlyarr]\n[[onlyarr.items]]\nk = 1\n[onlysub.inner]\nv = 1\n[emptysub.e]\n[hasempty]\nx = 1\n[hasempty.e]\n" +
				"[[aot]]\ny = 1\nx = 2\n[aot.sub]\nz = 3\n[[aot]]\nx = 3\ny = 4\n",
			want: "mixedarr = [1, { a = 1 }, \"s\"]\nnested = [[1, 2], [\"a\"]]\ne = []\n\n[emptyinl]\n\n[[arrempty]]\n\n" +
				"[[onlyarr.items]]\nk = 1\n\n[onlysub.inner]\nv = 1\n\n[emptysub.e]\n\n[hasempty]\nx = 1\n\n[hasempty.e]\n\n" +
				"[[aot]]\ny = 1\nx = 2\n\n[aot.sub]\nz = 3\n\n[[aot]]\nx = 3\ny = 4\n",
		},
		{
			name: "scalars",
			doc: "d1 = 1979-05-27T07:32:00Z\nd2 = 1979-05-27T07:32:00-07:00\nd3 = 1979-05-27 07:32:00.5-07:00\n" +
				"d4 = 1979-05-27T07:32:00.123456789\nd5 = 1979-05-27T07:32:00.100\nt1 = 07:32:00.25\nld = 1979-05-27\n" +
				"f1 = 1e300\nf2 = 1e-7\nf3 = -0.0\nf4 = -nan\nf5 = 3.0e2\nf6 = 0.1\nf7 = -inf\nh = 0xff\nb = true\n",
			want: "d1 = 1979-05-27T07:32:00Z\nd2 = 1979-05-27T07:32:00-07:00\nd3 = 1979-05-27T07:32:00.5-07:00\n" +
				"d4 = 1979-05-27T07:32:00.123456789\nd5 = 1979-05-27T07:32:00.1\nt1 = 07:32:00.25\nld = 1979-05-27\n" +
				"f1 = 1" + zeros(300) + ".0\nf2 = 0.0000001\nf3 = -0.0\nf4 = nan\nf5 = 300.0\nf6 = 0.1\nf7 = -inf\nh = 255\nb = true\n",
		},
		{
			name: "strings and keys",
			doc: `a = "it's"` + "\n" + `b = 'lit\x'` + "\n" + `c = "q\"uote"` + "\n" + `d = "back\\slash"` + "\n" +
				`e = "multi\nline"` + "\n" + `f = "tab\there"` + "\n" + `g = "a'b\"c"` + "\n" + `h = "a'''b\\c"` + "\n" +
				`i = "ctl\u0001x\u007f"` + "\n" + `j = "cr\r\nlf"` + "\n" + `k = "x\ny\"z"` + "\n" + `l = "\\` + `\n'"` + "\n" +
				`m = ""` + "\n" + `"key with space" = 1` + "\n" + `"quo\"te" = 2` + "\n" + `"" = 3` + "\n",
			want: `a = "it's"` + "\n" + `b = 'lit\x'` + "\n" + `c = 'q"uote'` + "\n" + `d = 'back\slash'` + "\n" +
				"e = \"\"\"\nmulti\nline\"\"\"\n" + `f = "tab\there"` + "\n" + `g = """a'b"c"""` + "\n" + `h = "a'''b\\c"` + "\n" +
				`i = "ctl\u0001x\u007F"` + "\n" + "j = \"\"\"\ncr\\r\nlf\"\"\"\n" + "k = \"\"\"\nx\ny\"z\"\"\"\n" + "l = '''\n\\\n''''\n" +
				`m = ""` + "\n" + `"key with space" = 1` + "\n" + `'quo"te' = 2` + "\n" + `"" = 3` + "\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := ParseTOML(tc.doc)
			if err != nil {
				t.Fatal(err)
			}
			if tc.paths != nil {
				tab = Project(tab, tc.paths)
			}
			if got := Encode(tab); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func zeros(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = '0'
	}
	return string(b)
}

func TestParseKeepsDocumentOrder(t *testing.T) {
	tab, err := ParseTOML("z = 1\n[m]\nb = 1\na = 2\n[[arr]]\ny = 1\nx = 2\n[[arr]]\nx = 3\ny = 4\n[a]\nq = 1\n")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tab.Keys, []string{"z", "m", "arr", "a"}) {
		t.Errorf("root keys %v", tab.Keys)
	}
	if m := tab.Vals["m"].(*Table); !reflect.DeepEqual(m.Keys, []string{"b", "a"}) {
		t.Errorf("m keys %v", m.Keys)
	}
	arr := tab.Vals["arr"].([]any)
	if k := arr[0].(*Table).Keys; !reflect.DeepEqual(k, []string{"y", "x"}) {
		t.Errorf("arr[0] keys %v", k)
	}
	if k := arr[1].(*Table).Keys; !reflect.DeepEqual(k, []string{"x", "y"}) {
		t.Errorf("arr[1] keys %v", k)
	}
}

func TestFormatFloat(t *testing.T) {
	for f, want := range map[float64]string{1: "1.0", 0.5: "0.5", -2.25: "-2.25", math.Inf(1): "inf", 1e21: "1000000000000000000000.0"} {
		if got := formatFloat(f); got != want {
			t.Errorf("formatFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

// TestLayers checks the layer sources and the trust rules observed on the
// reference: user first, then project layers from the project root (a .git
// entry) down to cwd, each only when its directory, else the project root,
// is trusted; denied keys dropped from project layers.
func TestLayers(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	repo := filepath.Join(root, "repo")
	sub := filepath.Join(repo, "sub")
	other := filepath.Join(root, "other")
	for _, d := range []string{home, filepath.Join(repo, ".codex"), filepath.Join(sub, ".codex"), filepath.Join(other, ".codex")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(repo, ".git"), "gitdir: elsewhere\n")
	write(filepath.Join(home, "config.toml"), "model = \"u\"\n[projects.\""+repo+"\"]\ntrust_level = \"trusted\"\n[projects.\""+other+"\"]\ntrust_level = \"untrusted\"\n")
	write(filepath.Join(repo, ".codex", "config.toml"), "model = \"r\"\nnotify = [\"x\"]\nmodel_provider = \"p\"\n")
	write(filepath.Join(sub, ".codex", "config.toml"), "model = \"s\"\n")
	write(filepath.Join(other, ".codex", "config.toml"), "model = \"o\"\n")

	sources := func(cwd string) []string {
		ls, err := Layers(home, cwd)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range ls {
			out = append(out, l.Source+" "+Encode(l.Config))
		}
		return out
	}
	user := "user (" + filepath.Join(home, "config.toml") + ") model = \"u\"\n\n[projects.\"" + repo + "\"]\ntrust_level = \"trusted\"\n\n[projects.\"" + other + "\"]\ntrust_level = \"untrusted\"\n"
	want := []string{user,
		"project (" + filepath.Join(repo, ".codex", "config.toml") + ") model = \"r\"\n",
		"project (" + filepath.Join(sub, ".codex", "config.toml") + ") model = \"s\"\n"}
	if got := sources(sub); !reflect.DeepEqual(got, want) {
		t.Errorf("in repo/sub:\n got %q\nwant %q", got, want)
	}
	if got := sources(other); !reflect.DeepEqual(got, []string{user}) {
		t.Errorf("untrusted: got %q", got)
	}
	// An empty .git directory is no project root (the reference's
	// observed behaviour): repo2/sub is then its own root, untrusted.
	repo2 := filepath.Join(root, "repo2")
	if err := os.MkdirAll(filepath.Join(repo2, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(repo2, "sub", ".codex"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(repo2, "sub", ".codex", "config.toml"), "model = \"x\"\n")
	write(filepath.Join(home, "config.toml"), "[projects.\""+repo2+"\"]\ntrust_level = \"trusted\"\n")
	if got := sources(filepath.Join(repo2, "sub")); len(got) != 1 {
		t.Errorf("empty .git: got %q, want the user layer only", got)
	}
	write(filepath.Join(repo2, ".git", "HEAD"), "ref: refs/heads/main\n")
	if got := sources(filepath.Join(repo2, "sub")); len(got) != 2 {
		t.Errorf(".git with HEAD: got %q, want the user and sub layers", got)
	}

	// Trust is looked up by the canonical path, then as written: a link
	// to a trusted directory is trusted; a trusted link, not its target.
	link := filepath.Join(root, "link")
	if err := os.Symlink(repo, link); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(home, "config.toml"), "[projects.\""+repo+"\"]\ntrust_level = \"trusted\"\n")
	if got := sources(filepath.Join(link, "sub")); len(got) != 3 {
		t.Errorf("through a link to a trusted project: got %q, want user, repo and sub layers", got)
	}
	write(filepath.Join(home, "config.toml"), "[projects.\""+link+"\"]\ntrust_level = \"trusted\"\n")
	if got := sources(filepath.Join(link, "sub")); len(got) != 3 {
		t.Errorf("a trusted link: got %q, want user, repo and sub layers", got)
	}
	if got := sources(sub); len(got) != 1 {
		t.Errorf("the target of a trusted link: got %q, want the user layer only", got)
	}

	write(filepath.Join(sub, ".codex", "config.toml"), "model = \n")
	write(filepath.Join(home, "config.toml"), "[projects.\""+repo+"\"]\ntrust_level = \"trusted\"\n")
	if _, err := Layers(home, sub); err == nil {
		t.Error("a trusted project layer that does not parse: no error")
	}
}

package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/test/plantest"
	"github.com/execgo/exec-server/protocol"
)

func resolve(t testing.TB, raw string, env Env) *Plan {
	t.Helper()
	p, err := Parse([]byte(raw))
	if err != nil {
		t.Fatalf("Parse(%s): %v", raw, err)
	}
	plan, err := Resolve(p, env)
	if err != nil {
		t.Fatalf("Resolve(%s): %v", raw, err)
	}
	if err := checkPlan(plan); err != nil {
		t.Fatalf("Resolve(%s): %v\n%s", raw, err, dump(plan))
	}
	return plan
}

func dump(p *Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "root=%v fullRead=%v fullWrite=%v net=%v globs=%q\n", p.Root, p.FullRead, p.FullWrite, p.Network, p.DenyGlobs)
	for _, m := range p.Mounts {
		fmt.Fprintf(&b, "  %s %v prot=%v missing=%v dir=%v\n", m.Path, m.Access, m.Protected, m.Missing, m.Dir)
	}
	return b.String()
}

// checkPlan checks what every Plan must be: mounts sorted shallowest
// first, each path once, absolute and clean, no mount equal to what its
// applied parent gives (but protected ones), protected ones read-only, and
// the full-access flags consistent with the root.
func checkPlan(p *Plan) error {
	seen := map[string]bool{}
	for i, m := range p.Mounts {
		if !filepath.IsAbs(m.Path) || filepath.Clean(m.Path) != m.Path || m.Path == "/" {
			return fmt.Errorf("mount path %q is not absolute, clean and below /", m.Path)
		}
		if seen[m.Path] {
			return fmt.Errorf("mount %s twice", m.Path)
		}
		seen[m.Path] = true
		if i > 0 && depth(p.Mounts[i-1].Path) > depth(m.Path) {
			return fmt.Errorf("mount %s after deeper %s", m.Path, p.Mounts[i-1].Path)
		}
		if m.Protected && m.Access != AccessRead {
			return fmt.Errorf("protected %s is %v", m.Path, m.Access)
		}
		if !m.Protected {
			parent := (&Plan{Root: p.Root, Mounts: p.Mounts[:i]}).AccessAt(filepath.Dir(m.Path))
			if parent == m.Access {
				return fmt.Errorf("mount %s (%v) changes nothing", m.Path, m.Access)
			}
		}
	}
	if p.FullWrite && (!p.FullRead || p.Root != AccessWrite) {
		return errors.New("full write with a narrower view")
	}
	for _, m := range p.Mounts {
		// Under full write, only the server's secrets are masked.
		if p.FullWrite && m.Access != AccessNone {
			return errors.New("full write with a narrower view")
		}
	}
	if p.FullRead && p.Root == AccessNone {
		return errors.New("full read with no root")
	}
	return nil
}

func wantAccess(t *testing.T, p *Plan, want map[string]Access) {
	t.Helper()
	for path, a := range want {
		if got := p.AccessAt(path); got != a {
			t.Errorf("AccessAt(%s) = %v, want %v\n%s", path, got, a, dump(p))
		}
	}
}

func findMount(p *Plan, path string) (Mount, bool) {
	for _, m := range p.Mounts {
		if m.Path == path {
			return m, true
		}
	}
	return Mount{}, false
}

// The objects codex 0.169 sends, against a temporary WORK.
func TestResolveCodexReadOnly(t *testing.T) {
	work := plantest.Tree(t, "src/a.go")
	raw := `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"},
 "cwd":"` + plantest.URI(work) + `","workspaceRoots":["` + plantest.URI(work) + `"],"windowsSandboxLevel":"disabled",
 "windowsSandboxProxySettingsMode":"reconcile","useLegacyLandlock":false}`
	p := resolve(t, raw, Env{})
	if p.Root != AccessRead || !p.FullRead || p.FullWrite || len(p.Mounts) != 0 || p.Network != NetworkRestricted || p.Cwd != work {
		t.Fatalf("read-only plan:\n%s", dump(p))
	}
	wantAccess(t, p, map[string]Access{work + "/src/a.go": AccessRead, "/etc": AccessRead})
}

func TestResolveCodexWorkspaceWrite(t *testing.T) {
	d := plantest.Tree(t, "w/.git/config", "w/src/a.go", "tmp/")
	work, tmp := d+"/w", d+"/tmp"
	entries := `{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},
   {"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"},
   {"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},
   {"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"},
   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read","missing_path_behavior":"skip"},
   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".agents"}},"access":"read","missing_path_behavior":"skip"},
   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".codex"}},"access":"read","missing_path_behavior":"skip"},
   {"path":{"type":"special","value":{"kind":"project_roots","subpath":".aws"}},"access":"read","missing_path_behavior":"skip"}`
	w := plantest.URI(work)
	for _, tail := range []string{
		// process/start
		`"cwd":"` + w + `","workspaceRoots":["` + w + `"],"windowsSandboxLevel":"disabled","windowsSandboxProxySettingsMode":"reconcile","useLegacyLandlock":false`,
		// fs/writeFile, fs/createDirectory, fs/remove
		`"cwd":"` + w + `","policyContext":{"cwd":"` + w + `","workspaceRoots":["` + w + `"]},"workspaceRoots":["` + w + `"],"userHomeDir":"file:///root","windowsSandboxLevel":"disabled","useLegacyLandlock":false`,
	} {
		raw := `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` + entries + `]},"network":"restricted"},` + tail + `}`
		p := resolve(t, raw, Env{TempDir: tmp})
		if p.Root != AccessRead || !p.FullRead || p.FullWrite || p.Network != NetworkRestricted {
			t.Fatalf("workspace-write plan:\n%s", dump(p))
		}
		wantAccess(t, p, map[string]Access{
			work + "/src/a.go":    AccessWrite,
			work + "/new":         AccessWrite,
			work + "/.git/config": AccessRead,
			work + "/.codex/x":    AccessRead,
			tmp + "/x":            AccessWrite,
			tmp + "/.aws":         AccessRead,
			"/tmp/x":              AccessWrite,
		})
		// .git exists: codex's own read entry for it is the mount; the
		// missing ones are protected mounts.
		for _, name := range ProtectedNames {
			m, ok := findMount(p, work+"/"+name)
			if !ok || m.Protected != (name != ".git") || m.Access != AccessRead || !m.Dir || m.Missing != (name != ".git") {
				t.Errorf("protected %s: %+v, %v\n%s", name, m, ok, dump(p))
			}
		}
	}
}

func TestResolveSpecificity(t *testing.T) {
	d := plantest.Tree(t, "w/sub/x/f", "w/sub/y", "w/other", "r/f", "n/f")
	for _, c := range []struct {
		name    string
		entries []string
		want    map[string]Access
	}{
		{"most specific wins", []string{plantest.Special("root", "read"), plantest.Path(d+"/w", "write"), plantest.Path(d+"/w/sub", "read"), plantest.Path(d+"/w/sub/x", "write")},
			map[string]Access{d + "/w/other": AccessWrite, d + "/w/sub/y": AccessRead, d + "/w/sub/x/f": AccessWrite, d + "/r/f": AccessRead}},
		{"deny beats read at equal depth", []string{plantest.Special("root", "read"), plantest.Path(d+"/r", "read"), plantest.Path(d+"/r", "deny")},
			map[string]Access{d + "/r/f": AccessNone, d + "/w": AccessRead}},
		{"deny beats write at equal depth", []string{plantest.Special("root", "read"), plantest.Path(d+"/w", "deny"), plantest.Path(d+"/w", "write")},
			map[string]Access{d + "/w/other": AccessNone}},
		{"write beats read at equal depth", []string{plantest.Special("root", "read"), plantest.Path(d+"/w", "read"), plantest.Path(d+"/w", "write")},
			map[string]Access{d + "/w/other": AccessWrite}},
		{"none is deny", []string{plantest.Special("root", "read"), plantest.Path(d+"/w", "write"), plantest.Path(d+"/w/sub", "none")},
			map[string]Access{d + "/w/sub/y": AccessNone, d + "/w/other": AccessWrite}},
		{"deeper read under a deny", []string{plantest.Special("root", "deny"), plantest.Path(d+"/r", "read")},
			map[string]Access{d + "/r/f": AccessRead, d + "/w": AccessNone, "/etc": AccessNone}},
		{"no match is no access", []string{plantest.Path(d+"/r", "read")},
			map[string]Access{d + "/r/f": AccessRead, d + "/w": AccessNone, "/": AccessNone}},
		{"write implies read", []string{plantest.Path(d+"/w", "write")},
			map[string]Access{d + "/w/other": AccessWrite}},
	} {
		p := resolve(t, plantest.Context(c.entries, ""), Env{})
		for path, a := range c.want {
			if got := p.AccessAt(path); got != a {
				t.Errorf("%s: AccessAt(%s) = %v, want %v\n%s", c.name, path, got, a, dump(p))
			}
		}
	}
}

func TestResolveFullAccessFlags(t *testing.T) {
	d := plantest.Tree(t, "w/f")
	for _, c := range []struct {
		name                string
		raw                 string
		root                Access
		fullRead, fullWrite bool
		net                 Network
	}{
		{"disabled", `{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`, AccessWrite, true, true, NetworkEnabled},
		{"external restricted", `{"permissions":{"type":"external","network":"restricted"},"windowsSandboxLevel":"disabled"}`, AccessWrite, true, true, NetworkRestricted},
		{"unrestricted enabled", `{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}`, AccessWrite, true, true, NetworkEnabled},
		{"root write alone", plantest.Context([]string{plantest.Special("root", "write")}, ""), AccessWrite, true, true, NetworkRestricted},
		{"root write and a write", plantest.Context([]string{plantest.Special("root", "write"), plantest.Path(d+"/w", "write")}, ""), AccessWrite, true, true, NetworkRestricted},
		{"root write narrowed", plantest.Context([]string{plantest.Special("root", "write"), plantest.Path(d+"/w", "read")}, ""), AccessWrite, true, false, NetworkRestricted},
		{"root read", plantest.Context([]string{plantest.Special("root", "read"), plantest.Path(d+"/w", "write")}, ""), AccessRead, true, false, NetworkRestricted},
		{"root read with a deny", plantest.Context([]string{plantest.Special("root", "read"), plantest.Path(d+"/w", "deny")}, ""), AccessRead, false, false, NetworkRestricted},
		{"root read with a deny glob", plantest.Context([]string{plantest.Special("root", "read"), plantest.Glob(d+"/*.env", "deny")}, ""), AccessRead, false, false, NetworkRestricted},
		{"root write with a deny", plantest.Context([]string{plantest.Special("root", "write"), plantest.Path(d+"/w", "none")}, ""), AccessWrite, false, false, NetworkRestricted},
		{"no root", plantest.Context([]string{plantest.Path(d+"/w", "write")}, ""), AccessNone, false, false, NetworkRestricted},
		{"root denied", plantest.Context([]string{plantest.Special("root", "deny")}, ""), AccessNone, false, false, NetworkRestricted},
	} {
		p := resolve(t, c.raw, Env{})
		if p.Root != c.root || p.FullRead != c.fullRead || p.FullWrite != c.fullWrite || p.Network != c.net {
			t.Errorf("%s: got root %v fullRead %v fullWrite %v net %v, want %v %v %v %v\n%s", c.name,
				p.Root, p.FullRead, p.FullWrite, p.Network, c.root, c.fullRead, c.fullWrite, c.net, dump(p))
		}
	}
	if p, err := Resolve(nil, Env{}); p != nil || err != nil {
		t.Errorf("Resolve(nil) = %v, %v", p, err)
	}
}

func TestResolveWorkspaceRoots(t *testing.T) {
	d := plantest.Tree(t, "a/sub/f", "b/f", "c/f")
	a, b := plantest.URI(d+"/a"), plantest.URI(d+"/b")
	for _, c := range []struct {
		name    string
		entries []string
		extra   string
		want    map[string]Access
	}{
		{"project_roots", []string{plantest.Special("project_roots", "write")}, `,"cwd":"` + a + `","workspaceRoots":["` + a + `","` + b + `"]`,
			map[string]Access{d + "/a/f": AccessWrite, d + "/b/f": AccessWrite, d + "/c/f": AccessNone}},
		{"current_working_directory is the roots, not cwd", []string{plantest.Special("current_working_directory", "read")}, `,"cwd":"` + a + `","workspaceRoots":["` + b + `"]`,
			map[string]Access{d + "/a/f": AccessNone, d + "/b/f": AccessRead}},
		{"cwd without roots grants nothing (ref)", []string{plantest.Special("project_roots", "read")}, `,"cwd":"` + a + `"`,
			map[string]Access{d + "/a/f": AccessNone}},
		{"policyContext roots win (ref)", []string{plantest.Special("project_roots", "read")}, `,"cwd":"` + a + `","workspaceRoots":["` + a + `"],"policyContext":{"workspaceRoots":["` + b + `"]}`,
			map[string]Access{d + "/a/f": AccessNone, d + "/b/f": AccessRead}},
		{"an empty policyContext has no roots (ref)", []string{plantest.Special("project_roots", "read")}, `,"cwd":"` + a + `","workspaceRoots":["` + a + `"],"policyContext":{}`,
			map[string]Access{d + "/a/f": AccessNone}},
		{"subpath", []string{`{"path":{"type":"special","value":{"kind":"project_roots","subpath":"sub"}},"access":"read"}`}, `,"cwd":"` + a + `","workspaceRoots":["` + a + `"]`,
			map[string]Access{d + "/a/sub/f": AccessRead, d + "/a/f": AccessNone}},
		{"subpath climbing out grants nothing", []string{`{"path":{"type":"special","value":{"kind":"project_roots","subpath":"../b"}},"access":"read"}`}, `,"cwd":"` + a + `","workspaceRoots":["` + a + `"]`,
			map[string]Access{d + "/b/f": AccessNone}},
		{"subpath climbing out still denies", []string{plantest.Special("root", "read"), `{"path":{"type":"special","value":{"kind":"project_roots","subpath":"../b"}},"access":"deny"}`}, `,"cwd":"` + a + `","workspaceRoots":["` + a + `"]`,
			map[string]Access{d + "/b/f": AccessNone, d + "/c/f": AccessRead}},
		{"absolute subpath is relative", []string{`{"path":{"type":"special","value":{"kind":"project_roots","subpath":"/sub"}},"access":"read"}`}, `,"cwd":"` + a + `","workspaceRoots":["` + a + `"]`,
			map[string]Access{d + "/a/sub/f": AccessRead, d + "/a/f": AccessNone}},
		{"unknown kind ignored", []string{`{"path":{"type":"special","value":{"kind":"unknown","path":":future"}},"access":"write"}`, plantest.Special("root", "read")}, "",
			map[string]Access{d + "/a/f": AccessRead}},
		{"tmpdir from temporaryDirectories", []string{plantest.Special("tmpdir", "write")}, `,"temporaryDirectories":["` + a + `"]`,
			map[string]Access{d + "/a/f": AccessWrite, d + "/c/f": AccessNone}},
		{"tmpdir from TMPDIR", []string{plantest.Special("tmpdir", "write")}, "",
			map[string]Access{d + "/c/f": AccessWrite, d + "/a/f": AccessNone}},
		{"read and write globs grant nothing (ref)", []string{plantest.Glob(d+"/a/*", "read"), plantest.Glob(d+"/b/*", "write")}, "",
			map[string]Access{d + "/a/f": AccessNone, d + "/b/f": AccessNone}},
		{"slash_tmp", []string{plantest.Special("slash_tmp", "read")}, "",
			map[string]Access{"/tmp/x": AccessRead, d + "/a/f": AccessWrite}},
	} {
		env := Env{TempDir: d + "/c"}
		if c.name == "slash_tmp" {
			env.TempDir = "/nonexistent-tmpdir"
			c.entries = append(c.entries, plantest.Path(d, "write"))
		}
		p := resolve(t, plantest.Context(c.entries, c.extra), env)
		for path, a := range c.want {
			if !strings.HasPrefix(d, "/tmp/") && path == "/tmp/x" {
				continue
			}
			if got := p.AccessAt(path); got != a {
				t.Errorf("%s: AccessAt(%s) = %v, want %v\n%s", c.name, path, got, a, dump(p))
			}
		}
	}
}

func TestResolveForeignTemporaryDirectory(t *testing.T) {
	raw := plantest.Context([]string{plantest.Special("root", "read"), plantest.Special("tmpdir", "write")}, `,"temporaryDirectories":["file://other/t"]`)
	p, err := Parse([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Resolve(p, Env{})
	var pe *protocol.Error
	const want = "file system sandbox temporary directory is not native to this exec-server host: 'file://other/t' is invalid on 'linux'"
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidRequest || pe.Message != want {
		t.Errorf("got %v, want -32600 %s", err, want)
	}
	// Unused, it is accepted (as the reference accepts it).
	p, err = Parse([]byte(plantest.Context([]string{plantest.Special("root", "read")}, `,"temporaryDirectories":["file://other/t"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(p, Env{}); err != nil {
		t.Errorf("unused foreign temporary directory: %v", err)
	}
}

func TestResolveMinimal(t *testing.T) {
	p := resolve(t, plantest.Context([]string{plantest.Special("minimal", "read")}, ""), Env{})
	if p.Root != AccessNone || p.FullRead {
		t.Fatalf("minimal:\n%s", dump(p))
	}
	for _, m := range minimalPaths {
		if _, err := os.Lstat(m); err != nil {
			continue
		}
		c, _ := canonical(m)
		if got := p.AccessAt(c); got != AccessRead {
			t.Errorf("AccessAt(%s) = %v, want read\n%s", c, got, dump(p))
		}
	}
}

func TestResolveProtected(t *testing.T) {
	d := plantest.Tree(t, "w/.agents/a", "w/src/f", "gitdirs/wt/HEAD", "w/inner/.git/x", "outside/")
	w := d + "/w"
	if err := os.WriteFile(w+"/.git", []byte("gitdir: ../gitdirs/wt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(d+"/outside", w+"/.codex"); err != nil {
		t.Fatal(err)
	}

	// The gitdir and the symlink's target are writable here (d write):
	// both are protected too.
	p := resolve(t, plantest.Context([]string{plantest.Path(d, "write"), plantest.Path(w, "write")}, ""), Env{})
	for path, want := range map[string]Mount{
		w + "/.git":            {Access: AccessRead, Protected: true},
		w + "/.agents":         {Access: AccessRead, Protected: true, Dir: true},
		w + "/.codex":          {Access: AccessRead, Protected: true}, // the link itself
		w + "/.aws":            {Access: AccessRead, Protected: true, Dir: true, Missing: true},
		d + "/gitdirs/wt":      {Access: AccessRead, Protected: true, Dir: true},
		d + "/outside":         {Access: AccessRead, Protected: true, Dir: true},
		d + "/.git":            {Access: AccessRead, Protected: true, Dir: true, Missing: true},
		w + "/inner/.git/x":    {}, // not a root: nothing
		w + "/src":             {},
		d + "/gitdirs/wt/HEAD": {},
	} {
		m, ok := findMount(p, path)
		want.Path = path
		if ok != (want.Access != AccessNone) || (ok && m != want) {
			t.Errorf("mount %s = %+v (%v), want %+v\n%s", path, m, ok, want, dump(p))
		}
	}
	wantAccess(t, p, map[string]Access{w + "/.agents/a": AccessRead, w + "/src/f": AccessWrite, d + "/gitdirs/wt/HEAD": AccessRead})

	// Outside the writable roots (read-only there, or not visible at
	// all) nothing is added: protecting never widens.
	for _, entries := range [][]string{
		{plantest.Special("root", "read"), plantest.Path(w, "write")},
		{plantest.Path(w, "write")},
	} {
		p = resolve(t, plantest.Context(entries, ""), Env{})
		for _, path := range []string{d + "/gitdirs/wt", d + "/outside"} {
			if m, ok := findMount(p, path); ok {
				t.Errorf("%s protected outside the writable roots: %+v\n%s", path, m, dump(p))
			}
		}
		if _, ok := findMount(p, w+"/.git"); !ok {
			t.Errorf(".git pointer file not protected\n%s", dump(p))
		}
	}

	// An explicit narrower entry stays; a protected path already read-only
	// or denied by the entries is not re-added.
	p = resolve(t, plantest.Context([]string{plantest.Path(w, "write"), plantest.Path(w+"/.agents", "deny")}, ""), Env{})
	if m, _ := findMount(p, w+"/.agents"); m.Access != AccessNone || m.Protected {
		t.Errorf(".agents denied by an entry: %+v\n%s", m, dump(p))
	}
	// A write entry on a protected path does not lift the protection.
	p = resolve(t, plantest.Context([]string{plantest.Path(w, "write"), plantest.Path(w+"/.agents", "write")}, ""), Env{})
	if m, _ := findMount(p, w+"/.agents"); m.Access != AccessRead || !m.Protected {
		t.Errorf(".agents given write: %+v\n%s", m, dump(p))
	}
	// A missing protected path stays protected whatever a (missing) entry
	// on it says: its mount would be skipped, leaving it writable.
	for _, access := range []string{"read", "deny", "write"} {
		p = resolve(t, plantest.Context([]string{plantest.Path(w, "write"), plantest.Path(w+"/.aws", access)}, ""), Env{})
		if m, _ := findMount(p, w+"/.aws"); m.Access != AccessRead || !m.Protected || !m.Missing {
			t.Errorf("missing .aws with a %s entry: %+v\n%s", access, m, dump(p))
		}
	}
	// A missing writable root has no protected paths.
	p = resolve(t, plantest.Context([]string{plantest.Special("root", "read"), plantest.Path(d+"/nope", "write")}, ""), Env{})
	if len(p.Mounts) != 0 {
		t.Errorf("missing root gave mounts:\n%s", dump(p))
	}
}

func TestResolveAliasRoot(t *testing.T) {
	d := plantest.Tree(t, "real/w/f", "real/w/secret/s", "links/")
	alias := d + "/links/a/b/c"
	if err := os.MkdirAll(filepath.Dir(alias), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(d+"/real/w", alias); err != nil {
		t.Fatal(err)
	}
	// The writable root is given through a deep alias, the deny through
	// the real path: mounted lexically, the alias's bind (deeper) would
	// come after the mask and hide it.
	p := resolve(t, plantest.Context([]string{plantest.Special("root", "read"), plantest.Path(alias, "write"), plantest.Path(d+"/real/w/secret", "deny")}, ""), Env{})
	if _, ok := findMount(p, d+"/real/w"); !ok {
		t.Fatalf("alias root not mounted at its real path\n%s", dump(p))
	}
	if _, ok := findMount(p, alias); ok {
		t.Fatalf("alias path mounted\n%s", dump(p))
	}
	wantAccess(t, p, map[string]Access{d + "/real/w/f": AccessWrite, d + "/real/w/secret/s": AccessNone, d + "/real/w/.git": AccessRead})
	if m, ok := findMount(p, d+"/real/w/.git"); !ok || !m.Protected || !m.Missing {
		t.Errorf("protected path of the alias root: %+v\n%s", m, dump(p))
	}
	// A missing path under an alias resolves its existing prefix.
	p = resolve(t, plantest.Context([]string{plantest.Special("root", "read"), plantest.Path(alias+"/new/x", "deny")}, ""), Env{})
	if m, ok := findMount(p, d+"/real/w/new/x"); !ok || !m.Missing || m.Access != AccessNone {
		t.Errorf("missing path under an alias: %+v\n%s", m, dump(p))
	}
}

func TestResolveMissingPaths(t *testing.T) {
	d := plantest.Tree(t, "w/f")
	for _, c := range []struct {
		name  string
		entry string
		want  []Mount
	}{
		{"skip drops a missing entry", `{"path":{"type":"path","path":"` + plantest.URI(d+"/nope") + `"},"access":"deny","missing_path_behavior":"skip"}`, nil},
		{"a missing write path grants nothing", plantest.Path(d+"/nope", "write"), nil},
		{"a missing read path grants nothing", plantest.Path(d+"/nope", "read"), nil},
		{"a missing deny path stays, marked", plantest.Path(d+"/w/nope", "deny"), []Mount{{Path: d + "/w/nope", Access: AccessNone, Missing: true, Dir: true}}},
		{"skip keeps an existing entry", `{"path":{"type":"path","path":"` + plantest.URI(d+"/w/f") + `"},"access":"deny","missing_path_behavior":"skip"}`, []Mount{{Path: d + "/w/f", Access: AccessNone}}},
	} {
		p := resolve(t, plantest.Context([]string{plantest.Special("root", "read"), c.entry}, ""), Env{})
		if fmt.Sprint(p.Mounts) != fmt.Sprint(c.want) {
			t.Errorf("%s: mounts\n%s\nwant %+v", c.name, dump(p), c.want)
		}
		if p.AccessAt(d+"/nope") != AccessRead {
			t.Errorf("%s: a missing path changed its parent's access\n%s", c.name, dump(p))
		}
	}
	// A missing deny path cannot be created by fs operations (the
	// reference masks it: creating it failed with EROFS).
	p := resolve(t, plantest.Context([]string{plantest.Special("root", "read"), plantest.Path(d+"/w", "write"), plantest.Path(d+"/w/n*[e?", "deny")}, ""), Env{})
	if p.AccessAt(d+"/w/n*[e?") != AccessNone || p.AccessAt(d+"/w/nxe?") != AccessWrite || p.AccessAt(d+"/w/n*[e?/below") != AccessNone {
		t.Errorf("missing deny path: %q\n%s", p.DenyGlobs, dump(p))
	}
}

func TestResolveRedundantMounts(t *testing.T) {
	d := plantest.Tree(t, "w/sub/deeper/f", "r/")
	p := resolve(t, plantest.Context([]string{plantest.Special("root", "read"), plantest.Path(d+"/w", "write"), plantest.Path(d+"/w/sub", "write"), plantest.Path(d+"/r", "read"), plantest.Path(d+"/w/sub/deeper", "read")}, ""), Env{})
	var paths []string
	for _, m := range p.Mounts {
		if !m.Protected {
			paths = append(paths, m.Path)
		}
	}
	if want := []string{d + "/w", d + "/w/sub/deeper"}; fmt.Sprint(paths) != fmt.Sprint(want) {
		t.Errorf("mounts %q, want %q\n%s", paths, want, dump(p))
	}
}

func TestResolveDenyGlobs(t *testing.T) {
	d := plantest.Tree(t, "w/a.env", "w/.hidden.env", "w/keep.txt", "w/sub/k.env", "w/sub/deep/er/k.env", "w/dir.env/inside", "w/x/y.txt", "w/x/z.md", "other/o.env")
	w := d + "/w"
	if err := os.Symlink(d+"/other/o.env", w+"/link.env"); err != nil {
		t.Fatal(err)
	}
	cwd := `,"cwd":"` + plantest.URI(w) + `"`
	for _, c := range []struct {
		name    string
		pattern string
		depth   string
		denied  []string
		allowed []string
	}{
		{"relative **", "**/*.env", "", []string{"a.env", ".hidden.env", "sub/k.env", "sub/deep/er/k.env", "dir.env/inside", "new.env", "sub/new.env"}, []string{"keep.txt", "x/y.txt"}},
		{"* is one component (ref)", "*.env", "", []string{"a.env", ".hidden.env"}, []string{"sub/k.env", "keep.txt"}},
		{"braces (ref)", "x/*.{txt,md}", "", []string{"x/y.txt", "x/z.md"}, []string{"a.env"}},
		{"class (ref)", "x/[yz].txt", "", []string{"x/y.txt"}, []string{"x/z.md"}},
		{"dir/** (ref)", "sub/**", "", []string{"sub/k.env", "sub/deep/er/k.env"}, []string{"a.env"}},
		{"a literal pattern is a path", "keep.txt", "", []string{"keep.txt"}, []string{"a.env"}},
		{"dot segments", "./sub/../keep.txt", "", []string{"keep.txt"}, []string{"a.env"}},
		{"absolute pattern", w + "/x/*", "", []string{"x/y.txt", "x/z.md"}, []string{"keep.txt"}},
	} {
		raw := `{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[` +
			plantest.Special("root", "read") + "," + plantest.Path(w, "write") + "," + plantest.Glob(c.pattern, "deny") + `]` + c.depth + `}},"windowsSandboxLevel":"disabled"` + cwd + `}`
		p := resolve(t, raw, Env{})
		if p.FullRead {
			t.Errorf("%s: full read with a deny glob", c.name)
		}
		for _, f := range c.denied {
			if got := p.AccessAt(w + "/" + f); got != AccessNone {
				t.Errorf("%s: %s is %v, want none\n%s", c.name, f, got, dump(p))
			}
		}
		for _, f := range c.allowed {
			if got := p.AccessAt(w + "/" + f); got != AccessWrite {
				t.Errorf("%s: %s is %v, want write\n%s", c.name, f, got, dump(p))
			}
		}
	}

	// glob_scan_max_depth bounds the masks; deeper matches are still
	// denied by the pattern (DenyGlobs) to fs operations.
	for _, c := range []struct {
		depth            string
		masked, unmasked []string
	}{
		{`,"glob_scan_max_depth":1`, []string{"a.env"}, []string{"sub/k.env"}},                   // (ref)
		{`,"glob_scan_max_depth":3`, []string{"sub/k.env"}, []string{"sub/deep/er/k.env"}},       // (ref)
		{`,"glob_scan_max_depth":4`, []string{"sub/deep/er/k.env"}, nil},                         // (ref)
		{"", []string{"a.env", "sub/k.env", "sub/deep/er/k.env", ".hidden.env", "dir.env"}, nil}, // (ref, but dir.env)
	} {
		raw := `{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[` +
			plantest.Special("root", "read") + "," + plantest.Glob("**/*.env", "deny") + `]` + c.depth + `}},"windowsSandboxLevel":"disabled"` + cwd + `}`
		p := resolve(t, raw, Env{})
		for _, f := range c.masked {
			if m, ok := findMount(p, w+"/"+f); !ok || m.Access != AccessNone {
				t.Errorf("depth %q: %s not masked\n%s", c.depth, f, dump(p))
			}
		}
		for _, f := range c.unmasked {
			if _, ok := findMount(p, w+"/"+f); ok {
				t.Errorf("depth %q: %s masked\n%s", c.depth, f, dump(p))
			}
			if p.AccessAt(w+"/"+f) != AccessNone {
				t.Errorf("depth %q: %s not denied by the pattern", c.depth, f)
			}
		}
	}

	p := resolve(t, plantest.Context([]string{plantest.Special("root", "read"), plantest.Glob("**/*.env", "deny")}, cwd), Env{})
	if m, ok := findMount(p, w+"/link.env"); !ok || m.Access != AccessNone || m.Dir {
		t.Errorf("a matching symlink is masked itself: %+v %v\n%s", m, ok, dump(p))
	}
	if _, ok := findMount(p, d+"/other/o.env"); ok {
		t.Errorf("a matching symlink's target was masked\n%s", dump(p))
	}
	if m, ok := findMount(p, w+"/dir.env"); !ok || !m.Dir {
		t.Errorf("a matching directory: %+v %v", m, ok)
	}
	if _, ok := findMount(p, w+"/dir.env/inside"); ok {
		t.Errorf("scanned below a masked directory\n%s", dump(p))
	}
	if want := []string{w + "/**/*.env"}; fmt.Sprint(p.DenyGlobs) != fmt.Sprint(want) {
		t.Errorf("DenyGlobs %q, want %q", p.DenyGlobs, want)
	}
}

func TestResolveDenyGlobErrors(t *testing.T) {
	d := plantest.Tree(t, "w/a/b/c", "w/a/d", "w/e")
	cwd := `,"cwd":"` + plantest.URI(d+"/w") + `"`
	for _, c := range []struct{ pattern, want string }{
		{"[", "invalid glob pattern `[`: syntax error in pattern"},
		{"{a,b", "invalid glob pattern `{a,b`: unbalanced braces"},
		{"a}", "invalid glob pattern `a}`: unbalanced braces"},
		{"{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}", "invalid glob pattern `{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}`: too many {} alternatives"},
	} {
		p, err := Parse([]byte(plantest.Context([]string{plantest.Glob(c.pattern, "deny")}, cwd)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Resolve(p, Env{})
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams || pe.Message != c.want {
			t.Errorf("%s: %v, want -32602 %s", c.pattern, err, c.want)
		}
	}

	// Past the scan budget the request fails rather than run with matches
	// left unmasked.
	defer func(b int) { globScanBudget = b }(globScanBudget)
	globScanBudget = 3
	p, err := Parse([]byte(plantest.Context([]string{plantest.Glob("**/zz", "deny")}, cwd)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Resolve(p, Env{})
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInternal || !strings.Contains(pe.Message, "more than 3 entries") {
		t.Errorf("over budget: %v", err)
	}
	globScanBudget = 100
	if _, err := Resolve(p, Env{}); err != nil {
		t.Errorf("within budget: %v", err)
	}
}

func TestMatchGlob(t *testing.T) {
	for _, c := range []struct {
		g, p string
		want bool
	}{
		{"/w/**/*.env", "/w/a.env", true},
		{"/w/**/*.env", "/w/x/y/a.env", true},
		{"/w/**/*.env", "/w/a.txt", false},
		{"/w/**", "/w", false},
		{"/w/**", "/w/a/b", true},
		{"/w/*", "/w/a/b", false},
		{"/**/a/**/a/**/a/**/b", "/" + strings.Repeat("a/", 200) + "c", false},
		{"/w/a\\*", "/w/a*", true},
		{"/w/a\\*", "/w/ab", false},
	} {
		if got := MatchGlob(c.g, SplitPath(c.p)); got != c.want {
			t.Errorf("MatchGlob(%q, %q) = %v, want %v", c.g, c.p, got, c.want)
		}
	}
	p := &Plan{Root: AccessWrite, DenyGlobs: []string{"/w/**/*.env"}}
	for path, want := range map[string]bool{"/w/new.env": true, "/w/d.env/inside": true, "/w/ok": false, "/x/a.env": false} {
		if got := p.DeniedByGlob(path); got != want {
			t.Errorf("DeniedByGlob(%s) = %v, want %v", path, got, want)
		}
	}
}

// FuzzResolve resolves policies built from the fuzzer's bytes over a fixed
// temporary tree (every path the policy names is in it) and checks the
// Plan's invariants (checkPlan), that it never gives an existing path more
// than its most specific entry does, and that a deny entry wins at its own
// path.
func FuzzResolve(f *testing.F) {
	d := plantest.Tree(f, "w/a/b/f", "w/x.env", "o/x.env", "o/y")
	for _, err := range []error{
		os.WriteFile(d+"/w/.git", []byte("gitdir: ../o\n"), 0o644),
		os.Symlink(d+"/o", d+"/w/link"),
	} {
		if err != nil {
			f.Fatal(err)
		}
	}
	paths := []string{d, d + "/w", d + "/w/a", d + "/w/a/b", d + "/w/.git", d + "/w/link", d + "/o", d + "/o/x.env", d + "/missing", d + "/w/missing"}
	probes := []string{d, d + "/w", d + "/w/a", d + "/w/a/b", d + "/w/a/b/f", d + "/w/x.env", d + "/w/.git", d + "/o", d + "/o/x.env", d + "/o/y"}
	subpaths := []string{"", "a", "../o", ".git", "a/../b"}
	globs := []string{"**/*.env", "*", "a/**", "x.env", "{a,o}/*", "**", "../o/*"}
	accesses := []string{"read", "write", "deny", "none"}
	f.Add([]byte{1, 1, 0, 2, 2, 0, 6, 0, 0})
	f.Add([]byte{10, 0, 0, 1, 1, 0, 13, 2, 0})
	f.Add([]byte{0, 1, 0, 4, 1, 0, 5, 2, 1, 11, 1, 0})
	f.Add([]byte{10, 2, 0, 2, 0, 0, 12, 1, 0, 14, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 60 {
			return
		}
		var entries []string
		type named struct {
			path   string
			access Access
		}
		var named_ []named
		for i := 0; i+2 < len(b); i += 3 {
			access := accesses[int(b[i+1])%len(accesses)]
			skip := ""
			if b[i+2]&1 == 1 {
				skip = `,"missing_path_behavior":"skip"`
			}
			var e string
			switch k := int(b[i]) % 15; {
			case k < len(paths):
				e = `{"path":{"type":"path","path":"` + plantest.URI(paths[k]) + `"},"access":"` + access + `"` + skip + `}`
				if c, err := filepath.EvalSymlinks(paths[k]); err == nil {
					a := map[string]Access{"read": AccessRead, "write": AccessWrite}[access]
					named_ = append(named_, named{c, a})
				}
			case k == 10:
				if access == "write" {
					access = "read" // a writable "/" would look for /.git on the host
				}
				e = plantest.Special("root", access)
			case k == 11:
				e = `{"path":{"type":"special","value":{"kind":"project_roots","subpath":"` + subpaths[int(b[i+2]>>1)%len(subpaths)] + `"}},"access":"` + access + `"}`
			case k == 12:
				e = plantest.Special("tmpdir", access)
			default:
				e = plantest.Glob(globs[int(b[i+2]>>1)%len(globs)], access)
			}
			entries = append(entries, e)
		}
		extra := `,"cwd":"` + plantest.URI(d+"/w") + `","workspaceRoots":["` + plantest.URI(d+"/w") + `"],"temporaryDirectories":["` + plantest.URI(d+"/o") + `"]`
		if len(b) > 0 && b[0]&0x80 != 0 {
			extra += `,"policyContext":{"workspaceRoots":["` + plantest.URI(d+"/w/a") + `"]}`
		}
		raw := plantest.Context(entries, extra)
		if len(b) > 0 && b[len(b)-1]&0x40 != 0 {
			raw = strings.Replace(raw, `]}},`, fmt.Sprintf(`],"glob_scan_max_depth":%d}},`, 1+b[len(b)-1]%4), 1)
		}
		p, err := Parse([]byte(raw))
		if err != nil {
			t.Fatalf("Parse(%s): %v", raw, err)
		}
		plan, err := Resolve(p, Env{TempDir: d + "/o"})
		if err != nil {
			t.Fatalf("Resolve(%s): %v", raw, err)
		}
		if err := checkPlan(plan); err != nil {
			t.Fatalf("%s: %v\n%s", raw, err, dump(plan))
		}
		// Never more than the most specific path entry, when one is the
		// most specific of all entries naming an ancestor (specials and
		// globs only narrow or are checked by the table tests).
		for _, n := range named_ {
			if n.access == AccessNone {
				if got := plan.AccessAt(n.path); got != AccessNone {
					t.Fatalf("%s: deny entry %s is %v\n%s", raw, n.path, got, dump(plan))
				}
			}
		}
		if plan.Root != AccessNone {
			return
		}
		for _, probe := range probes {
			c, err := filepath.EvalSymlinks(probe)
			if err != nil {
				continue
			}
			best, bestDepth, specialsOnly := AccessNone, -1, true
			for _, n := range named_ {
				if Within(c, n.path) && depth(n.path) >= bestDepth {
					if depth(n.path) > bestDepth {
						best = n.access
					} else {
						best = combine(best, n.access)
					}
					bestDepth, specialsOnly = depth(n.path), false
				}
			}
			if specialsOnly || strings.Contains(raw, `"special"`) {
				continue
			}
			if got := plan.AccessAt(c); got > best {
				t.Fatalf("%s: %s is %v, its most specific entry gives %v\n%s", raw, c, got, best, dump(plan))
			}
		}
	})
}

// BenchmarkResolveCodexWorkspaceWrite: the cost Resolve adds to each
// sandboxed request codex makes in workspace-write mode.
func BenchmarkResolveCodexWorkspaceWrite(b *testing.B) {
	d := plantest.Tree(b, "w/.git/config", "w/src/a.go", "tmp/")
	w := plantest.URI(d + "/w")
	raw := plantest.Context([]string{plantest.Special("root", "read"), plantest.Special("project_roots", "write"), plantest.Special("slash_tmp", "write"), plantest.Special("tmpdir", "write"),
		`{"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read","missing_path_behavior":"skip"}`,
		`{"path":{"type":"special","value":{"kind":"project_roots","subpath":".agents"}},"access":"read","missing_path_behavior":"skip"}`,
	}, `,"cwd":"`+w+`","workspaceRoots":["`+w+`"]`)
	env := Env{TempDir: d + "/tmp"}
	for b.Loop() {
		p, err := Parse([]byte(raw))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Resolve(p, env); err != nil {
			b.Fatal(err)
		}
	}
}

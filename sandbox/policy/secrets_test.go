package policy

import (
	"os"
	"syscall"
	"testing"

	"github.com/execgo/exec-server/internal/test/plantest"
)

// The server's secrets are masked in every plan that would show them, and
// only there (a mask on an invisible path would need a mount point the
// view lacks).
func TestResolveMasksServerSecrets(t *testing.T) {
	d := plantest.Tree(t, "w/a.go", "state/reg", "keys/token", "keys/tls.key", "w/inside.key")
	work := d + "/w"
	if err := os.Symlink(d+"/keys/token", d+"/w/token-link"); err != nil {
		t.Fatal(err)
	}
	secrets := []string{d + "/keys/token", d + "/keys/tls.key", d + "/state", work + "/inside.key", d + "/missing"}
	env := Env{Secrets: secrets}
	cwd := `,"cwd":"` + plantest.URI(work) + `","workspaceRoots":["` + plantest.URI(work) + `"]`
	masked := func(p *Plan) map[string]bool {
		m := map[string]bool{}
		for _, mt := range p.Mounts {
			if mt.Access == AccessNone {
				m[mt.Path] = true
			}
		}
		return m
	}
	for _, c := range []struct {
		name, raw string
		want      []string
	}{
		{"full read", plantest.Context([]string{plantest.Special("root", "read")}, cwd), secrets[:4]},
		{"workspace write", plantest.Context([]string{plantest.Special("root", "read"), plantest.Special("project_roots", "write")}, cwd), secrets[:4]},
		{"full write", plantest.Context([]string{plantest.Special("root", "write")}, cwd), secrets[:4]},
		{"disabled", `{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`, secrets[:4]},
		{"external", `{"permissions":{"type":"external","network":"enabled"},"windowsSandboxLevel":"disabled"}`, secrets[:4]},
		{"empty root, workspace only", plantest.Context([]string{plantest.Special("project_roots", "write")}, cwd), []string{work + "/inside.key"}},
		{"keys denied already", plantest.Context([]string{plantest.Special("root", "read"), plantest.Path(d+"/keys", "deny")}, cwd), []string{d + "/keys", d + "/state", work + "/inside.key"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := resolve(t, c.raw, env)
			got := masked(p)
			if len(got) != len(c.want) {
				t.Errorf("masks %v, want %v\n%s", got, c.want, dump(p))
			}
			for _, w := range c.want {
				if !got[w] {
					t.Errorf("%s not masked\n%s", w, dump(p))
				}
				if a := p.AccessAt(w); a != AccessNone {
					t.Errorf("AccessAt(%s) = %v", w, a)
				}
			}
		})
	}
	// Without secrets nothing changes (the full-write plan stays empty).
	if p := resolve(t, plantest.Context([]string{plantest.Special("root", "write")}, cwd), Env{}); len(p.Mounts) != 0 || !p.FullWrite {
		t.Fatalf("full write without secrets:\n%s", dump(p))
	}
}

func TestSecretIdentity(t *testing.T) {
	d := plantest.Tree(t, "keys/token", "other")
	if err := os.Link(d+"/keys/token", d+"/hardlink"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("keys/token", d+"/symlink"); err != nil {
		t.Fatal(err)
	}
	old := serverSecrets.Load()
	t.Cleanup(func() { serverSecrets.Store(old) })
	SetServerSecrets(d+"/symlink", d+"/nosuch", "")
	if got := ServerSecrets(); len(got) != 1 || got[0] != d+"/keys/token" {
		t.Fatalf("ServerSecrets() = %q, want the link's target only", got)
	}
	for _, c := range []struct {
		path string
		want bool
	}{{d + "/keys/token", true}, {d + "/hardlink", true}, {d + "/symlink", true}, {d + "/other", false}} {
		var st syscall.Stat_t
		if err := syscall.Stat(c.path, &st); err != nil {
			t.Fatal(err)
		}
		if got := Secret(&st) != ""; got != c.want {
			t.Errorf("Secret(%s) = %v, want %v", c.path, got, c.want)
		}
	}
}

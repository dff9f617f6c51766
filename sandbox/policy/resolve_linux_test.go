package policy

import (
	"syscall"
	"testing"

	"github.com/execgo/exec-server/internal/test/plantest"
)

// A FIFO where a gitdir pointer file would be does not stall Resolve.
func TestResolveGitdirIsNotRead(t *testing.T) {
	d := plantest.Tree(t, "w/")
	if err := syscall.Mkfifo(d+"/w/.git", 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	if got := gitdirTarget(d + "/w/.git"); got != "" {
		t.Errorf("gitdirTarget(fifo) = %q", got)
	}
	p := resolve(t, plantest.Context([]string{plantest.Path(d+"/w", "write")}, ""), Env{})
	if m, ok := findMount(p, d+"/w/.git"); !ok || !m.Protected {
		t.Errorf("fifo .git not protected: %+v\n%s", m, dump(p))
	}
}

package process

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
	"github.com/execgo/exec-server/sandbox/policy"
)

// TestStartErrorSandboxKinds: the sandbox failures of process/start carry
// 0.171's kinds. A Windows MXC level is -32602 sandboxUnavailable with the
// reference's text (probed: `native MXC is unavailable on this executor`),
// and a set-up failure that is neither a missing kernel feature nor an OS
// error is -32603 sandboxPreparation. Nothing runs either way. Not
// parallel: it swaps the command seam.
func TestStartErrorSandboxKinds(t *testing.T) {
	m, sink := newTestManager(t, Options{})
	ws := t.TempDir()
	ran := filepath.Join(ws, "ran")

	p := params(t, "mxc", "touch", ran)
	p.Cwd = fileURI(ws)
	p.Sandbox = []byte(`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"mxc"}`)
	_, err := m.Start(p)
	wantErr(t, err, protocol.CodeInvalidParams, "native MXC is unavailable on this executor")
	if got := protocol.KindOf(err); got != protocol.KindSandboxUnavailable {
		t.Errorf("mxc: data.kind %q, want sandboxUnavailable", got)
	}

	oldPlan, oldCommand := planOf, planCommand
	t.Cleanup(func() { planOf, planCommand = oldPlan, oldCommand })
	planOf = func(json.RawMessage) (*policy.Plan, error) { return &policy.Plan{}, nil }
	planCommand = func(*policy.Plan, string, []string, []string, string) (*sandbox.Spec, error) {
		return nil, errors.New("mount table changed under the view")
	}
	p.ProcessID = "prep"
	_, err = m.Start(p)
	wantErr(t, err, protocol.CodeInternal, "sandbox: mount table changed under the view")
	if got := protocol.KindOf(err); got != protocol.KindSandboxPreparation {
		t.Errorf("preparation: data.kind %q, want sandboxPreparation", got)
	}
	planCommand = func(*policy.Plan, string, []string, []string, string) (*sandbox.Spec, error) {
		return nil, sandbox.ErrUnavailable
	}
	p.ProcessID = "unavail"
	_, err = m.Start(p)
	if got := protocol.KindOf(err); got != protocol.KindSandboxUnavailable {
		t.Errorf("unavailable at set-up: data.kind %q (%v), want sandboxUnavailable", got, err)
	}

	if _, err := os.Lstat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused start ran its command: %v", err)
	}
	for _, id := range []string{"mxc", "prep", "unavail"} {
		if len(sink.of(id)) != 0 {
			t.Errorf("%s: a refused start emitted events", id)
		}
	}
}

// TestSpawnErrorIs: the spawn kinds still mean fs.ErrNotExist and
// fs.ErrPermission to errors.Is, as NotFound and PermissionDenied did.
func TestSpawnErrorIs(t *testing.T) {
	t.Parallel()
	if err := protocol.SpawnError(os.ErrNotExist); !errors.Is(err, os.ErrNotExist) || err.Kind() != protocol.KindSpawnNotFound {
		t.Errorf("ENOENT: %v kind %q", err, err.Kind())
	}
	if err := protocol.SpawnError(os.ErrPermission); !errors.Is(err, os.ErrPermission) || err.Kind() != protocol.KindSpawnPermissionDenied {
		t.Errorf("EACCES: %v kind %q", err, err.Kind())
	}
	if err := protocol.SpawnError(errors.New("odd")); err.Kind() != protocol.KindSpawnFailed {
		t.Errorf("other: kind %q", err.Kind())
	}
}

package hostile

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// simulatedFeatures are the values of EXEC_SERVER_SANDBOX_SIMULATE_MISSING
// (the kernel side's test hook that makes the probe report a feature
// missing) and the words the -32603 message must contain to name it.
var simulatedFeatures = []struct{ value, name string }{
	{"userns", "user namespace"},
	{"mountns", "mount namespace"},
	{"landlock", "landlock"},
	{"seccomp", "seccomp"},
}

// TestSandboxFailClosed is escape case 29: with a kernel feature reported missing,
// every sandboxed request fails with -32603 naming it and nothing runs;
// requests without a sandbox still work. A root server needs no user
// namespace, so with userns missing it may still sandbox, but then fully.
func TestSandboxFailClosed(t *testing.T) {
	if os.Getenv("SANDBOX_ESCAPE_REFERENCE") != "" {
		t.Skip("the reference has no EXEC_SERVER_SANDBOX_SIMULATE_MISSING hook")
	}
	sbxSetup(t)
	for _, m := range sbxModes {
		t.Run(m.name, func(t *testing.T) {
			if only := os.Getenv("SANDBOX_ESCAPE_ONLY"); only != "" && only != m.name {
				t.Skipf("SANDBOX_ESCAPE_ONLY=%s", only)
			}
			enterMode(t, m)
			for _, f := range simulatedFeatures {
				t.Run("29_missing_"+f.value, func(t *testing.T) {
					t.Parallel()
					s := startSandboxServer(t, m, "EXEC_SERVER_SANDBOX_SIMULATE_MISSING="+f.value)
					fx := newFixture(t, m)
					c := connect(t, s, fx)
					before := fx.snapshot(t)
					optional := m.uid < 0 && f.value == "userns"
					failClosed(t, c, f.name, optional)
					fx.checkHost(t, before)
					s.alive(t)
				})
			}
		})
	}
}

func failClosed(t *testing.T, c *sbxClient, feature string, optional bool) {
	fx := c.fx
	wantOK(t, "control: fs/writeFile WORK/plain.txt without a sandbox", c.fs("fs/writeFile", map[string]any{
		"path": fileURI(fx.w("plain.txt")), "dataBase64": "eA==", "sandbox": nil,
	}, nil))
	// named: the error is -32603 and names the missing feature.
	named := func(what string, err error) bool {
		t.Helper()
		if err == nil {
			return false
		}
		if rpcCode(err) != -32603 || !strings.Contains(strings.ToLower(err.Error()), feature) {
			t.Errorf("mismatch: %s: %v; want -32603 naming %q", what, err, feature)
		}
		return true
	}
	err := c.writeFile(fx.w("ran.txt"), "x")
	if !named("fs/writeFile WORK/ran.txt", err) {
		if !optional {
			t.Errorf("HOLE: fs/writeFile ran with %s reported missing (fail-open, or the EXEC_SERVER_SANDBOX_SIMULATE_MISSING hook is not implemented)", feature)
		}
	} else {
		mustNotExist(t, fx.w("ran.txt"))
	}
	ro := []any{pathEntry(fx.WORK, "read")}
	_, err = c.fs2read(fsContext(fx.WORK, ro), fx.w("in.txt"))
	if !named("fs/readFile under restricted read", err) && !optional {
		t.Errorf("HOLE: a confined fs/readFile ran with %s reported missing", feature)
	}
	r := c.run([]string{"touch", "ran2.txt"}, nil)
	switch {
	case r.StartErr != nil:
		named("process/start touch ran2.txt", r.StartErr)
		mustNotExist(t, fx.w("ran2.txt"))
	case !optional:
		t.Errorf("HOLE: process/start ran with %s reported missing: %v", feature, r)
	default:
		wantProcOK(t, "process/start touch ran2.txt (root needs no user namespace)", r)
	}
	if optional {
		// Sandboxing anyway is allowed only with full confinement.
		wantRefused(t, "fs/writeFile OUT/x with userns missing (root)", c.writeFile(fx.o("x.txt"), "x"), -32603, -32600)
		if r := c.run([]string{"touch", "../OUT/y.txt"}, nil); r.StartErr == nil {
			wantProcDenied(t, "touch ../OUT/y.txt with userns missing (root)", r, true)
		}
		t.Logf("root with user namespaces reported missing: fs/writeFile inside: %v; process/start: %v", err, r)
	}
}

// fs2read reads path with an explicit sandbox.
func (c *sbxClient) fs2read(sbx map[string]any, path string) (string, error) {
	var res struct {
		DataBase64 string `json:"dataBase64"`
	}
	err := c.fs("fs/readFile", map[string]any{"path": fileURI(path), "sandbox": sbx}, &res)
	return fmt.Sprint(len(res.DataBase64)), err
}

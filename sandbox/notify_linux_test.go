package sandbox

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// denyPlan resolves a workspace-write policy over ws with the deny globs
// **/*.env and secrets/** and the missing deny path ws/missing.key.
func denyPlan(t testing.TB, ws string) *Plan {
	t.Helper()
	return resolve(t, ctx([]string{
		special("root", "read"),
		pathEntry(ws, "write"),
		glob(ws+"/**/*.env", "deny"),
		glob(ws+"/secrets/**", "deny"),
		pathEntry(filepath.Join(ws, "missing.key"), "deny"),
	}, ""), Env{})
}

// runSh runs sh -c script confined by p in dir; it returns the exit status
// and the output (stdout and stderr).
func runSh(t *testing.T, p *Plan, dir, script string) (int, string) {
	t.Helper()
	spec, err := p.Command("/bin/sh", []string{"sh", "-c", script}, []string{"PATH=/usr/bin:/bin"}, dir)
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); r.Close(); done <- b }()
	defer spec.Release()
	proc, err := os.StartProcess(spec.Path, spec.Argv, &os.ProcAttr{Env: spec.Env, Files: []*os.File{null, w, w},
		Sys: &syscall.SysProcAttr{Setpgid: true, Cloneflags: spec.Cloneflags, Pdeathsig: syscall.SIGKILL,
			UidMappings: sysMaps(spec.UidMappings), GidMappings: sysMaps(spec.GidMappings)}})
	w.Close()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	// A hang is a failure, not a test timeout.
	timer := time.AfterFunc(30*time.Second, func() {
		t.Errorf("%q: still running after 30 s: killed", script)
		_ = syscall.Kill(-proc.Pid, syscall.SIGKILL)
	})
	defer timer.Stop()
	st, err := proc.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return st.ExitCode(), string(<-done)
}

// denyFixture makes ws with in.txt, ok.txt, dir/f.txt and plain/.
func denyFixture(t *testing.T) string {
	t.Helper()
	ws, _ := fixture(t)
	for name, body := range map[string]string{"in.txt": "in", "ok.txt": "ok", "dir/f.txt": "f", "sub/keep.txt": "k"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

func TestCommandDenyGlobCreate(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	p := denyPlan(t, ws)
	if !superviseCreation(p) {
		t.Fatalf("no supervision for %s", dump(p))
	}
	refused := []struct {
		name, script string
		gone         []string // must not exist on the host afterwards
	}{
		{"redirect", "echo x > new.env", []string{"new.env"}},
		{"touch in a subdirectory", "touch sub/new2.env", []string{"sub/new2.env"}},
		{"cp", "cp in.txt new3.env", []string{"new3.env"}},
		{"mkdir", "mkdir d.env", []string{"d.env"}},
		{"mkfifo", "mkfifo f.env", []string{"f.env"}},
		{"symlink", "ln -s in.txt l.env", []string{"l.env"}},
		{"hard link", "ln in.txt h.env", []string{"h.env"}},
		{"rename", "mv ok.txt m.env", []string{"m.env"}},
		{"through a dangling symlink", "ln -s target.env l && echo x > l", []string{"target.env"}},
		{"through a symlinked directory", "ln -s sub sl && echo x > sl/deep.env", []string{"sub/deep.env"}},
		{"absolute path", "echo x > " + ws + "/abs.env", []string{"abs.env"}},
		{"dot-dot", "echo x > sub/../dd.env", []string{"dd.env"}},
		{"directory moved under a denied tree", "mv dir secrets", []string{"secrets"}},
		{"into a denied tree", "mkdir secrets && touch secrets/x", []string{"secrets/x"}},
		{"missing deny path", "echo x > missing.key", []string{"missing.key"}},
		{"missing deny path, mkdir", "mkdir missing.key", []string{"missing.key"}},
		{"append", "echo x >> app.env", []string{"app.env"}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runSh(t, p, ws, tc.script)
			if code == 0 || !strings.Contains(out, "Permission denied") {
				t.Errorf("%q: exit %d, output %q; want a failure with Permission denied", tc.script, code, out)
			}
			for _, g := range tc.gone {
				if _, err := os.Lstat(filepath.Join(ws, g)); err == nil {
					t.Errorf("%q: %s exists on the host", tc.script, g)
				}
			}
		})
	}
	// The files the refused renames would have moved are still there.
	assertFile(t, filepath.Join(ws, "ok.txt"), "ok")
	assertFile(t, filepath.Join(ws, "dir/f.txt"), "f")

	allowed := []struct{ name, script, check string }{
		{"redirect", "echo hi > new.txt", "new.txt=hi\n"},
		{"append", "echo more >> in.txt", "in.txt=inmore\n"},
		{"mkdir", "mkdir -p a/b/c && touch a/b/c/f", "a/b/c/f="},
		{"rename", "echo r > r1 && mv r1 r2", "r2=r\n"},
		{"rename a directory", "mkdir -p mvd/x && mv mvd mvd2", ""},
		{"symlink", "ln -s ok.txt sym && cat sym > viasym", "viasym=ok"},
		{"hard link", "ln ok.txt hard", "hard=ok"},
		{"through a symlink to a new name", "ln -s made.txt dl && echo m > dl", "made.txt=m\n"},
		{"/dev/stdout and /dev/null", "echo so > /dev/stdout && echo x > /dev/null && echo se > /dev/stderr", ""},
		{"fd redirect", "exec 3> fd3.txt && echo three >&3 && echo four >> /dev/fd/3", "fd3.txt=three\nfour\n"},
		{"mkfifo", "mkfifo pipe.txt && (echo fifo > pipe.txt &) && cat pipe.txt > fromfifo", "fromfifo=fifo\n"},
		{"noclobber refuses an existing file", "set -C; echo x > in.txt; test $? -ne 0", ""},
		{"O_EXCL on an existing name", "set -C; echo x > ok.txt || echo refused > excl", "excl=refused\n"},
		{"directory target", "echo x > sub 2>/dev/null; test $? -ne 0", ""},
	}
	for _, tc := range allowed {
		t.Run("allowed "+tc.name, func(t *testing.T) {
			code, out := runSh(t, p, ws, tc.script)
			if code != 0 {
				t.Fatalf("%q: exit %d, output %q", tc.script, code, out)
			}
			if name, want, ok := strings.Cut(tc.check, "="); ok {
				assertFile(t, filepath.Join(ws, name), want)
			}
		})
	}
}

func assertFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if !bytes.Equal(b, []byte(want)) {
		t.Errorf("%s = %q, want %q", path, b, want)
	}
}

func TestCommandDenyGlobUmask(t *testing.T) {
	needSandbox(t)
	ws := denyFixture(t)
	p := denyPlan(t, ws)
	code, out := runSh(t, p, ws, "umask 077; touch f; mkdir d; umask 022; touch g")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for name, want := range map[string]os.FileMode{"f": 0o600, "d": os.ModeDir | 0o700, "g": 0o644} {
		st, err := os.Stat(filepath.Join(ws, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode(), want)
		}
	}
}

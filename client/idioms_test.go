package client_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"text/template"
	"time"

	"github.com/execgo/exec-server/client"
)

func oursStdio(t *testing.T) *client.Client {
	t.Helper()
	bin, err := ours()
	if err != nil {
		t.Skip(err)
	}
	s := server{name: "ours", bin: bin, env: func(testing.TB) []string { return os.Environ() }}
	return s.stdio(t, client.Options{})
}

// client.FS passes testing/fstest.TestFS over a tree on the server, and
// fs.WalkDir and template.ParseFS work through it.
func TestFSAdapter(t *testing.T) {
	c := oursStdio(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	for name, data := range map[string]string{"a.txt": "alpha", "sub/b.txt": "beta", "sub/deeper/c.tmpl": "hi {{.}}", "empty": ""} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := fs.Sub(c.FS(ctx), strings.TrimPrefix(dir, "/"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(sub, "a.txt", "sub/b.txt", "sub/deeper/c.tmpl", "empty"); err != nil {
		t.Fatal(err)
	}
	var walked []string
	fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		walked = append(walked, p)
		return err
	})
	if got := strings.Join(walked, " "); got != ". a.txt empty sub sub/b.txt sub/deeper sub/deeper/c.tmpl" {
		t.Errorf("WalkDir visited %s", got)
	}
	tmpl, err := template.ParseFS(sub, "sub/deeper/*.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	tmpl.Execute(&out, "there")
	if out.String() != "hi there" {
		t.Errorf("template: %q", out.String())
	}
}

// fs errors are *fs.PathError naming the op and the path (errors.Is
// fs.ErrNotExist still holds); a non-zero exit from Run is an *ExitError;
// Rename moves a file and reports a missing source as fs.ErrNotExist.
func TestSDKIdioms(t *testing.T) {
	c := oursStdio(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	_, err := c.Stat(ctx, missing)
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Op != "stat" || pe.Path != missing || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing) = %#v; want *fs.PathError{stat, %s} matching fs.ErrNotExist", err, missing)
	}
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Errorf("the *client.Error is no longer reachable: %v", err)
	}
	if _, err := c.ReadFile(ctx, "relative"); !errors.As(err, &pe) || pe.Path != "relative" {
		t.Errorf("ReadFile(relative) = %v", err)
	}

	err = c.Run(ctx, client.Cmd{Argv: []string{"sh", "-c", "exit 3"}, Env: shEnv})
	var ee *client.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || ee.Killed || err.Error() != "exit status 3" {
		t.Errorf("Run(exit 3) = %v", err)
	}
	if err := c.Run(ctx, client.Cmd{Argv: []string{"true"}, Env: shEnv}); err != nil {
		t.Errorf("Run(true) = %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = c.Run(short, client.Cmd{Argv: []string{"sleep", "30"}, Env: shEnv})
	if !errors.As(err, &ee) || !ee.Killed {
		t.Errorf("Run past its context = %v; want an *ExitError with Killed", err)
	}

	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("x"), 0o600)
	if err := c.Rename(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still there", a)
	}
	if got, _ := os.ReadFile(b); string(got) != "x" {
		t.Errorf("%s holds %q", b, got)
	}
	var le *os.LinkError
	if err := c.Rename(ctx, a, b); !errors.As(err, &le) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Rename of a missing file = %v", err)
	}
}

package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// rm, mkdir and mv work on remote paths, name the path in errors (exit 1),
// and ls -l shows mode, owner, size, time and link targets.
func TestFileOps(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := mainOut(t, "", append(args[:1:1], append([]string{"--url", serverURL}, args[1:]...)...)...)
		if code != want {
			t.Errorf("%v: exit %d, want %d; stderr %q", args, code, want, errOut)
		}
		return out + errOut
	}
	run(0, "mkdir", "-p", ":"+dir+"/a/b")
	if fi, err := os.Stat(dir + "/a/b"); err != nil || !fi.IsDir() {
		t.Fatalf("mkdir -p: %v", err)
	}
	if out := run(1, "mkdir", ":"+dir+"/x/y"); !strings.Contains(out, dir+"/x/y") {
		t.Errorf("mkdir error does not name the path: %q", out)
	}
	os.WriteFile(dir+"/a/f", []byte("data"), 0o640)
	os.Symlink("f", dir+"/a/link")
	out := run(0, "ls", "-l", ":"+dir+"/a")
	for _, want := range []string{"-rw-r-----", " f\n", "link -> f", "drwx"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls -l lacks %q:\n%s", want, out)
		}
	}
	run(0, "mv", ":"+dir+"/a/f", ":"+dir+"/a/g")
	if b, _ := os.ReadFile(dir + "/a/g"); string(b) != "data" {
		t.Errorf("mv: g holds %q", b)
	}
	if out := run(1, "mv", ":"+dir+"/a/f", ":"+dir+"/a/h"); !strings.Contains(out, dir+"/a/f") {
		t.Errorf("mv of a missing file: %q", out)
	}
	if out := run(1, "rm", ":"+dir+"/a"); !strings.Contains(out, dir+"/a") {
		t.Errorf("rm of a directory without -r: %q", out)
	}
	run(1, "rm", ":"+dir+"/nope")
	run(0, "rm", "-f", ":"+dir+"/nope")
	run(0, "rm", "-r", ":"+dir+"/a")
	if _, err := os.Stat(dir + "/a"); err == nil {
		t.Errorf("rm -r left %s", filepath.Join(dir, "a"))
	}
	run(2, "rm", "relative")
	run(2, "mv", ":/one")
}

// Named contexts: context add/use/ls/rm keep a server URL and its token
// file in a config file; --context, $EXEC_SERVER_CONTEXT or the current one
// supply --url and --token-file; --url given still wins.
func TestContexts(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	t.Setenv("EXEC_SERVER_CONFIG", filepath.Join(dir, "config.toml"))
	t.Setenv("EXEC_SERVER_URL", "")
	t.Setenv("EXEC_SERVER_TOKEN", "")
	t.Setenv("EXEC_SERVER_CONTEXT", "")
	ok := func(args ...string) string {
		t.Helper()
		code, out, errOut := mainOut(t, "", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, errOut)
		}
		return out
	}
	ok("context", "add", "secured", "--url", tokenURL, "--token-file", tokenFile)
	ok("context", "add", "plain", "--url", serverURL)
	if out := ok("context", "ls"); !regexp.MustCompile(`(?m)^\*\s+secured`).MatchString(out) || !strings.Contains(out, "plain") {
		t.Errorf("context ls:\n%s", out)
	}
	// The current context (the first added) carries the token file.
	if out := ok("exec", "--", "echo", "hi"); out != "hi\n" {
		t.Errorf("exec through the current context: %q", out)
	}
	ok("context", "use", "plain")
	if out := ok("exec", "--context", "secured", "--", "echo", "by-flag"); out != "by-flag\n" {
		t.Errorf("exec --context: %q", out)
	}
	t.Setenv("EXEC_SERVER_CONTEXT", "secured")
	ok("exec", "--", "true")
	t.Setenv("EXEC_SERVER_CONTEXT", "")
	if code, _, errOut := mainOut(t, "", "exec", "--context", "nope", "--", "true"); code != 2 || !strings.Contains(errOut, `context "nope"`) {
		t.Errorf("unknown context: exit %d %q", code, errOut)
	}
	ok("context", "rm", "plain")
	if out := ok("context", "ls"); strings.Contains(out, "plain") {
		t.Errorf("context rm left it:\n%s", out)
	}
}

// exec -d starts a command, prints its id and leaves it in its session;
// ps, attach and kill then find that session without --session.
func TestExecDetachAttachKill(t *testing.T) {
	needServer(t)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv("EXEC_SERVER_SESSION", "")
	code, out, errOut := mainOut(t, "", "exec", "--url", serverURL, "-d", "--", "sh", "-c", "echo started; read x < /dev/null; sleep 1; echo done >&2; exit 3")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("exec -d: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = mainOut(t, "", "ps", "--url", serverURL)
	if code != 0 || !strings.Contains(out, id) {
		t.Errorf("ps: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = mainOut(t, "", "attach", "--url", serverURL, id)
	if code != 3 || out != "started\n" || !strings.Contains(errOut, "done") {
		t.Errorf("attach: exit %d, stdout %q, stderr %q; want 3, started, done", code, out, errOut)
	}
	_, out, _ = mainOut(t, "", "exec", "--url", serverURL, "-d", "--", "sleep", "300")
	id = strings.TrimSpace(out)
	if code, _, errOut := mainOut(t, "", "kill", "--url", serverURL, id); code != 0 {
		t.Fatalf("kill: exit %d %s", code, errOut)
	}
	code, _, errOut = mainOut(t, "", "attach", "--url", serverURL, id)
	if code != 137 {
		t.Errorf("attach after kill: exit %d (%s), want 137", code, errOut)
	}
}

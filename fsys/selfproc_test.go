package fsys

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/internal/test/asnobody"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox/policy"
)

// #17 item 3: unsandboxed fs methods never serve the server's own /proc
// directory (its environment, memory, descriptors), however the path
// reaches it (self, thread-self, its pid, a thread's id, a symlink a
// sandbox planted), and never its secret files (by identity: a symlink or
// a hard link is refused too). Other processes' /proc entries and global
// procfs files still read.
func TestServerOwnProcRefused(t *testing.T) {
	f := New(Options{})
	h := f.NewHandles()
	defer h.CloseAll()
	dir := t.TempDir()
	pid := strconv.Itoa(os.Getpid())
	runtime.LockOSThread()
	tid := strconv.Itoa(unix.Gettid())
	runtime.UnlockOSThread()
	for name, target := range map[string]string{"AGENTS.md": "/proc/self/environ", "fds": "/proc/self/fd", "pidlink": "/proc/" + pid, "rel": "../../../../../../../../proc/self/cmdline"} {
		if err := os.Symlink(target, dir+"/"+name); err != nil {
			t.Fatal(err)
		}
	}
	own := []string{
		"/proc/self/environ", "/proc/thread-self/environ", "/proc/" + pid + "/environ",
		"/proc/" + pid + "/task/" + tid + "/environ", "/proc/" + tid + "/environ",
		"/proc/self/mem", "/proc/self/maps", "/proc/self/cmdline", "/proc/self/auxv", "/proc/self/status",
		"/proc/self/root/proc/self/environ", "/proc/self/cwd/" + "/proc/self/environ",
		dir + "/AGENTS.md", dir + "/pidlink/environ", dir + "/rel",
	}
	for _, p := range own {
		_, e := call(t, f, nil, protocol.MethodFsReadFile, obj("path", uri(p)))
		if strings.HasPrefix(p, "/proc/self/cwd/") {
			// The test's cwd is not /, so this one may just be missing.
			if e != nil && e.Code == protocol.CodeNotFound {
				continue
			}
		}
		wantOwnRefusal(t, "fs/readFile "+p, e, p)
		_, e = call(t, f, h, protocol.MethodFsOpen, obj("handleId", "h", "path", uri(p)))
		wantOwnRefusal(t, "fs/open "+p, e, p)
		if isSymlink(p) {
			continue // fs/copy copies a link as a link
		}
		_, e = call(t, f, nil, protocol.MethodFsCopy, obj("sourcePath", uri(p), "destinationPath", uri(dir+"/copy"), "recursive", false))
		wantOwnRefusal(t, "fs/copy "+p, e, p)
		if _, err := os.Stat(dir + "/copy"); err == nil {
			t.Fatalf("fs/copy %s made the copy", p)
		}
	}
	for _, p := range []string{"/proc/self/fd", "/proc/self", "/proc/" + pid + "/task", dir + "/fds", dir + "/pidlink"} {
		_, e := call(t, f, nil, protocol.MethodFsReadDirectory, obj("path", uri(p)))
		wantOwnRefusal(t, "fs/readDirectory "+p, e, p)
	}
	// A symlink is copied as a link (nothing read); real directories are
	// refused before anything is made.
	for _, p := range []string{"/proc/self/fd", "/proc/" + pid + "/task"} {
		_, e := call(t, f, nil, protocol.MethodFsCopy, obj("sourcePath", uri(p), "destinationPath", uri(dir+"/copydir"), "recursive", true))
		wantOwnRefusal(t, "fs/copy -r "+p, e, p)
		if _, err := os.Lstat(dir + "/copydir"); err == nil {
			t.Fatalf("fs/copy %s made the copy", p)
		}
	}
	// fs/canonicalize through the server's own magic links would name its
	// open files, its cwd and its binary.
	held, err := os.Open(dir + "/AGENTS.md")
	if err == nil {
		defer held.Close()
	}
	if err := os.Symlink("/proc/self/exe", dir+"/exe"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/proc/self/cwd", "/proc/self/exe", fmt.Sprintf("/proc/self/fd/%d", held.Fd()), "/proc/" + pid + "/root/tmp", "/proc/thread-self/cwd", dir + "/exe"} {
		_, e := call(t, f, nil, protocol.MethodFsCanonicalize, obj("path", uri(p)))
		wantRefusal(t, "fs/canonicalize "+p, e, p, "own /proc directory")
	}
	for _, p := range []string{"/proc/self/environ", dir, "/proc/version"} {
		if _, e := call(t, f, nil, protocol.MethodFsCanonicalize, obj("path", uri(p))); e != nil {
			t.Errorf("fs/canonicalize %s: %v", p, e)
		}
	}

	// Writes too: /proc/self/comm would rename the server's thread.
	_, e := call(t, f, nil, protocol.MethodFsWriteFile, obj("path", uri("/proc/thread-self/comm"), "dataBase64", b64([]byte("pwned"))))
	wantOwnRefusal(t, "fs/writeFile /proc/thread-self/comm", e, "/proc/thread-self/comm")

	// Not the server's: a child's entries, global procfs files, the
	// procfs root.
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	for _, p := range []string{fmt.Sprintf("/proc/%d/cmdline", child.Process.Pid), "/proc/version", "/proc/sys/kernel/ostype"} {
		if _, e := call(t, f, nil, protocol.MethodFsReadFile, obj("path", uri(p))); e != nil {
			t.Errorf("fs/readFile %s: %v", p, e)
		}
	}
	if _, e := call(t, f, nil, protocol.MethodFsCanonicalize, obj("path", uri(fmt.Sprintf("/proc/%d/cwd", child.Process.Pid)))); e != nil {
		t.Errorf("fs/canonicalize of a child's cwd: %v", e)
	}
	if _, e := call(t, f, nil, protocol.MethodFsReadDirectory, obj("path", uri("/proc"))); e != nil {
		t.Errorf("fs/readDirectory /proc: %v", e)
	}
}

func TestServerSecretsRefused(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir+"/token", []byte("the-token"))
	writeTestFile(t, dir+"/other", []byte("fine"))
	if err := os.Link(dir+"/token", dir+"/hard"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("token", dir+"/AGENTS.md"); err != nil {
		t.Fatal(err)
	}
	policy.SetServerSecrets(dir + "/token")
	t.Cleanup(func() { policy.SetServerSecrets() })
	f := New(Options{})
	h := f.NewHandles()
	defer h.CloseAll()
	for _, p := range []string{dir + "/token", dir + "/hard", dir + "/AGENTS.md"} {
		_, e := call(t, f, nil, protocol.MethodFsReadFile, obj("path", uri(p)))
		wantRefusal(t, "fs/readFile "+p, e, p, "secret of the exec-server")
		_, e = call(t, f, h, protocol.MethodFsOpen, obj("handleId", "h", "path", uri(p)))
		wantRefusal(t, "fs/open "+p, e, p, "secret of the exec-server")
		_, e = call(t, f, nil, protocol.MethodFsWriteFile, obj("path", uri(p), "dataBase64", b64([]byte("attacker"))))
		wantRefusal(t, "fs/writeFile "+p, e, p, "secret of the exec-server")
		if isSymlink(p) {
			continue
		}
		_, e = call(t, f, nil, protocol.MethodFsCopy, obj("sourcePath", uri(p), "destinationPath", uri(dir+"/copy"), "recursive", false))
		wantRefusal(t, "fs/copy "+p, e, p, "secret of the exec-server")
	}
	_, e := call(t, f, nil, protocol.MethodFsCopy, obj("sourcePath", uri(dir+"/other"), "destinationPath", uri(dir+"/token"), "recursive", false))
	wantRefusal(t, "fs/copy onto the token", e, dir+"/token", "secret of the exec-server")
	if data, _ := os.ReadFile(dir + "/token"); string(data) != "the-token" {
		t.Fatalf("token changed: %q", data)
	}
	mustCall(t, f, nil, protocol.MethodFsReadFile, obj("path", uri(dir+"/other")))
}

func wantOwnRefusal(t *testing.T, what string, e *protocol.Error, path string) {
	t.Helper()
	wantRefusal(t, what, e, path, "own /proc directory")
}

func wantRefusal(t *testing.T, what string, e *protocol.Error, path, why string) {
	t.Helper()
	if e == nil {
		t.Errorf("%s: served, want a refusal", what)
		return
	}
	if e.Code != protocol.CodeInvalidRequest || e.Kind() != protocol.KindPermissionDenied || !strings.Contains(e.Message, why) || !strings.Contains(e.Message, "`"+path+"`") {
		t.Errorf("%s: got %d %q (kind %q), want -32600 Permission denied naming `%s` (%s)", what, e.Code, e.Message, e.Kind(), path, why)
	}
}

func isSymlink(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode()&os.ModeSymlink != 0
}

// The check's cost per open: a regular file (the hot case) and a procfs
// file that is not the server's.
func BenchmarkCheckServable(b *testing.B) {
	dir := b.TempDir()
	writeTestFile(b, dir+"/f", []byte("x"))
	for _, p := range []string{dir + "/f", "/proc/version"} {
		file, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		st, err := file.Stat()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p[strings.LastIndexByte(p, '/')+1:], func(b *testing.B) {
			for b.Loop() {
				if err := checkServable(file, st, p); err != nil {
					b.Fatal(err)
				}
			}
		})
		file.Close()
	}
}

// The same as uid 65534: a server that is not root refuses its own /proc
// entries and secrets just as well.
func TestServerOwnRefusedAsNobody(t *testing.T) {
	asnobody.Run(t, "", "^TestServer(OwnProc|Secrets)Refused$", nil)
}

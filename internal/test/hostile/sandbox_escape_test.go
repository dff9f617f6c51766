package hostile

// The sandbox escape suite: the 29 escape cases of the sandbox threat model (docs/sandbox.md), run
// black box against the built server (process/start and fs/* with the
// policies codex sends, over the wire), once with the server as root and
// once dropped to an unprivileged uid. Every case works in a fresh fixture
// (sandbox_helpers_test.go: P/WORK writable, P/OUT outside) and, after it,
// the host outside the writable roots must be exactly as before: names,
// sizes, modes, owners, mtimes, ctimes, contents, inodes, link counts.
//
// Failure messages start with HOLE (the sandbox let something through),
// LEFTOVER (mount points of missing protected paths stayed on the host),
// FAIL (something that must work did not, e.g. the sandbox is missing) or
// mismatch (refused, but not with the spec's code or text).
//
// SANDBOX_ESCAPE_REFERENCE=<codex binary> runs the root row against the
// reference (codex exec-server) instead, to calibrate the cases.

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/procmark"
	"golang.org/x/sys/unix"
)

// escapeCase is one numbered escape case. setup, when set, adds fixtures (they are
// given to the mode's user afterwards) and may replace the policies.
type escapeCase struct {
	name  string
	setup func(t *testing.T, fx *fixture)
	run   func(t *testing.T, c *sbxClient)
}

var escapeCases = []escapeCase{
	{"01_outside", nil, case01Outside},
	{"02_lexical", nil, case02Lexical},
	{"03_symlink_dir", nil, case03SymlinkDir},
	{"04_symlink_file", nil, case04SymlinkFile},
	{"05_relative_chained", nil, case05RelativeChained},
	{"06_remove_symlink", nil, case06RemoveSymlink},
	{"07_copy_symlink", nil, case07CopySymlink},
	{"08_restricted_read", nil, case08RestrictedRead},
	{"09_link_dotdot", nil, case09LinkDotDot},
	{"10_hardlink_existing", nil, case10Hardlink},
	{"11_hardlink_create", nil, case11HardlinkCreate},
	{"12_rename", nil, case12Rename},
	{"13_proc_magic", nil, case13Proc},
	{"14_protected_existing", setup14Existing, case14Existing},
	{"14_protected_missing", nil, case14Missing},
	{"14_protected_missing_concurrent", nil, case14Concurrent},
	{"14_protected_gitdir", setup14Gitdir, case14Gitdir},
	{"14_protected_symlink", setup14Symlink, case14Symlink},
	{"15_remove_root", setup14Existing, case15RemoveRoot},
	{"16_deny", setup16Deny, case16Deny},
	{"17_special_files", nil, case17Special},
	{"18_mknod", nil, case18Mknod},
	{"19_metadata_outside", nil, case19Metadata},
	{"20_no_inherited_fds", nil, case20Fds},
	{"21_toctou_race", setup21Race, case21Race},
	{"22_alias_missing_nested_root", setup22Alias, case22Roots},
	{"23_long_names", nil, case23Long},
	{"24_bad_uris", nil, case24URIs},
	{"25_network", nil, case25Network},
	{"26_signals_ptrace", nil, case26Signals},
	{"27_bounded", setup27Tree, case27Bounded},
	{"27_two_servers", nil, case27TwoServers},
	{"28_legacy_windows_levels", nil, case28Levels},
	{"30_move_mount_parent", setup30MoveParent, case30MoveParent},
	{"31_setuid_artifact", nil, case31SetUID},
	{"32_host_unix_sockets", nil, case32UnixSockets},
	{"33_capabilities_every_thread", nil, case33Caps},
	{"34_leases_cores", nil, case34LeasesCores},
	{"35_deny_glob_race", setup35Race, case35Race},
}

// TestSandboxEscape runs every case under both rows of the privilege
// matrix. SANDBOX_ESCAPE_ONLY=root|nonroot runs one row.
func TestSandboxEscape(t *testing.T) {
	sbxSetup(t)
	for _, m := range sbxModes {
		t.Run(m.name, func(t *testing.T) {
			if only := os.Getenv("SANDBOX_ESCAPE_ONLY"); only != "" && only != m.name {
				t.Skipf("SANDBOX_ESCAPE_ONLY=%s", only)
			}
			enterMode(t, m)
			s := startSandboxServer(t, m)
			for _, ec := range escapeCases {
				t.Run(ec.name, func(t *testing.T) {
					t.Parallel()
					fx := newFixture(t, m)
					if ec.setup != nil {
						ec.setup(t, fx)
						fx.own(t)
					}
					c := connect(t, s, fx)
					if fx.fsEntries != nil {
						c.fsSbx = fsContext(fx.WORK, fx.fsEntries)
						c.procSbx = procContext(fx.WORK, fx.fsEntries)
					}
					before := fx.snapshot(t)
					ec.run(t, c)
					fx.checkHost(t, before)
					s.alive(t)
				})
			}
		})
	}
}

// 1: write, mkdir, copy destination, remove, open-for-replace outside every
// root: EROFS (-32603); a command's `touch ../OUT/x` fails with
// sandboxDenied. Controls: the same operations inside WORK succeed.
func case01Outside(t *testing.T, c *sbxClient) {
	fx := c.fx
	if err := c.writeFile(fx.w("ok.txt"), "ok"); err != nil {
		t.Errorf("FAIL: control: fs/writeFile WORK/ok.txt: %v", err)
	} else if data, _ := os.ReadFile(fx.w("ok.txt")); string(data) != "ok" {
		t.Errorf("FAIL: WORK/ok.txt holds %q after a successful write", data)
	}
	wantOK(t, "control: fs/createDirectory WORK/newdir", c.mkdir(fx.w("newdir"), false))
	wantOK(t, "control: fs/copy WORK/in.txt -> WORK/in2.txt", c.copy(fx.w("in.txt"), fx.w("in2.txt"), false))
	wantOK(t, "control: fs/remove WORK/in2.txt", c.remove(fx.w("in2.txt"), false, false))

	wantDenied(t, "fs/writeFile OUT/new.txt", c.writeFile(fx.o("new.txt"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile OUT/secret.txt (overwrite)", c.writeFile(fx.o("secret.txt"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile P/new.txt (the parent)", c.writeFile(filepath.Join(fx.P, "new.txt"), "x"), -32603, erofs)
	wantDenied(t, "fs/createDirectory OUT/newdir", c.mkdir(fx.o("newdir"), false), -32603, erofs)
	wantDenied(t, "fs/createDirectory -p OUT/a/b", c.mkdir(fx.o("a", "b"), true), -32603, erofs)
	wantDenied(t, "fs/copy WORK/in.txt -> OUT/copied.txt", c.copy(fx.w("in.txt"), fx.o("copied.txt"), false), -32603, erofs)
	wantDenied(t, "fs/copy -r WORK/sub -> OUT/subcopy", c.copy(fx.w("sub"), fx.o("subcopy"), true), -32603, erofs)
	wantDenied(t, "fs/remove OUT/secret.txt", c.remove(fx.o("secret.txt"), false, false), -32603, erofs)
	wantDenied(t, "fs/remove -r OUT/victim", c.remove(fx.o("victim"), true, false), -32603, erofs)
	wantDenied(t, "fs/remove -rf OUT/victim", c.remove(fx.o("victim"), true, true), -32603, erofs)

	// fs/open mode replace writes on the handle; it must not create or
	// change anything outside, whichever step refuses.
	h := "h-escape"
	if err := c.fs("fs/open", map[string]any{"handleId": h, "path": fileURI(fx.o("opened.txt")), "mode": "replace"}, nil); err == nil {
		werr := c.fs("fs/writeBlock", map[string]any{"handleId": h, "offset": 0, "chunk": base64.StdEncoding.EncodeToString([]byte("x"))}, nil)
		cerr := c.fs("fs/close", map[string]any{"handleId": h}, nil)
		t.Logf("fs/open replace OUT/opened.txt was accepted (writeBlock: %v, close: %v); the host check decides", werr, cerr)
	}

	r := c.run([]string{"touch", "../OUT/x"}, nil)
	wantProcDenied(t, "touch ../OUT/x", r, true)
	if r.StartErr == nil && !strings.Contains(r.Output, erofs) {
		t.Errorf("mismatch: touch ../OUT/x: output %q, want %q", r.Output, erofs)
	}
	wantProcDenied(t, "touch ../OUT/x on a PTY", c.runIn(fx.WORK, []string{"touch", "../OUT/x_tty"}, nil, true), true)
	wantProcDenied(t, "rm -rf ../OUT/victim", c.run([]string{"rm", "-rf", "../OUT/victim"}, nil), true)
	wantProcDenied(t, "mkdir ../OUT/d", c.run([]string{"mkdir", "../OUT/d"}, nil), true)
	wantProcDenied(t, "cp in.txt ../OUT/", c.run([]string{"cp", "in.txt", "../OUT/"}, nil), true)
	if r := c.run([]string{"sh", "-c", "echo ok > ok2.txt"}, nil); r.StartErr != nil || r.ExitCode != 0 {
		wantProcOK(t, "control: echo ok > ok2.txt", r)
	} else if data, _ := os.ReadFile(fx.w("ok2.txt")); string(data) != "ok\n" {
		t.Errorf("FAIL: WORK/ok2.txt holds %q after the command", data)
	}
	// The false positive check of sandboxDenied: an ordinary failure.
	if r := c.run([]string{"sh", "-c", "exit 3"}, nil); r.StartErr == nil && (r.ExitCode != 3 || r.SandboxDenied) {
		t.Errorf("mismatch: exit 3 under the sandbox: %v, want exit 3 and sandboxDenied false", r)
	}
}

// 2: lexical escapes are normalized first, then denied by the kernel.
func case02Lexical(t *testing.T, c *sbxClient) {
	fx := c.fx
	W := "file://" + fx.WORK
	for _, u := range []string{
		W + "/../OUT/a.txt",
		W + "/%2e%2e/OUT/b.txt",
		W + "/%2E%2e/OUT/c.txt",
		W + "/./../OUT/d.txt",
		W + "/sub/../../OUT/f.txt",
		W + "/sub/%2e%2e/%2E%2E/OUT/g.txt",
		W + "/../../" + filepath.Base(fx.P) + "/OUT/h.txt",
	} {
		wantDenied(t, "fs/writeFile "+u, c.writeURI(u, "x"), -32603, erofs)
	}
	// URL semantics: ".." after "//" pops the empty segment (the reference
	// then answers -32004 for the missing WORK/OUT); path semantics deny it.
	wantRefused(t, "fs/writeFile WORK//..//OUT//e.txt", c.writeURI(W+"//..//OUT//e.txt", "x"), -32603, -32004)
	// A %2f decodes to a separator before the lexical clean, as on the
	// reference (a decision: fileuri keeps parity rather than refusing
	// it): "..%2fOUT" is "../OUT", which the kernel then refuses.
	u := W + "/..%2fOUT%2fslash.txt"
	wantRefused(t, "fs/writeFile "+u, c.writeURI(u, "x"), -32603, -32602, -32600)
	if _, serr := os.Lstat(fx.w("..", "OUT", "slash.txt")); serr == nil {
		t.Errorf("HOLE: fs/writeFile %s created OUT/slash.txt", u)
	}
	wantOK(t, "control: fs/writeFile WORK/sub/../lex_ok.txt", c.writeURI(W+"/sub/../lex_ok.txt", "ok"))
	if _, err := os.Stat(fx.w("lex_ok.txt")); err != nil {
		t.Errorf("FAIL: WORK/sub/../lex_ok.txt did not land at WORK/lex_ok.txt: %v", err)
	}
	wantProcDenied(t, "echo > ./../OUT/x", c.run([]string{"sh", "-c", "echo x > ./../OUT/x"}, nil), true)
}

// 3: a symlink in WORK to a directory outside.
func case03SymlinkDir(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantDenied(t, "fs/writeFile linkdir/new.txt", c.writeFile(fx.w("linkdir", "new.txt"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile linkdir/dir/f.txt (overwrite)", c.writeFile(fx.w("linkdir", "dir", "f.txt"), "x"), -32603, erofs)
	wantDenied(t, "fs/createDirectory linkdir/newdir", c.mkdir(fx.w("linkdir", "newdir"), false), -32603, erofs)
	wantDenied(t, "fs/createDirectory -p linkdir/a/b", c.mkdir(fx.w("linkdir", "a", "b"), true), -32603, erofs)
	wantDenied(t, "fs/copy in.txt -> linkdir/copied.txt", c.copy(fx.w("in.txt"), fx.w("linkdir", "copied.txt"), false), -32603, erofs)
	wantDenied(t, "fs/remove linkdir/secret.txt", c.remove(fx.w("linkdir", "secret.txt"), false, false), -32603, erofs)
	wantDenied(t, "fs/remove -r linkdir/victim", c.remove(fx.w("linkdir", "victim"), true, false), -32603, erofs)
	wantProcDenied(t, "echo > linkdir/p.txt", c.run([]string{"sh", "-c", "echo x > linkdir/p.txt"}, nil), true)
	wantProcDenied(t, "rm -rf linkdir/victim", c.run([]string{"rm", "-rf", "linkdir/victim"}, nil), true)
	wantProcDenied(t, "cp in.txt linkdir/", c.run([]string{"cp", "in.txt", "linkdir/"}, nil), true)
	wantProcDenied(t, "mkdir linkdir/m", c.run([]string{"mkdir", "linkdir/m"}, nil), true)
}

// 4: a symlink in WORK to a file outside: write on it, copy onto it.
func case04SymlinkFile(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantDenied(t, "fs/writeFile linkfile", c.writeFile(fx.w("linkfile"), "x"), -32603, erofs)
	wantDenied(t, "fs/copy in.txt -> linkfile", c.copy(fx.w("in.txt"), fx.w("linkfile"), false), -32603, erofs)
	wantProcDenied(t, "echo > linkfile", c.run([]string{"sh", "-c", "echo x > linkfile"}, nil), true)
	wantProcDenied(t, "echo >> linkfile", c.run([]string{"sh", "-c", "echo x >> linkfile"}, nil), true)
	wantProcDenied(t, "probe truncate linkfile", c.run(probeCmd("truncate", fx.w("linkfile")), nil), true)
	wantProcDenied(t, "cp in.txt linkfile", c.run([]string{"cp", "in.txt", "linkfile"}, nil), true)
}

// 5: a relative symlink (../OUT) and chains (a -> b -> outside).
func case05RelativeChained(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantDenied(t, "fs/writeFile rellink/rel.txt", c.writeFile(fx.w("rellink", "rel.txt"), "x"), -32603, erofs)
	wantDenied(t, "fs/createDirectory rellink/d", c.mkdir(fx.w("rellink", "d"), false), -32603, erofs)
	wantDenied(t, "fs/writeFile chain1/ch.txt", c.writeFile(fx.w("chain1", "ch.txt"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile chainf1", c.writeFile(fx.w("chainf1"), "x"), -32603, erofs)
	wantDenied(t, "fs/copy in.txt -> chainf1", c.copy(fx.w("in.txt"), fx.w("chainf1"), false), -32603, erofs)
	wantDenied(t, "fs/remove -r chain1/victim", c.remove(fx.w("chain1", "victim"), true, false), -32603, erofs)
	wantProcDenied(t, "echo > rellink/x", c.run([]string{"sh", "-c", "echo x > rellink/x"}, nil), true)
	wantProcDenied(t, "echo > chain1/x", c.run([]string{"sh", "-c", "echo x > chain1/x"}, nil), true)
	wantProcDenied(t, "echo > chainf1", c.run([]string{"sh", "-c", "echo x > chainf1"}, nil), true)
}

// 6: fs/remove of an outside-pointing symlink removes the link only.
func case06RemoveSymlink(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantOK(t, "fs/remove linkfile", c.remove(fx.w("linkfile"), false, false))
	wantOK(t, "fs/remove -r linkdir", c.remove(fx.w("linkdir"), true, false))
	wantOK(t, "fs/remove -r chain1", c.remove(fx.w("chain1"), true, false))
	for _, name := range []string{"linkfile", "linkdir", "chain1"} {
		if _, err := os.Lstat(fx.w(name)); err == nil {
			t.Errorf("FAIL: WORK/%s still exists after fs/remove", name)
		}
	}
	if fi, err := os.Lstat(fx.w("chain2")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("FAIL: removing chain1 touched chain2: %v", err)
	}
}

// 7: fs/copy of a symlink copies the link, never the outside content.
func case07CopySymlink(t *testing.T, c *sbxClient) {
	fx := c.fx
	for _, k := range []struct{ src, dst, target string }{
		{"linkfile", "copied_link", fx.o("secret.txt")},
		{"linkdir", "copied_dirlink", fx.OUT},
		{"rellink", "sub/rellink_copy", "../OUT"},
	} {
		wantOK(t, "fs/copy -r "+k.src+" -> "+k.dst, c.copy(fx.w(k.src), fx.w(k.dst), true))
		fi, err := os.Lstat(fx.w(k.dst))
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("HOLE: fs/copy of symlink %s dereferenced it: WORK/%s is %v (outside content copied in)", k.src, k.dst, fi.Mode())
			continue
		}
		if got, _ := os.Readlink(fx.w(k.dst)); got != k.target {
			t.Errorf("FAIL: WORK/%s -> %q, want the same target %q", k.dst, got, k.target)
		}
	}
}

// 8: under restricted read (only WORK readable), nothing outside is
// visible, through a symlink or not: -32004.
func case08RestrictedRead(t *testing.T, c *sbxClient) {
	fx := c.fx
	// "minimal" makes the platform's binaries and libraries readable, so
	// that a command can run at all (the reference adds it only to its fs
	// helper's policy).
	ro := []any{pathEntry(fx.WORK, "read"), entry(special("minimal"), "read")}
	c.fsSbx, c.procSbx = fsContext(fx.WORK, ro), procContext(fx.WORK, ro)
	got, err := c.readFile(fx.w("in.txt"))
	wantOK(t, "control: fs/readFile WORK/in.txt", err)
	if err == nil && got != "inside" {
		t.Errorf("FAIL: fs/readFile WORK/in.txt = %q", got)
	}
	for _, p := range []string{fx.w("linkfile"), fx.o("secret.txt"), fx.w("linkdir", "secret.txt"), fx.w("chainf1"), fx.w("rellink", "secret.txt"), filepath.Join(fx.P, "in.txt")} {
		data, err := c.readFile(p)
		if err == nil {
			t.Errorf("HOLE: fs/readFile %s under restricted read returned %q", p, data)
			continue
		}
		wantDenied(t, "fs/readFile "+p, err, -32004, "No such file or directory")
	}
	wantDenied(t, "fs/getMetadata OUT/secret.txt", c.fs("fs/getMetadata", map[string]any{"path": fileURI(fx.o("secret.txt"))}, nil), -32004, "")
	wantDenied(t, "fs/readDirectory linkdir", c.fs("fs/readDirectory", map[string]any{"path": fileURI(fx.w("linkdir"))}, nil), -32004, "")
	wantDenied(t, "fs/readDirectory OUT", c.fs("fs/readDirectory", map[string]any{"path": fileURI(fx.OUT)}, nil), -32004, "")
	wantDenied(t, "fs/canonicalize linkdir/secret.txt", c.fs("fs/canonicalize", map[string]any{"path": fileURI(fx.w("linkdir", "secret.txt"))}, nil), -32004, "")
	wantDenied(t, "fs/writeFile WORK/x.txt (read-only policy)", c.writeFile(fx.w("x.txt"), "x"), -32603, erofs)
	if data, err := c.readFile(fx.w("hardlink.txt")); err == nil {
		t.Logf("documented (docs/sandbox.md, as the reference): an existing hard link exposes the outside content under restricted read: %q", data)
	} else {
		t.Logf("hard link under restricted read: %v", err)
	}
	r := c.run([]string{"cat", "linkfile", "../OUT/secret.txt"}, nil)
	wantProcDenied(t, "cat linkfile ../OUT/secret.txt", r, false)
	if strings.Contains(r.Output, "outside secret") {
		t.Errorf("HOLE: a command under restricted read printed the outside secret: %v", r)
	}
	r = c.run([]string{"cat", "in.txt"}, nil)
	wantProcOK(t, "control: cat in.txt under restricted read", r)
	if r.StartErr == nil && r.Output != "inside" {
		t.Errorf("FAIL: cat in.txt printed %q", r.Output)
	}
	wantProcDenied(t, "ls ../OUT", c.run([]string{"ls", "../OUT"}, nil), false)
}

// 9: W/link/../x collapses lexically to W/x, never resolves through the
// link (which would be P/x).
func case09LinkDotDot(t *testing.T, c *sbxClient) {
	fx := c.fx
	u := "file://" + fx.WORK + "/linkdir/../via.txt"
	wantOK(t, "fs/writeFile "+u, c.writeURI(u, "via"))
	if data, err := os.ReadFile(fx.w("via.txt")); err != nil || string(data) != "via" {
		t.Errorf("FAIL: %s did not land at WORK/via.txt: %q %v", u, data, err)
	}
	var res struct {
		DataBase64 string `json:"dataBase64"`
	}
	err := c.fs("fs/readFile", map[string]any{"path": "file://" + fx.WORK + "/linkdir/../in.txt"}, &res)
	data, _ := base64.StdEncoding.DecodeString(res.DataBase64)
	switch {
	case err != nil:
		t.Errorf("FAIL: fs/readFile WORK/linkdir/../in.txt: %v", err)
	case string(data) == "parent decoy":
		t.Errorf("HOLE: WORK/linkdir/../in.txt resolved through the link to P/in.txt")
	case string(data) != "inside":
		t.Errorf("FAIL: WORK/linkdir/../in.txt read %q", data)
	}
}

// 10: an existing hard link to an outside file is written in place, by
// design (docs/sandbox.md, "Threat model"): the shared inode changes, it is never replaced.
func case10Hardlink(t *testing.T, c *sbxClient) {
	fx := c.fx
	fx.mayChange[fx.o("hl.txt")] = true
	wantOK(t, "fs/writeFile WORK/hardlink.txt (allowed by design)", c.writeFile(fx.w("hardlink.txt"), "rewritten"))
	var in, out syscall.Stat_t
	if err := syscall.Stat(fx.w("hardlink.txt"), &in); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(fx.o("hl.txt"), &out); err != nil {
		t.Fatal(err)
	}
	if in.Ino != out.Ino || in.Nlink != 2 {
		t.Errorf("FAIL: the hard link was replaced (inodes %d / %d, nlink %d): writes must keep it", in.Ino, out.Ino, in.Nlink)
	}
	data, _ := os.ReadFile(fx.o("hl.txt"))
	t.Logf("documented (docs/sandbox.md, as the reference): writing WORK/hardlink.txt changed OUT/hl.txt to %q (same inode %d)", data, out.Ino)
}

// 11: creating a hard link across the writable root's mount: EXDEV.
func case11HardlinkCreate(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantProcDenied(t, "ln ../OUT/secret.txt hl2", c.run([]string{"ln", "../OUT/secret.txt", "hl2"}, nil), false)
	mustNotExist(t, fx.w("hl2"))
	wantProcDenied(t, "ln in.txt ../OUT/in_link", c.run([]string{"ln", "in.txt", "../OUT/in_link"}, nil), false)
	wantProcDenied(t, "probe link OUT/secret.txt WORK/hl3", c.run(probeCmd("link", fx.o("secret.txt"), fx.w("hl3")), nil), false)
	mustNotExist(t, fx.w("hl3"))
	wantProcDenied(t, "probe link linkfile WORK/hl4", c.run(probeCmd("link", fx.w("linkdir", "secret.txt"), fx.w("hl4")), nil), false)
	mustNotExist(t, fx.w("hl4"))
}

// 12: rename or move into or out of WORK, and RENAME_EXCHANGE.
func case12Rename(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantProcDenied(t, "mv in.txt ../OUT/", c.run([]string{"mv", "in.txt", "../OUT/"}, nil), true)
	if _, err := os.Stat(fx.w("in.txt")); err != nil {
		t.Errorf("FAIL: mv in.txt ../OUT/ lost WORK/in.txt: %v", err)
	}
	wantProcDenied(t, "mv ../OUT/secret.txt stolen.txt", c.run([]string{"mv", "../OUT/secret.txt", "stolen.txt"}, nil), true)
	wantProcDenied(t, "mv ../OUT/victim .", c.run([]string{"mv", "../OUT/victim", "."}, nil), true)
	for _, k := range [][3]string{
		{"rename", fx.w("in.txt"), fx.o("r.txt")},
		{"rename", fx.o("secret.txt"), fx.w("r2.txt")},
		{"rename", fx.o("secret.txt"), fx.o("renamed.txt")},
		{"rename", fx.w("sub"), fx.o("subdir")},
		{"exchange", fx.w("in.txt"), fx.o("secret.txt")},
		{"exchange", fx.w("sub"), fx.o("dir")},
		{"exchange", fx.w("linkfile"), fx.o("secret.txt")},
	} {
		wantProcDenied(t, "probe "+strings.Join(k[:], " "), c.run(probeCmd(k[0], k[1], k[2]), nil), false)
	}
}

// 13: /proc magic links lead nowhere writable.
func case13Proc(t *testing.T, c *sbxClient) {
	fx := c.fx
	srv := strconv.Itoa(c.srv.pid())
	me := strconv.Itoa(os.Getpid())
	for _, base := range []string{"/proc/self/root", "/proc/1/root", "/proc/" + srv + "/root", "/proc/" + me + "/root"} {
		p := base + fx.o("x_fs.txt")
		err := c.writeURI("file://"+p, "x")
		if err == nil {
			t.Errorf("HOLE: fs/writeFile %s succeeded", p)
		} else if code := rpcCode(err); code != -32603 && code != -32004 && code != -32600 {
			t.Errorf("mismatch: fs/writeFile %s: %v", p, err)
		}
		wantProcDenied(t, "probe write "+base+"/OUT/x", c.run(probeCmd("write", base+fx.o("x_proc.txt")), nil), false)
	}
	wantProcDenied(t, "echo > /proc/self/cwd/../OUT/x", c.run([]string{"sh", "-c", "echo x > /proc/self/cwd/../OUT/x"}, nil), false)
	wantProcDenied(t, "fd magic link: exec 3<../OUT; echo > /proc/self/fd/3/x", c.run([]string{"sh", "-c", "exec 3<../OUT && echo x > /proc/self/fd/3/x"}, nil), false)
	wantProcDenied(t, "chmod via /proc/self/root", c.run(probeCmd("chmod", "/proc/self/root"+fx.o("secret.txt")), nil), false)
	// Informational (as the reference): a full-read policy reads in the server's
	// own process, where /proc/self is the server.
	if data, err := c.readFile("/proc/self/environ"); err == nil && strings.Contains(data, "TMPDIR=") {
		t.Logf("informational: fs/readFile /proc/self/environ under a full-read sandbox returns the server's environment (%d bytes), as the reference", len(data))
	} else {
		t.Logf("informational: fs/readFile /proc/self/environ under a full-read sandbox: %d bytes, no TMPDIR (not the server's), %v", len(data), err)
	}
}

// setup14Existing creates every protected subpath with content.
func setup14Existing(t *testing.T, fx *fixture) {
	for p, data := range map[string]string{
		".git/config": "[core]\n", ".git/HEAD": "ref: refs/heads/main\n", ".git/hooks/README": "hooks\n",
		".codex/config.toml": "model = \"x\"\n", ".agents/a.md": "agent\n", ".aws/credentials": "[default]\n",
	} {
		if err := os.MkdirAll(filepath.Dir(fx.w(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fx.w(p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// 14: existing protected subpaths stay read-only, for fs/* and commands.
func case14Existing(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantOK(t, "control: fs/writeFile WORK/ok.txt", c.writeFile(fx.w("ok.txt"), "ok"))
	wantDenied(t, "fs/writeFile .git/config", c.writeFile(fx.w(".git", "config"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile .git/new", c.writeFile(fx.w(".git", "new"), "x"), -32603, erofs)
	wantDenied(t, "fs/createDirectory .git/hooks/x", c.mkdir(fx.w(".git", "hooks", "x"), false), -32603, erofs)
	wantDenied(t, "fs/remove .git/config", c.remove(fx.w(".git", "config"), false, false), -32603, erofs)
	wantRefused(t, "fs/remove -r .git", c.remove(fx.w(".git"), true, false), -32603, -32600)
	wantDenied(t, "fs/writeFile .codex/config.toml", c.writeFile(fx.w(".codex", "config.toml"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile .agents/new.md", c.writeFile(fx.w(".agents", "new.md"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile .aws/credentials", c.writeFile(fx.w(".aws", "credentials"), "x"), -32603, erofs)
	wantDenied(t, "fs/copy in.txt -> .git/copied", c.copy(fx.w("in.txt"), fx.w(".git", "copied"), false), -32603, erofs)
	for _, cmd := range []string{
		"echo x >> .git/config", "mv .git git2", "rm -rf .git", "mkdir .git/hooks/pre",
		"rmdir .aws", "mv .codex codex2", "echo x > .agents/a.md", "rm .aws/credentials",
		"mv sub .git/sub",
	} {
		wantProcDenied(t, cmd, c.run([]string{"sh", "-c", cmd}, nil), false)
	}
	wantProcDenied(t, "probe exchange .git sub", c.run(probeCmd("exchange", fx.w(".git"), fx.w("sub")), nil), false)
	wantProcDenied(t, "probe rename sub -> .codex (replace)", c.run(probeCmd("rename", fx.w("sub"), fx.w(".codex")), nil), false)
}

// 14: missing protected subpaths cannot be created, and nothing (mount
// points) is left on the host afterwards (the host check covers it: the
// four names are recorded missing).
func case14Missing(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantDenied(t, "fs/writeFile .git/config (.git missing)", c.writeFile(fx.w(".git", "config"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile .codex/config.toml (missing)", c.writeFile(fx.w(".codex", "config.toml"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile .aws (as a file, missing)", c.writeFile(fx.w(".aws"), "x"), -32603, "")
	wantRefused(t, "fs/createDirectory -p .agents/skills", c.mkdir(fx.w(".agents", "skills"), true), -32603, -32600)
	// mkdir of the protected name itself may "succeed" (the mask exists
	// inside); the host must still not have it afterwards.
	t.Logf("fs/createDirectory .codex (missing): %v", c.mkdir(fx.w(".codex"), false))
	for _, cmd := range []string{
		"mkdir -p .git/hooks", "echo x > .aws/credentials", "git init -q . 2>&1 || mkdir .git/objects",
		"mkdir .agents/x", "echo x > .codex/config.toml",
	} {
		wantProcDenied(t, cmd, c.run([]string{"sh", "-c", cmd}, nil), false)
	}
	// While a command runs, mount points may exist on the host; after it,
	// they must be gone (checked by the host check, which polls briefly).
	wantProcOK(t, "control: ls -a", c.run([]string{"ls", "-a"}, nil))
}

// 14: a command started while a warm fs helper holds the mount point of
// the missing .git sees .git exist (codex's own read entry names it); the
// helper goes after its idle time (500 ms) while the command still runs:
// .git must stay masked for the command (it holds the mount point too).
// Before the fix its read-only bind went with the helper's removal of the
// directory and mkdir reached the host.
func case14Concurrent(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantDenied(t, "fs/writeFile .git/config (.git missing)", c.writeFile(fx.w(".git", "config"), "x"), -32603, erofs)
	cmd := "sleep 1.5; mkdir -p .git/hooks"
	wantProcDenied(t, cmd+" (after the fs helper went)", c.run([]string{"sh", "-c", cmd}, nil), false)
}

// setup14Gitdir makes .git a gitdir pointer file to WORK/gitstore.
func setup14Gitdir(t *testing.T, fx *fixture) {
	if err := os.MkdirAll(fx.w("gitstore", "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fx.w("gitstore", "config"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fx.w(".git"), []byte("gitdir: "+fx.w("gitstore")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fx.protected = append(fx.protected, fx.w("gitstore"))
}

// 14: the target of a gitdir pointer is protected too.
func case14Gitdir(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantDenied(t, "fs/writeFile gitstore/config (gitdir target)", c.writeFile(fx.w("gitstore", "config"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile gitstore/new", c.writeFile(fx.w("gitstore", "new"), "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile .git (the pointer file)", c.writeFile(fx.w(".git"), "gitdir: /elsewhere\n"), -32603, erofs)
	wantRefused(t, "fs/remove -r gitstore", c.remove(fx.w("gitstore"), true, false), -32603, -32600)
	for _, cmd := range []string{"echo x >> gitstore/config", "rm -rf gitstore", "mv gitstore g2", "echo 'gitdir: /x' > .git", "rm .git"} {
		wantProcDenied(t, cmd, c.run([]string{"sh", "-c", cmd}, nil), false)
	}
}

// setup14Symlink makes .codex a symlink to WORK/decoy and .agents a
// relative symlink to WORK/decoy2.
func setup14Symlink(t *testing.T, fx *fixture) {
	for _, d := range []string{"decoy", "decoy2"} {
		if err := os.Mkdir(fx.w(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(fx.w("decoy"), fx.w(".codex")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("decoy2", fx.w(".agents")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fx.w("decoy", "config.toml"), []byte("model = \"x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fx.protected = append(fx.protected, fx.w("decoy", "config.toml"), fx.w("decoy", "x"), fx.w("decoy", "p"), fx.w("decoy", "d"), fx.w("decoy2", "x"), fx.w("decoy2", "d"))
}

// 14: a protected path that is a symlink is masked itself, not followed:
// nothing written through it lands in the decoy, and the link stays. The
// decoy itself may be protected too (codex reads .codex through the link,
// so a writable target would be a way around the protection): the case
// does not write it, and the host check holds it unchanged.
func case14Symlink(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantOK(t, "control: fs/writeFile WORK/ok.txt", c.writeFile(fx.w("ok.txt"), "ok"))
	wantRefused(t, "fs/writeFile .codex/x (symlink to decoy)", c.writeFile(fx.w(".codex", "x"), "x"), -32603, -32600)
	wantRefused(t, "fs/writeFile .agents/x (relative symlink to decoy2)", c.writeFile(fx.w(".agents", "x"), "x"), -32603, -32600)
	wantRefused(t, "fs/createDirectory .codex/d", c.mkdir(fx.w(".codex", "d"), false), -32603, -32600)
	wantRefused(t, "fs/remove .codex", c.remove(fx.w(".codex"), false, false), -32603, -32600)
	for _, cmd := range []string{"echo x > .codex/p", "rm .codex", "ln -sfn /tmp .agents", "mv .codex c2", "mkdir .agents/d"} {
		wantProcDenied(t, cmd, c.run([]string{"sh", "-c", cmd}, nil), false)
	}
	for _, p := range []string{fx.w("decoy", "x"), fx.w("decoy", "p"), fx.w("decoy", "d"), fx.w("decoy2", "x"), fx.w("decoy2", "d")} {
		mustNotExist(t, p)
	}
	r := c.run([]string{"sh", "-c", "echo x > decoy/direct; echo $?"}, nil)
	t.Logf("informational: writing the decoy directly (the protected symlink's target): %v", r)
}

// 15: fs/remove of the writable root itself, or of a protected directory,
// is refused and deletes nothing (the reference half-fails with EBUSY).
func case15RemoveRoot(t *testing.T, c *sbxClient) {
	fx := c.fx
	if err := os.Mkdir(fx.w("gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	if fx.mode.uid >= 0 {
		_ = os.Lchown(fx.w("gone"), fx.mode.uid, fx.mode.uid)
	}
	wantOK(t, "control: fs/remove -r WORK/gone", c.remove(fx.w("gone"), true, false))
	before := snapshot{}
	if err := snapTree(fx.WORK, before); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "fs/remove -r WORK", c.remove(fx.WORK, true, false), -32600, -32603)
	wantRefused(t, "fs/remove -rf WORK", c.remove(fx.WORK, true, true), -32600, -32603)
	wantRefused(t, "fs/remove -r WORK/sub/..", c.fs("fs/remove", map[string]any{"path": "file://" + fx.WORK + "/sub/..", "recursive": true}, nil), -32600, -32603)
	wantRefused(t, "fs/remove -r WORK/.git", c.remove(fx.w(".git"), true, false), -32600, -32603)
	wantRefused(t, "fs/remove -rf WORK/.codex", c.remove(fx.w(".codex"), true, true), -32600, -32603)
	after := snapshot{}
	if err := snapTree(fx.WORK, after); err != nil {
		t.Fatal(err)
	}
	if d := fx.diff(before, after); len(d) > 0 {
		t.Errorf("FAIL: a refused remove of the root changed WORK (half-deleted):\n  %s", strings.Join(d, "\n  "))
	}
}

// setup16Deny adds deny entries on a file, a directory and a glob.
func setup16Deny(t *testing.T, fx *fixture) {
	for p, data := range map[string]string{
		"denied.txt": "denied content", "denydir/x.txt": "denied dir content",
		"app.env": "SECRET=1", "sub/nested.env": "NESTED=1", "mvdir/f.txt": "moved", "mv.txt": "mv",
	} {
		if err := os.MkdirAll(filepath.Dir(fx.w(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fx.w(p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fx.protected = append(fx.protected, fx.w("denied.txt"), fx.w("denydir"), fx.w("app.env"), fx.w("sub", "nested.env"),
		fx.w("new.env"), fx.w("sub", "new2.env"), fx.w("new3.env"))
	// What the commands of case 16 try to create: each must stay missing.
	for _, p := range case16CommandNew {
		fx.protected = append(fx.protected, fx.w(p))
	}
	fx.fsEntries = append(workspaceWriteEntries(),
		pathEntry(fx.w("denied.txt"), "deny"),
		pathEntry(fx.w("denydir"), "none"),
		pathEntry(fx.w("missing.key"), "deny"),
		entry(map[string]any{"type": "glob_pattern", "pattern": "**/*.env"}, "deny"),
		entry(map[string]any{"type": "glob_pattern", "pattern": "secrets/**"}, "deny"))
}

// case16CommandNew are the paths case 16's commands must not create.
var case16CommandNew = []string{"c1.env", "sub/c2.env", "c3.env", "d.env", "f.env", "l.env", "h.env", "m.env",
	"target.env", "secrets", "missing.key", "ok.txt.env"}

// case16Commands must each fail with Permission denied (sandboxDenied):
// a command cannot create a NEW path matching a deny glob, nor a missing
// deny path (the init supervises its path-creating syscalls).
var case16Commands = []string{
	"echo x > c1.env", "touch sub/c2.env", "cp in.txt c3.env", "mkdir d.env", "mkfifo f.env",
	"ln -s in.txt l.env", "ln in.txt h.env", "mv mv.txt m.env", "ln -s target.env lnk && echo x > lnk",
	"mv mvdir secrets", "echo x > missing.key", "echo x >> ok.txt.env",
}

// 16: deny entries hide content and refuse writes; a NEW file matching the
// deny glob (or a missing deny path) is refused by fs/writeFile too, and
// to commands (a fix over the reference).
func case16Deny(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantOK(t, "control: fs/writeFile WORK/ok.txt", c.writeFile(fx.w("ok.txt"), "ok"))
	got, err := c.readFile(fx.w("in.txt"))
	wantOK(t, "control: fs/readFile WORK/in.txt", err)
	if err == nil && got != "inside" {
		t.Errorf("FAIL: fs/readFile WORK/in.txt = %q", got)
	}
	for _, k := range []struct{ p, secret string }{
		{"denied.txt", "denied content"}, {"denydir/x.txt", "denied dir content"},
		{"app.env", "SECRET=1"}, {"sub/nested.env", "NESTED=1"},
	} {
		data, err := c.readFile(fx.w(k.p))
		if err == nil || strings.Contains(data, k.secret) {
			t.Errorf("HOLE: fs/readFile %s (denied) returned %q, %v", k.p, data, err)
			continue
		}
		wantDenied(t, "fs/readFile "+k.p, err, -32600, "Permission denied")
	}
	wantRefused(t, "fs/writeFile denied.txt", c.writeFile(fx.w("denied.txt"), "x"), -32603, -32600)
	wantRefused(t, "fs/writeFile denydir/new.txt", c.writeFile(fx.w("denydir", "new.txt"), "x"), -32600, -32603)
	wantRefused(t, "fs/writeFile app.env", c.writeFile(fx.w("app.env"), "x"), -32603, -32600)
	wantRefused(t, "fs/writeFile NEW new.env (matches the deny glob)", c.writeFile(fx.w("new.env"), "x"), -32600, -32603)
	wantRefused(t, "fs/writeFile NEW sub/new2.env", c.writeFile(fx.w("sub", "new2.env"), "x"), -32600, -32603)
	wantRefused(t, "fs/copy in.txt -> NEW new3.env", c.copy(fx.w("in.txt"), fx.w("new3.env"), false), -32600, -32603)
	wantRefused(t, "fs/remove denied.txt", c.remove(fx.w("denied.txt"), false, false), -32603, -32600)
	wantRefused(t, "fs/remove -r denydir", c.remove(fx.w("denydir"), true, false), -32603, -32600)
	var md struct {
		Size int64 `json:"size"`
	}
	if err := c.fs("fs/getMetadata", map[string]any{"path": fileURI(fx.w("denied.txt"))}, &md); err == nil && md.Size != 0 {
		t.Errorf("HOLE: fs/getMetadata denied.txt shows the real size %d (the mask must stand in)", md.Size)
	}
	for _, cmd := range case16Commands {
		r := c.run([]string{"sh", "-c", cmd}, nil)
		wantProcDenied(t, cmd+" (a new path the deny entries match)", r, true)
		if r.ExitCode != 0 && !strings.Contains(r.Output, "Permission denied") {
			t.Errorf("mismatch: %s: want Permission denied: %v", cmd, r)
		}
	}
	// Controls: creating, moving and linking other names still works.
	if r := c.run([]string{"sh", "-c", "echo ok > cmd-ok.txt && mkdir cmd-dir && mv cmd-ok.txt cmd-dir/ && ln -s cmd-dir cmd-link && ln in.txt cmd-hard"}, nil); r.ExitCode != 0 {
		t.Errorf("FAIL: control: creating names no deny entry matches: %v", r)
	} else if data, _ := os.ReadFile(fx.w("cmd-dir", "cmd-ok.txt")); string(data) != "ok\n" {
		t.Errorf("FAIL: control: WORK/cmd-dir/cmd-ok.txt holds %q", data)
	}
	for _, cmd := range []string{"cat denied.txt", "cat denydir/x.txt", "cat app.env", "cat sub/nested.env", "echo x > denied.txt", "rm denied.txt", "echo x > denydir/n"} {
		r := c.run([]string{"sh", "-c", cmd}, nil)
		wantProcDenied(t, cmd, r, false)
		for _, secret := range []string{"denied content", "denied dir content", "SECRET=1", "NESTED=1"} {
			if strings.Contains(r.Output, secret) {
				t.Errorf("HOLE: %s printed denied content: %v", cmd, r)
			}
		}
	}
}

// 17: special files never hang a call: each answers within 5 s.
func case17Special(t *testing.T, c *sbxClient) {
	fx := c.fx
	// A host reader on the outside FIFO: a writer that got through would
	// deliver bytes to it.
	rfd, err := syscall.Open(fx.o("fifo"), syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(rfd)
	ln, err := net.Listen("unix", fx.w("sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fx.mode.uid >= 0 {
		_ = os.Lchown(fx.w("sock"), fx.mode.uid, fx.mode.uid)
	}
	// Each call on its own connection: a call that hangs must not make
	// the next ones look hung (the reference serializes a connection).
	within := func(what string, f func(c *sbxClient) error, codes ...int) {
		t.Helper()
		fresh := connect(t, c.srv, fx)
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- f(fresh) }()
		select {
		case err := <-done:
			wantRefused(t, what, err, codes...)
		case <-time.After(5 * time.Second):
			t.Errorf("FAIL: %s did not answer within 5s (hang)", what)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Logf("%s took %v", what, d)
		}
	}
	within("fs/writeFile WORK/fifo", func(c *sbxClient) error { return c.writeFile(fx.w("fifo"), "x") }, -32600, -32603)
	within("fs/writeFile linkdir/fifo (outside FIFO with a reader)", func(c *sbxClient) error { return c.writeFile(fx.w("linkdir", "fifo"), "x") }, -32600, -32603)
	within("fs/readFile WORK/fifo", func(c *sbxClient) error { _, err := c.readFile(fx.w("fifo")); return err }, -32600)
	within("fs/readFile linkdir/fifo", func(c *sbxClient) error { _, err := c.readFile(fx.w("linkdir", "fifo")); return err }, -32600)
	within("fs/open WORK/fifo", func(c *sbxClient) error {
		return c.fs("fs/open", map[string]any{"handleId": "fifo", "path": fileURI(fx.w("fifo"))}, nil)
	}, -32600)
	within("fs/readFile /dev/zero", func(c *sbxClient) error { _, err := c.readFile("/dev/zero"); return err }, -32600)
	within("fs/readFile /dev/stdin", func(c *sbxClient) error { _, err := c.readFile("/dev/stdin"); return err }, -32600, -32004)
	within("fs/readFile WORK (a directory)", func(c *sbxClient) error { _, err := c.readFile(fx.WORK); return err }, -32600)
	within("fs/readFile WORK/sock (a socket)", func(c *sbxClient) error { _, err := c.readFile(fx.w("sock")); return err }, -32600)
	within("fs/writeFile WORK/sock (a socket)", func(c *sbxClient) error { return c.writeFile(fx.w("sock"), "x") }, -32600, -32603)
	within("fs/copy WORK/fifo -> WORK/fifo2", func(c *sbxClient) error { return c.copy(fx.w("fifo"), fx.w("fifo2"), false) }, -32600)
	buf := make([]byte, 64)
	if n, _ := syscall.Read(rfd, buf); n > 0 {
		t.Errorf("HOLE: %q was written into the outside FIFO", buf[:n])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.call(ctx, "environment/status", nil, nil); err != nil {
		t.Errorf("FAIL: the connection no longer answers after the special files: %v", err)
	}
}

// 18: no device nodes, as root or not (capabilities are dropped).
func case18Mknod(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantProcDenied(t, "probe mknod-c WORK/null2", c.run(probeCmd("mknod-c", fx.w("null2")), nil), true)
	wantProcDenied(t, "probe mknod-b WORK/disk", c.run(probeCmd("mknod-b", fx.w("disk")), nil), true)
	wantProcDenied(t, "mknod dev3 c 1 3", c.run([]string{"mknod", "dev3", "c", "1", "3"}, nil), true)
	for _, n := range []string{"null2", "disk", "dev3"} {
		mustNotExist(t, fx.w(n))
	}
	wantProcOK(t, "control: mkfifo WORK/f2", c.run([]string{"mkfifo", "f2"}, nil))
}

// 19: metadata changes outside (Landlock does not cover them; the
// read-only mount must): the host check compares ctimes.
func case19Metadata(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantProcOK(t, "control: probe chmod WORK/in.txt", c.run(probeCmd("chmod", fx.w("in.txt")), nil))
	for _, target := range []string{fx.o("secret.txt"), fx.w("linkfile"), fx.OUT, fx.o("dir")} {
		for _, op := range []string{"chmod", "chown", "utime", "setxattr"} {
			wantProcDenied(t, "probe "+op+" "+target, c.run(probeCmd(op, target), nil), false)
		}
	}
	wantProcDenied(t, "chmod 777 ../OUT/secret.txt", c.run([]string{"chmod", "777", "../OUT/secret.txt"}, nil), true)
	wantProcDenied(t, "touch -d 2000-01-01 ../OUT/secret.txt", c.run([]string{"touch", "-d", "2000-01-01", "../OUT/secret.txt"}, nil), true)
	if _, err := os.Stat("/usr/bin/chattr"); err == nil {
		t.Cleanup(func() { _ = exec.Command("/usr/bin/chattr", "-i", fx.o("secret.txt")).Run() })
		wantProcDenied(t, "chattr +i ../OUT/secret.txt", c.run([]string{"/usr/bin/chattr", "+i", "../OUT/secret.txt"}, nil), false)
	}
}

// 20: the command inherits no descriptor but 0, 1, 2, and exactly the
// requested environment.
func case20Fds(t *testing.T, c *sbxClient) {
	// ls (not the Go probe: the Go runtime opens cgroup files and an epoll
	// of its own) lists its descriptors; its own directory fd is the one
	// pointing at /proc/<pid>/fd.
	for _, tty := range []bool{false, true} {
		r := c.runIn(c.fx.WORK, []string{"ls", "-l", "/proc/self/fd"}, nil, tty)
		wantProcOK(t, fmt.Sprintf("ls -l /proc/self/fd (tty %v)", tty), r)
		var fds []string
		for _, line := range strings.Split(strings.ReplaceAll(r.Output, "\r", ""), "\n") {
			f := strings.Fields(line)
			i := slices.Index(f, "->")
			if i < 1 || i+1 >= len(f) {
				continue
			}
			n, target := f[i-1], f[i+1]
			fds = append(fds, n)
			if n == "0" || n == "1" || n == "2" || (strings.HasPrefix(target, "/proc/") && strings.HasSuffix(target, "/fd")) {
				continue
			}
			t.Errorf("HOLE: an inherited descriptor (tty %v): %s -> %s", tty, n, target)
		}
		if r.StartErr == nil && !slices.Contains(fds, "2") {
			t.Errorf("FAIL: ls -l /proc/self/fd (tty %v) shows no fd 2: %q", tty, r.Output)
		}
	}
	r := c.run([]string{"/usr/bin/env"}, nil)
	wantProcOK(t, "env", r)
	var env []string
	for _, kv := range strings.Fields(r.Output) {
		if !strings.HasPrefix(kv, "PWD=") { // a shell-style PWD, as the reference adds
			env = append(env, kv)
		}
	}
	slices.Sort(env)
	if want := []string{"LC_ALL=C", "PATH=/usr/local/bin:/usr/bin:/bin"}; r.StartErr == nil && !slices.Equal(env, want) {
		t.Errorf("mismatch: the sandboxed environment is %q, want exactly %q (and PWD)", env, want)
	}
}

// setup21Race prepares WORK/d (a real directory, with a victim) and
// WORK/alt (a symlink to OUT), which the race swaps.
func setup21Race(t *testing.T, fx *fixture) {
	if err := os.MkdirAll(fx.w("d", "victim"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fx.w("d", "victim", "v.txt"), []byte("inner victim"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fx.OUT, fx.w("alt")); err != nil {
		t.Fatal(err)
	}
}

// 21: a bounded TOCTOU race: the host swaps WORK/d between a directory and
// a symlink to OUT (RENAME_EXCHANGE) while writes, mkdirs, copies and
// recursive removes run through WORK/d; nothing may happen outside.
func case21Race(t *testing.T, c *sbxClient) {
	fx := c.fx
	dur := 2 * time.Second
	if testing.Short() {
		dur = 300 * time.Millisecond
	}
	stop := make(chan struct{})
	var swaps atomic.Int64
	var swapper sync.WaitGroup
	swapper.Add(1)
	go func() {
		defer swapper.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, fx.w("d"), unix.AT_FDCWD, fx.w("alt"), unix.RENAME_EXCHANGE); err == nil {
				swaps.Add(1)
			}
		}
	}()
	deadline := time.Now().Add(dur)
	var ops, oks atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				var err error
				switch i % 4 {
				case 0:
					err = c.writeFile(fx.w("d", fmt.Sprintf("x%d_%d", w, i)), "race")
				case 1:
					err = c.mkdir(fx.w("d", fmt.Sprintf("m%d_%d", w, i)), false)
				case 2:
					err = c.copy(fx.w("in.txt"), fx.w("d", fmt.Sprintf("c%d_%d", w, i)), false)
				case 3:
					err = c.remove(fx.w("d", "victim"), true, false)
				}
				ops.Add(1)
				if err == nil {
					oks.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(deadline) {
			c.run([]string{"sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do echo x > d/p$i; mkdir d/q$i; rm -rf d/victim; done; exit 0"}, nil)
		}
	}()
	wg.Wait()
	close(stop)
	swapper.Wait()
	t.Logf("race: %d swaps, %d fs calls (%d succeeded) in %v", swaps.Load(), ops.Load(), oks.Load(), dur)
	if swaps.Load() == 0 {
		t.Errorf("FAIL: the race never swapped (the test did not race)")
	}
	if oks.Load() == 0 {
		t.Errorf("FAIL: no sandboxed operation succeeded during the race (while WORK/d was a directory, some must)")
	}
}

// setup22Alias adds P/alias -> WORK.
func setup22Alias(t *testing.T, fx *fixture) {
	if err := os.Symlink(fx.WORK, filepath.Join(fx.P, "alias")); err != nil {
		t.Fatal(err)
	}
}

// 22: a root given through a symlink works; a missing root is a clear
// error, not a widening; a root inside another root works.
func case22Roots(t *testing.T, c *sbxClient) {
	fx := c.fx
	alias := filepath.Join(fx.P, "alias")
	c.fsSbx, c.procSbx = fsContext(alias, workspaceWriteEntries()), procContext(alias, workspaceWriteEntries())
	wantOK(t, "fs/writeFile alias/new.txt (alias root)", c.writeFile(filepath.Join(alias, "new.txt"), "alias"))
	if data, err := os.ReadFile(fx.w("new.txt")); err != nil || string(data) != "alias" {
		t.Errorf("FAIL: the write through the alias root did not land in WORK: %q %v", data, err)
	}
	wantProcOK(t, "echo > new2.txt in the alias root", c.runIn(alias, []string{"sh", "-c", "echo hi > new2.txt"}, nil, false))
	if _, err := os.Stat(fx.w("new2.txt")); err != nil {
		t.Errorf("FAIL: the command in the alias root did not write WORK/new2.txt: %v", err)
	}
	wantDenied(t, "fs/writeFile alias/../OUT/x", c.writeURI("file://"+alias+"/../OUT/x.txt", "x"), -32603, erofs)
	wantDenied(t, "fs/writeFile alias/linkdir/x", c.writeFile(filepath.Join(alias, "linkdir", "x.txt"), "x"), -32603, erofs)
	wantProcDenied(t, "touch ../OUT/x from the alias root", c.runIn(alias, []string{"touch", "../OUT/x"}, nil, false), true)

	missing := filepath.Join(fx.P, "missing")
	c.fsSbx, c.procSbx = fsContext(missing, workspaceWriteEntries()), procContext(missing, workspaceWriteEntries())
	err := c.writeFile(filepath.Join(missing, "x.txt"), "x")
	if err == nil {
		t.Errorf("HOLE: fs/writeFile under a missing root succeeded")
	} else {
		t.Logf("missing root, fs/writeFile: %v", err)
	}
	wantRefused(t, "fs/writeFile WORK/y.txt under a policy whose only root is missing", c.writeFile(fx.w("y.txt"), "x"), -32603, -32600, -32004)
	mustNotExist(t, fx.w("y.txt"))
	r := c.run([]string{"touch", "z.txt"}, nil)
	if r.StartErr == nil && r.ExitCode == 0 {
		t.Errorf("HOLE: touch WORK/z.txt succeeded under a policy whose only root is missing: %v", r)
	}
	t.Logf("missing root, process/start: %v", r)
	mustNotExist(t, fx.w("z.txt"))
	mustNotExist(t, missing)

	sub := fx.w("sub")
	nested := fsContext(fx.WORK, workspaceWriteEntries())
	nested["workspaceRoots"] = []string{fileURI(fx.WORK), fileURI(sub)}
	nested["policyContext"] = map[string]any{"cwd": fileURI(fx.WORK), "workspaceRoots": []string{fileURI(fx.WORK), fileURI(sub)}}
	wantOK(t, "fs/writeFile WORK/sub/n.txt (a root inside a root)", c.fs("fs/writeFile", map[string]any{
		"path": fileURI(filepath.Join(sub, "n.txt")), "dataBase64": base64.StdEncoding.EncodeToString([]byte("n")), "sandbox": nested,
	}, nil))
	wantDenied(t, "fs/writeFile OUT/n.txt (nested roots)", c.fs("fs/writeFile", map[string]any{
		"path": fileURI(fx.o("n.txt")), "dataBase64": "eA==", "sandbox": nested,
	}, nil), -32603, erofs)
}

// 23: long names: ENAMETOOLONG, no crash, no truncation that changes
// which path is checked.
func case23Long(t *testing.T, c *sbxClient) {
	fx := c.fx
	n255 := strings.Repeat("a", 255)
	wantOK(t, "control: fs/writeFile a 255-byte name", c.writeFile(fx.w(n255), "x"))
	wantDenied(t, "fs/writeFile a 256-byte name", c.writeFile(fx.w(strings.Repeat("b", 256)), "x"), -32603, "(os error 36)")
	wantDenied(t, "fs/writeFile OUT/<256-byte name>", c.writeFile(fx.o(strings.Repeat("b", 256)), "x"), -32603, "(os error 36)")
	comp := strings.Repeat("c", 200)
	deep := make([]string, 25)
	for i := range deep {
		deep[i] = comp
	}
	// Build a path over 4096 bytes step by step, relatively, inside WORK
	// (the probe: a shell's cd keeps a logical path and gives up at 4096).
	wantProcOK(t, "probe deep: a 5000-byte path built step by step", c.run(probeCmd("deep", "25", comp), nil))
	long := fx.w(append(slices.Clone(deep), "f")...)
	wantDenied(t, fmt.Sprintf("fs/writeFile a %d-byte path", len(long)), c.writeFile(long, "x"), -32603, "(os error 36)")
	_, err := c.readFile(long)
	wantDenied(t, "fs/readFile a >4096-byte path", err, -32603, "(os error 36)")
	// Over 4096 only after symlink expansion: lexically short.
	if err := os.Symlink(fx.w(deep[:15]...), fx.w("short")); err != nil {
		t.Fatal(err)
	}
	if fx.mode.uid >= 0 {
		_ = os.Lchown(fx.w("short"), fx.mode.uid, fx.mode.uid)
	}
	viaLink := fx.w(append([]string{"short"}, deep[15:]...)...)
	viaLink = filepath.Join(viaLink, "g")
	err = c.writeFile(viaLink, "through the link")
	t.Logf("fs/writeFile over 4096 bytes only after symlink expansion (%d bytes lexically): %v", len(viaLink), err)
	if err == nil {
		var st unix.Stat_t
		if err := statDeep(fx.WORK, append(slices.Clone(deep), "g"), &st); err != nil || st.Size != int64(len("through the link")) {
			t.Errorf("FAIL: the write through a long symlink expansion did not land where it was aimed: %v", err)
		}
	}
	wantProcDenied(t, "probe write OUT/<300-byte name>", c.run(probeCmd("write", fx.o(strings.Repeat("d", 300))), nil), false)
}

// 24: malformed paths are refused before any filesystem access.
func case24URIs(t *testing.T, c *sbxClient) {
	fx := c.fx
	for _, k := range []struct {
		label, uri string
		codes      []int
	}{
		{"NUL", "file://" + fx.WORK + "/a%00b", []int{-32602}},
		{"empty", "", []int{-32602}},
		{"relative", "relative/path.txt", []int{-32602}},
		{"native path", fx.w("native.txt"), []int{-32602}},
		{"foreign host", "file://otherhost" + fx.w("host.txt"), []int{-32600, -32602}},
		{"non-file scheme", "http://127.0.0.1" + fx.w("http.txt"), []int{-32602, -32600}},
		{"windows drive", `C:\WORK\x.txt`, []int{-32602}},
	} {
		wantRefused(t, "fs/writeFile "+k.label+" "+k.uri, c.writeURI(k.uri, "x"), k.codes...)
	}
	mustNotExist(t, fx.w("a"))
	mustNotExist(t, fx.w("native.txt"))
	// Invalid UTF-8 is a valid Linux name: refused, or written inside WORK.
	if err := c.writeURI("file://"+fx.WORK+"/%ff.txt", "x"); err == nil {
		if _, serr := os.Lstat(fx.w("\xff.txt")); serr != nil {
			t.Errorf("FAIL: fs/writeFile WORK/%%ff.txt succeeded but nothing is at WORK/\\xff.txt")
		}
	} else {
		t.Logf("fs/writeFile WORK/%%ff.txt: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err := c.call(ctx, "process/start", map[string]any{
		"processId": "bad-cwd", "argv": []string{"touch", "x"}, "cwd": "file://" + fx.WORK + "/a%00b",
		"env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false, "sandbox": c.procSbx,
	}, nil)
	wantRefused(t, "process/start with a NUL in cwd", err, -32602)
}

// 25: network restricted means no network but AF_UNIX: the host's
// listeners (opened by the test on 127.0.0.1 and in the abstract unix
// namespace) see nothing.
func case25Network(t *testing.T, c *sbxClient) {
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	var accepted atomic.Int64
	go func() {
		for {
			conn, err := tcp.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conn.Close()
		}
	}()
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	var datagrams atomic.Int64
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			datagrams.Add(1)
		}
	}()
	name := fmt.Sprintf("escape-%d-%d", os.Getpid(), time.Now().UnixNano())
	abs, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer abs.Close()
	var unixAccepted atomic.Int64
	go func() {
		for {
			conn, err := abs.Accept()
			if err != nil {
				return
			}
			unixAccepted.Add(1)
			conn.Close()
		}
	}()
	tcpAddr, udpAddr := tcp.Addr().String(), udp.LocalAddr().String()
	for _, k := range []struct {
		op   string
		args []string
		step string // the step that must fail: socket() for every non-AF_UNIX family
	}{
		{"tcp", []string{tcpAddr}, "socket"},
		{"mptcp", []string{tcpAddr}, "socket"},
		{"tcp6", nil, "socket"},
		{"listen", nil, "socket"},
		{"udp", []string{udpAddr}, "socket"},
		{"raw", nil, "socket"},
		{"netlink", nil, "socket"},
		{"vsock", nil, "socket"},
		{"iouring", nil, "io_uring_setup"},
		{"abstract", []string{name}, "connect"},
	} {
		r := c.run(probeCmd(k.op, k.args...), nil)
		wantProcDenied(t, "probe "+k.op, r, false)
		if r.StartErr == nil && r.ExitCode != 0 && !strings.Contains(r.Output, k.op+": "+k.step+":") {
			t.Errorf("mismatch: probe %s failed later than %s: %v", k.op, k.step, r)
		}
	}
	wantProcOK(t, "control: AF_UNIX socketpair", c.run(probeCmd("socketpair"), nil))
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		// What a real tool does: an interpreter's socket() and connect().
		port := tcpAddr[strings.LastIndexByte(tcpAddr, ':')+1:]
		for _, code := range []string{
			"import socket; s = socket.socket(); s.connect(('127.0.0.1', " + port + "))",
			"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262); s.connect(('127.0.0.1', " + port + "))",
			"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('127.0.0.1', " + udpAddr[strings.LastIndexByte(udpAddr, ':')+1:] + "))",
		} {
			wantProcDenied(t, "python3 -c "+code, c.run([]string{"/usr/bin/python3", "-c", code}, nil), true)
		}
		wantProcOK(t, "control: python3 AF_UNIX socketpair", c.run([]string{"/usr/bin/python3", "-c", "import os, socket; a, b = socket.socketpair(); os.write(a.fileno(), b'x'); assert os.read(b.fileno(), 1) == b'x'"}, nil))
	}
	time.Sleep(100 * time.Millisecond) // let a datagram that got out arrive
	if n := accepted.Load(); n > 0 {
		t.Errorf("HOLE: the host TCP listener accepted %d connections from the sandbox", n)
	}
	if n := datagrams.Load(); n > 0 {
		t.Errorf("HOLE: the host UDP socket received %d datagrams from the sandbox", n)
	}
	if n := unixAccepted.Load(); n > 0 {
		t.Errorf("HOLE: the host abstract unix listener accepted %d connections from the sandbox", n)
	}
}

// 26: no signal or ptrace reaches the server or a host process of the same
// user, and host pids are not even visible.
func case26Signals(t *testing.T, c *sbxClient) {
	victim := exec.Command("sleep", "60")
	if c.fx.mode.uid >= 0 {
		victim.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(c.fx.mode.uid), Gid: uint32(c.fx.mode.uid)}}
	}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = victim.Process.Kill(); _ = victim.Wait() }()
	vpid := strconv.Itoa(victim.Process.Pid)
	spid := strconv.Itoa(c.srv.pid())
	for _, argv := range [][]string{
		probeCmd("kill", spid, "0"),
		probeCmd("kill", vpid, "15"),
		probeCmd("ptrace", vpid),
		probeCmd("ptrace", spid),
		probeCmd("mem", spid),
		probeCmd("mem", vpid),
		{"sh", "-c", "test -e /proc/" + spid},
		{"sh", "-c", "test -e /proc/" + vpid},
	} {
		wantProcDenied(t, strings.Join(argv[1:], " "), c.run(argv, nil), false)
	}
	time.Sleep(50 * time.Millisecond)
	if st := procmark.State(victim.Process.Pid); st == 0 || st == 'Z' {
		t.Errorf("HOLE: a host process of the same user was killed from the sandbox")
	}
	if r := c.run([]string{"unshare", "-U", "true"}, nil); r.StartErr == nil {
		t.Logf("nested user namespace (informational): %v", r)
	}
}

// setup27Tree adds a wide and deep tree under WORK and a deny glob, so
// that building the sandbox has a large scan to bound.
func setup27Tree(t *testing.T, fx *fixture) {
	for i := 0; i < 16; i++ {
		for j := 0; j < 16; j++ {
			if err := os.MkdirAll(fx.w("tree", strconv.Itoa(i), strconv.Itoa(j), "leaf"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	deep := fx.w("tree", "deep")
	for i := 0; i < 100; i++ {
		deep = filepath.Join(deep, "d")
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(deep, "far.env"), []byte("FAR=1"), 0o644); err != nil {
		t.Fatal(err)
	}
	fx.fsEntries = append(workspaceWriteEntries(), entry(map[string]any{"type": "glob_pattern", "pattern": "**/*.env"}, "deny"))
}

// 27: bounded: many concurrent sandboxed operations all finish; a deny
// glob over a big tree answers; a large write lands.
func case27Bounded(t *testing.T, c *sbxClient) {
	fx := c.fx
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 48; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.writeFile(fx.w(fmt.Sprintf("c%d.txt", i)), "c"); err != nil {
				errs <- fmt.Errorf("fs/writeFile c%d.txt: %w", i, err)
			}
		}()
	}
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := c.run([]string{"sh", "-c", fmt.Sprintf("echo %d > p%d.txt", i, i)}, nil); r.StartErr != nil || r.ExitCode != 0 {
				errs <- fmt.Errorf("process p%d: %v", i, r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("FAIL: concurrent sandboxed operation: %v", err)
	}
	t.Logf("48 fs/writeFile + 12 process/start under a deny glob over a %s tree, concurrently: %v", "4k-directory", time.Since(start))
	big := strings.Repeat("0123456789abcdef", 1<<18) // 4 MiB, under any message limit once in base64
	wantOK(t, "fs/writeFile 4 MiB", c.writeFile(fx.w("big.bin"), big))
	if fi, err := os.Stat(fx.w("big.bin")); err != nil || fi.Size() != int64(len(big)) {
		t.Errorf("FAIL: the 4 MiB write left %v %v", fi, err)
	}
}

// 27: two servers (two codex sessions on one host) sandbox the same
// workspace at once: they share the mount points of its missing protected
// paths and of the tmpdir and /tmp roots. Every operation must succeed,
// and nothing may be left behind when both are done.
func case27TwoServers(t *testing.T, c *sbxClient) {
	fx := c.fx
	c2 := connect(t, startSandboxServer(t, fx.mode), fx)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for k, cl := range []*sbxClient{c, c2} {
		for i := 0; i < 24; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := cl.writeFile(fx.w(fmt.Sprintf("s%d_%d.txt", k, i)), "x"); err != nil {
					errs <- fmt.Errorf("server %d: fs/writeFile s%d_%d.txt: %w", k+1, k, i, err)
				}
			}()
		}
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r := cl.run([]string{"sh", "-c", fmt.Sprintf("echo x > p%d_%d.txt", k, i)}, nil); r.StartErr != nil || r.ExitCode != 0 {
					errs <- fmt.Errorf("server %d: process p%d_%d: %v", k+1, k, i, r)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("FAIL: %v", err)
	}
}

// 28: useLegacyLandlock and the Windows levels never mean "no sandbox".
func case28Levels(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantOK(t, "control: fs/writeFile WORK/ok.txt with the level disabled", c.writeFile(fx.w("ok.txt"), "ok"))
	for _, v := range []struct {
		label string
		key   string
		value any
	}{
		{"useLegacyLandlock", "useLegacyLandlock", true},
		{"restricted-token", "windowsSandboxLevel", "restricted-token"},
		{"elevated", "windowsSandboxLevel", "elevated"},
		{"mxc", "windowsSandboxLevel", "mxc"},
	} {
		fsSbx := fsContext(fx.WORK, workspaceWriteEntries())
		procSbx := procContext(fx.WORK, workspaceWriteEntries())
		fsSbx[v.key], procSbx[v.key] = v.value, v.value
		err := c.fs("fs/writeFile", map[string]any{"path": fileURI(fx.o(v.label + ".txt")), "dataBase64": "eA==", "sandbox": fsSbx}, nil)
		wantRefused(t, v.label+": fs/writeFile OUT/x", err, -32603, -32600)
		inside := c.fs("fs/writeFile", map[string]any{"path": fileURI(fx.w(v.label + ".txt")), "dataBase64": "eA==", "sandbox": fsSbx}, nil)
		r := c.run([]string{"sh", "-c", "touch ../OUT/" + v.label + "_p.txt; echo escaped"}, procSbx)
		if r.StartErr == nil {
			if r.SandboxType != "linuxSeccomp" {
				t.Errorf("HOLE: %s: process/start ran with sandboxType %q", v.label, r.SandboxType)
			}
		}
		t.Logf("%s: fs/writeFile inside: %v; process: %v", v.label, inside, r)
	}
}

// setup30MoveParent: a read-only carve-out (WORK/a/b) and a deny entry
// (WORK/d/secret.txt) one level below the writable root.
func setup30MoveParent(t *testing.T, fx *fixture) {
	for p, data := range map[string]string{"a/b/ro.txt": "read-only", "d/secret.txt": "denied"} {
		if err := os.MkdirAll(filepath.Dir(fx.w(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fx.w(p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fx.protected = append(fx.protected, fx.w("a"), fx.w("a", "b"), fx.w("d"), fx.w("c"), fx.w("e"))
	fx.fsEntries = append(workspaceWriteEntries(), pathEntry(fx.w("a", "b"), "read"), pathEntry(fx.w("d", "secret.txt"), "deny"))
}

// 30 (beyond the reference's cases): renaming the parent of a carve-out or a deny mask would
// move the mount along (the kernel moves mounts with their directory), off
// the path the policy names; the command could then make that path anew.
// Both renames must fail and the host stay as it was.
func case30MoveParent(t *testing.T, c *sbxClient) {
	for _, cmd := range []string{
		"mv a c && mkdir -p a/b && echo x > a/b/new",
		"mv d e && mkdir d && echo x > d/secret.txt",
	} {
		r := c.run([]string{"sh", "-c", cmd}, nil)
		wantProcDenied(t, cmd, r, false)
	}
	r := c.run([]string{"sh", "-c", "mkdir -p free/sub && mv free free2"}, nil)
	if r.StartErr != nil || r.ExitCode != 0 {
		t.Errorf("FAIL: control: renaming a directory that holds no mount: %v", r)
	}
}

// 31: a sandboxed command (of a root server: root-owned) leaves no
// set-user-ID file in its writable root: chmod 4755 and an open with mode
// 04755 are refused (EPERM), and no such file is there afterwards.
func case31SetUID(t *testing.T, c *sbxClient) {
	fx := c.fx
	wantProcOK(t, "control: touch WORK/tool", c.run([]string{"touch", "tool"}, nil))
	wantProcDenied(t, "probe setuid WORK/tool", c.run(probeCmd("setuid", fx.w("tool")), nil), true)
	wantProcDenied(t, "chmod u+s WORK/tool", c.run([]string{"chmod", "u+s,g+s", "tool"}, nil), true)
	_ = filepath.Walk(fx.WORK, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("HOLE: %s is %v", p, fi.Mode())
		}
		return nil
	})
}

// 32: host daemons over pathname unix sockets: a stream socket in OUT (a
// tmux, docker or ssh-agent stand-in, mode 0777 so that only the sandbox
// can refuse; in a sibling temporary directory) is refused to a network-enabled command, directly and
// through a symlink in WORK; a datagram socket in OUT (a /dev/log
// stand-in) gets nothing from a network-restricted command.
func case32UnixSockets(t *testing.T, c *sbxClient) {
	fx := c.fx
	// The daemons' sockets live in a sibling temporary directory of their
	// own (outside every root; the fixture's host snapshot stays as is).
	host := t.TempDir()
	if err := os.Chmod(host, 0o755); err != nil {
		t.Fatal(err)
	}
	hostPath := func(name string) string { return filepath.Join(host, name) }
	var accepted, datagrams atomic.Int64
	ln, err := net.Listen("unix", hostPath("daemon.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// What counts is a byte delivered.
			go func() {
				defer conn.Close()
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				if n, _ := conn.Read(make([]byte, 1)); n > 0 {
					accepted.Add(1)
				}
			}()
		}
	}()
	pc, err := net.ListenPacket("unixgram", hostPath("log"))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			datagrams.Add(1)
		}
	}()
	for _, p := range []string{hostPath("daemon.sock"), hostPath("log")} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(hostPath("daemon.sock"), fx.w("d.sock")); err != nil {
		t.Fatal(err)
	}
	enabled := procContext(fx.WORK, workspaceWriteEntries())
	enabled["permissions"].(map[string]any)["network"] = "enabled"
	wantProcDenied(t, "network enabled: connect OUT/daemon.sock", c.run(probeCmd("unix-connect", hostPath("daemon.sock")), enabled), true)
	wantProcDenied(t, "network enabled: connect WORK/d.sock -> OUT/daemon.sock", c.run(probeCmd("unix-connect", fx.w("d.sock")), enabled), true)
	wantProcDenied(t, "network enabled: a datagram to OUT/log", c.run(probeCmd("unix-dgram", hostPath("log")), enabled), true)
	wantProcDenied(t, "network restricted: a datagram to OUT/log", c.run(probeCmd("unix-dgram", hostPath("log")), nil), true)
	time.Sleep(100 * time.Millisecond) // a byte in flight, if any
	if n := accepted.Load(); n != 0 {
		t.Errorf("HOLE: the host daemon's socket got bytes on %d connections", n)
	}
	if n := datagrams.Load(); n != 0 {
		t.Errorf("HOLE: the host datagram socket got %d datagrams", n)
	}
}

// 33: no task of a running sandbox has a capability: the init's Go
// runtime threads (they kept every one) and the command's.
func case33Caps(t *testing.T, c *sbxClient) {
	wantProcOK(t, "probe caps (every task of the init and of the command)", c.run(probeCmd("caps"), nil))
	deny := procContext(c.fx.WORK, append(workspaceWriteEntries(), entry(map[string]any{"type": "glob_pattern", "pattern": "**/*.env"}, "deny")))
	wantProcOK(t, "probe caps under a deny glob (the supervisor)", c.run(probeCmd("caps"), deny))
}

// 34: no file lease on a host file readable through the view (it stalls
// host writers for the lease-break time), and no core file: RLIMIT_CORE
// is 0, soft and hard.
func case34LeasesCores(t *testing.T, c *sbxClient) {
	wantProcDenied(t, "probe lease OUT/secret.txt", c.run(probeCmd("lease", c.fx.o("secret.txt")), nil), true)
	wantProcOK(t, "probe core-limit", c.run(probeCmd("core-limit"), nil))
}

// setup35Race: WORK/d, and the deny glob secrets/**.
func setup35Race(t *testing.T, fx *fixture) {
	if err := os.Mkdir(fx.w("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	fx.fsEntries = append(workspaceWriteEntries(), entry(map[string]any{"type": "glob_pattern", "pattern": "secrets/**"}, "deny"))
}

// 35: deny globs under concurrency: two sandboxed commands on one
// workspace, one creating d/f in a loop, the other renaming d to secrets
// and back, while fs/writeFile writes d/g: no interleaving leaves a path
// under secrets/ (before the creation lock, secrets/f appeared within
// 2 000 tries, every run).
func case35Race(t *testing.T, c *sbxClient) {
	fx := c.fx
	var wg sync.WaitGroup
	var created, renamed procResult
	done := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); created = c.run(probeCmd("loop-create", "2000"), nil) }()
	go func() { defer wg.Done(); defer close(done); renamed = c.run(probeCmd("loop-rename", "2000"), nil) }()
	writes := 0
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		default:
			if c.writeFile(fx.w("d", "g"), "g") == nil {
				writes++
			}
			_ = os.Remove(fx.w("d", "g"))
			_ = os.Remove(fx.w("secrets", "g"))
		}
	}
	wg.Wait()
	t.Logf("%v; %v; %d fs/writeFile of d/g", created, renamed, writes)
	if renamed.ExitCode == 3 {
		t.Errorf("HOLE: a creation checked as d/f landed in secrets/f: %v", renamed)
	} else {
		wantProcOK(t, "probe loop-rename", renamed)
	}
	wantProcOK(t, "probe loop-create", created)
	mustNotExist(t, fx.w("secrets", "f"))
	mustNotExist(t, fx.w("secrets", "g"))
}

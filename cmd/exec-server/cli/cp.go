package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/execgo/exec-server/client"
)

// progressMin is the size from which cp shows a progress bar on a terminal.
const progressMin = 1 << 20

func (c *command) cp(ctx context.Context, args []string) int {
	fs := c.flags("[-a] [-r] [-L] [-q] SRC... DST   (remote paths are :/abs/path)")
	archive := fs.BoolP("archive", "a", false, "archive: also keep modification times and the setuid, setgid and sticky bits; implies -r")
	recursive := fs.BoolP("recursive", "r", false, "copy directories recursively")
	follow := fs.BoolP("follow-link", "L", false, "follow a symlink named as SRC (symlinks inside a tree are always copied as links)")
	quiet := fs.BoolP("quiet", "q", false, "no progress bar")
	if code, ok := c.parse(fs, args, true); !ok {
		return code
	}
	if fs.NArg() < 2 {
		return c.usageErr("want SRC... DST")
	}
	var srcs []location
	for _, a := range fs.Args()[:fs.NArg()-1] {
		srcs = append(srcs, parseLocation(a))
	}
	dst := parseLocation(fs.Arg(fs.NArg() - 1))
	anyRemote := dst.remote
	for _, l := range append(srcs, dst) {
		if l.remote {
			anyRemote = true
			if !path.IsAbs(l.path) {
				return c.usageErr("remote path %q must be absolute (:/abs/path)", l)
			}
		}
		if !l.remote && l.path == "-" && len(srcs) > 1 {
			return c.usageErr("- can be used with a single source only")
		}
	}
	if !anyRemote {
		return c.usageErr("nothing remote: write remote paths as :/abs/path")
	}
	cl, code := c.dial(ctx)
	if cl == nil {
		return code
	}
	defer cl.Close()
	cp := &copier{cmd: c, cl: cl, archive: *archive, recursive: *recursive || *archive, follow: *follow, progress: !*quiet && isTerminal(c.stderr)}
	intoDir := len(srcs) > 1 || strings.HasSuffix(dst.path, "/") || cp.isDir(ctx, dst)
	code = 0
	for _, src := range srcs {
		to := dst
		if intoDir {
			to.path = joinPath(dst, path.Base(filepath.ToSlash(src.path)))
		}
		if err := cp.copy(ctx, src, to); err != nil {
			code = c.fail(exitFailure, "%s", err)
		}
	}
	if cp.skipped > 0 {
		what := "entries"
		if cp.skipped == 1 {
			what = "entry"
		}
		code = c.fail(exitFailure, "%d %s not copied (see above)", cp.skipped, what)
	}
	return code
}

func joinPath(dir location, name string) string {
	if dir.remote {
		return path.Join(dir.path, name)
	}
	return filepath.Join(dir.path, name)
}

// A copier copies cp's operands as docker cp does: permission bits are
// kept and symlinks are copied as links; -a also keeps modification times
// and the setuid, setgid and sticky bits. Every file is written under a
// temporary name in its target's directory and put in place only when
// complete, so an interrupted copy leaves the old target as it was; the
// temporary file is removed on every failure, an interruption included.
//
// Locally that is os.CreateTemp and os.Rename. For what the protocol cannot
// express (a file's mode, setting a modification time, reading or making a
// symlink, a rename), cp runs POSIX sh, find, ls, readlink, chmod, touch, ln
// and mv on the server. Only stdin uploads (SRC -) go through fs/copy of
// the finished temporary file alone.
//
// An entry that cannot be copied (a FIFO, a device, an unreadable
// directory) is reported and counted; cp then exits 1.
type copier struct {
	cmd       *command
	cl        *client.Client
	archive   bool
	recursive bool
	follow    bool
	progress  bool
	skipped   int

	pending []string // -a uploads: finalize operations not yet run
	dirs    []string // -a uploads: directory operations, run last
}

func (cp *copier) isDir(ctx context.Context, l location) bool {
	if l.remote {
		fi, err := cp.cl.Stat(ctx, l.path)
		return err == nil && fi.IsDir()
	}
	if l.path == "-" {
		return false
	}
	fi, err := os.Stat(l.path)
	return err == nil && fi.IsDir()
}

// copy copies one operand, a file or (with -r) a directory tree.
func (cp *copier) copy(ctx context.Context, src, dst location) error {
	switch {
	case src.remote && dst.remote:
		if !cp.recursive && cp.isDir(ctx, src) {
			return fmt.Errorf("%s is a directory (use -r)", src)
		}
		if cp.archive {
			// fs/copy keeps permission bits only: the server's cp -p
			// keeps times and the special bits as well.
			if _, err := cp.runSh(ctx, remoteArchiveScript, []string{src.path, dst.path}); err != nil {
				return fmt.Errorf("%s -> %s: %v", src, dst, err)
			}
			return nil
		}
		if err := cp.cl.Copy(ctx, src.path, dst.path); err != nil {
			return fmt.Errorf("%s -> %s: %s", src, dst, describe(err))
		}
		return nil
	case dst.remote:
		err := cp.upload(ctx, src.path, dst.path)
		if ferr := cp.flush(ctx, true); err == nil {
			err = ferr
		}
		return err
	case src.remote:
		if dst.path == "-" {
			if _, err := cp.cl.Download(ctx, src.path, cp.cmd.stdout, nil); err != nil {
				return fmt.Errorf("%s: %s", src, describe(err))
			}
			return nil
		}
		return cp.download(ctx, src.path, dst.path)
	}
	return fmt.Errorf("%s -> %s: nothing remote", src, dst)
}

// remoteArchiveScript copies $1 to $2 on the server with cp -p (modes,
// times, the special bits as far as the server's user may set them) and
// -P (symlinks as links); a directory's contents merge into an existing $2.
const remoteArchiveScript = `
if [ -d "$1" ] && [ ! -L "$1" ]; then
	mkdir -p -- "$2" && cp -pPR -- "$1/." "$2/"
else
	cp -pP -- "$1" "$2"
fi`

// skip reports an entry that is not copied; cp exits 1 in the end.
func (cp *copier) skip(name string, why any) {
	cp.skipped++
	fmt.Fprintf(cp.cmd.stderr, "exec-server cp: %s: not copied: %v\n", name, why)
}

// tempName returns a fresh temporary name beside target.
func tempName(target string, join func(...string) string, dir func(string) string, base func(string) string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return join(dir(target), "."+base(target)+".part-"+hex.EncodeToString(b[:]))
}

func remoteTemp(target string) string { return tempName(target, path.Join, path.Dir, path.Base) }

// removeRemote removes a temporary file, also after ctx ended.
func (cp *copier) removeRemote(ctx context.Context, p string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = cp.cl.RemoveAll(rctx, p)
}

func (cp *copier) upload(ctx context.Context, local, remote string) error {
	if local == "-" {
		return cp.uploadReader(ctx, "-", cp.cmd.stdin, -1, remote, nil)
	}
	fi, err := os.Lstat(local)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 && cp.follow {
		if fi, err = os.Stat(local); err != nil {
			return err
		}
	}
	if !fi.IsDir() {
		return cp.uploadEntry(ctx, local, remote, fi)
	}
	if !cp.recursive {
		return fmt.Errorf("%s is a directory (use -r)", local)
	}
	return filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == local || ctx.Err() != nil {
				return err
			}
			cp.skip(p, err)
			return nil
		}
		rel, _ := filepath.Rel(local, p)
		target := path.Join(remote, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			cp.skip(p, err)
			return nil
		}
		if d.IsDir() {
			if err := cp.cl.MkdirAll(ctx, target); err != nil {
				return fmt.Errorf(":%s: %s", target, describe(err))
			}
			// Children first: a directory's mode and time are set after
			// its contents are made (WalkDir visits parents first).
			cp.dirs = append([]string{"d", target, cp.modeString(info.Mode()), cp.touchTime(info.ModTime())}, cp.dirs...)
			return nil
		}
		if err := cp.uploadEntry(ctx, p, target, info); err != nil {
			return err
		}
		return cp.flush(ctx, false)
	})
}

// uploadEntry uploads one file or symlink; anything else is skipped.
func (cp *copier) uploadEntry(ctx context.Context, local, remote string, fi fs.FileInfo) error {
	switch {
	case fi.Mode().IsRegular():
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		return cp.uploadReader(ctx, local, f, fi.Size(), remote, fi)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(local)
		if err != nil {
			return err
		}
		cp.pending = append(cp.pending, "l", filepath.ToSlash(target), remote, remoteTemp(remote))
		return nil
	}
	cp.skip(local, "not a regular file, directory or symlink")
	return nil
}

// uploadReader uploads r to a temporary name beside remote and puts it in
// place (with fi, later, by flush, with fi's mode and, with -a, time).
func (cp *copier) uploadReader(ctx context.Context, name string, r io.Reader, size int64, remote string, fi fs.FileInfo) error {
	tmp := remoteTemp(remote)
	bar := cp.bar(path.Base(remote), size)
	_, err := cp.cl.Upload(ctx, tmp, r, bar.update)
	bar.finish(err)
	if err != nil {
		cp.removeRemote(ctx, tmp)
		return fmt.Errorf("%s -> :%s: %s", name, remote, describe(err))
	}
	if fi != nil {
		cp.pending = append(cp.pending, "f", tmp, remote, cp.modeString(fi.Mode()), cp.touchTime(fi.ModTime()))
		return nil
	}
	err = cp.cl.Copy(ctx, tmp, remote)
	cp.removeRemote(ctx, tmp)
	if err != nil {
		return fmt.Errorf("%s -> :%s: %s", name, remote, describe(err))
	}
	return nil
}

// finalizeScript puts uploads in place on the server. Its arguments are
// operations: "f TMP DST MODE TIME" (a file uploaded to TMP), "l TARGET DST
// TMP" (a symlink) and "d DIR MODE TIME" (a directory's mode and time).
// TIME is touch -t's, in UTC, or "-" to leave the time. Every path is absolute, so none reads as an
// option (a link's target may, hence ln's --). mv within one directory is
// rename(2): the target is replaced at once or not at all.
const finalizeScript = `
notdir() { if [ -d "$1" ] && [ ! -L "$1" ]; then echo "$1: is a directory" >&2; exit 1; fi; }
while [ $# -gt 0 ]; do
	case $1 in
	f) notdir "$3"; chmod "$4" "$2" && { [ "$5" = - ] || touch -m -t "$5" "$2"; } && mv -f "$2" "$3" || exit 1; shift 5;;
	l) notdir "$3"; ln -s -- "$2" "$4" && mv -f "$4" "$3" || exit 1; shift 4;;
	d) chmod "$3" "$2" && { [ "$4" = - ] || touch -m -t "$4" "$2"; } || exit 1; shift 4;;
	*) echo "unknown operation $1" >&2; exit 2;;
	esac
done`

// flush runs the pending finalize operations on the server: all of them when
// final (then the directories' too), else once enough have gathered
// (bounding the temporary files a failure leaves and the argument list).
func (cp *copier) flush(ctx context.Context, final bool) error {
	if !final && len(cp.pending) < 400 {
		return nil
	}
	ops := cp.pending
	cp.pending = nil
	if final {
		ops = append(ops, cp.dirs...)
		cp.dirs = nil
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := cp.runSh(ctx, finalizeScript, ops); err != nil {
		for i := 0; i < len(ops); {
			switch ops[i] {
			case "f":
				cp.removeRemote(ctx, ops[i+1])
				i += 5
			case "l", "d":
				i += 4
			default:
				i = len(ops)
			}
		}
		return fmt.Errorf("cp: putting files in place on the server: %v", err)
	}
	return nil
}

// runSh runs a POSIX shell script on the server with args as $1...; its
// stdout is returned, and a failure carries its stderr.
func (cp *copier) runSh(ctx context.Context, script string, args []string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := client.Cmd{
		Argv:       append([]string{"/bin/sh", "-c", script, "sh"}, args...),
		Env:        map[string]string{"LC_ALL": "C", "TZ": "UTC0"},
		InheritEnv: "core",
		Stderr:     &stderr,
	}
	out, code, err := cp.cl.Output(ctx, cmd)
	if err != nil {
		return nil, errors.New(describe(err))
	}
	if code != 0 {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", code)
		}
		return nil, errors.New(msg)
	}
	return out, nil
}

// modeString renders a mode's permission bits for chmod (octal, with -a
// the setuid, setgid and sticky bits too).
func (cp *copier) modeString(m fs.FileMode) string {
	bits := uint32(m.Perm())
	if !cp.archive {
		return fmt.Sprintf("%04o", bits)
	}
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return fmt.Sprintf("%04o", bits)
}

// touchTime renders t for touch -t in UTC (the script sets TZ=UTC0); POSIX
// touch takes whole seconds. Without -a times are not kept: "-".
func (cp *copier) touchTime(t time.Time) string {
	if !cp.archive {
		return "-"
	}
	return t.UTC().Format("200601021504.05")
}

// keptMode is the part of a source mode cp applies: the permission bits,
// with -a the setuid, setgid and sticky bits too.
func (cp *copier) keptMode(m fs.FileMode) fs.FileMode {
	if cp.archive {
		return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	}
	return m.Perm()
}

func relPath(root, p string) string {
	return strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
}

// archiveMeta is what cp keeps of a remote file beyond its bytes: its
// mode, and with -a its modification time (else zero).
type archiveMeta struct {
	mode  fs.FileMode
	mtime time.Time
}

// listScript lists a remote tree, NUL-separated: each path, the
// first ten characters of its ls -ld (type and permissions), and for a
// symlink its target. Unlike fs/walk it sees symlinks (dangling ones too).
// $1 is the root, $2 -P or -H (follow the root if a symlink: cp -L), then
// find's further arguments (-prune: the root only).
const listScript = `top=$1; opt=$2; shift 2
find $opt "$top" "$@" -exec sh -c '
top=$1; opt=$2; shift 2
for p; do
	if [ "$p" = "$top" ] && [ "$opt" = -H ]; then m=$(ls -ldnL "$p"); else m=$(ls -ldn "$p"); fi || exit 1
	printf "%s\0%.10s\0" "$p" "$m"
	case $m in l*) t=$(readlink "$p") || exit 1; printf "%s\0" "$t";; esac
done' sh "$top" "$opt" {} +`

// remoteEntry is one path of listScript's output.
type remoteEntry struct {
	path   string
	kind   byte // '-', 'd', 'l' or another ls type letter
	mode   fs.FileMode
	target string
}

// parseListing decodes listScript's output.
func parseListing(out []byte) ([]remoteEntry, error) {
	fields := strings.Split(string(out), "\x00")
	if len(fields) > 0 && fields[len(fields)-1] == "" {
		fields = fields[:len(fields)-1]
	}
	var ents []remoteEntry
	for i := 0; i < len(fields); {
		if i+1 >= len(fields) {
			return nil, fmt.Errorf("listing ends inside the entry of %q", fields[i])
		}
		kind, mode, err := parseModeString(fields[i+1])
		if err != nil {
			return nil, fmt.Errorf("%s: %v", fields[i], err)
		}
		e := remoteEntry{path: fields[i], kind: kind, mode: mode}
		i += 2
		if kind == 'l' {
			if i >= len(fields) {
				return nil, fmt.Errorf("listing ends before the target of %q", e.path)
			}
			e.target = fields[i]
			i++
		}
		ents = append(ents, e)
	}
	return ents, nil
}

// parseModeString decodes the type and permissions of ls -l ("drwxr-sr-t").
func parseModeString(s string) (kind byte, mode fs.FileMode, err error) {
	if len(s) != 10 {
		return 0, 0, fmt.Errorf("mode %q: want 10 characters", s)
	}
	kind = s[0]
	for i, c := range []byte(s[1:]) {
		bit := fs.FileMode(1) << (8 - i)
		want := "rwxrwxrwx"[i]
		switch {
		case c == '-':
		case c == want:
			mode |= bit
		case i == 2 && (c == 's' || c == 'S'):
			mode |= fs.ModeSetuid
			if c == 's' {
				mode |= bit
			}
		case i == 5 && (c == 's' || c == 'S'):
			mode |= fs.ModeSetgid
			if c == 's' {
				mode |= bit
			}
		case i == 8 && (c == 't' || c == 'T'):
			mode |= fs.ModeSticky
			if c == 't' {
				mode |= bit
			}
		default:
			return 0, 0, fmt.Errorf("mode %q: unexpected %q", s, c)
		}
	}
	return kind, mode, nil
}

// download copies a remote file, symlink or tree.
func (cp *copier) download(ctx context.Context, remote, local string) error {
	remote = path.Clean(remote)
	args := []string{remote, "-P"}
	if cp.follow {
		args[1] = "-H"
	}
	if !cp.recursive {
		args = append(args, "-prune")
	}
	out, err := cp.runSh(ctx, listScript, args)
	if err != nil {
		return fmt.Errorf("listing :%s on the server: %v", remote, err)
	}
	ents, err := parseListing(out)
	if err != nil {
		return fmt.Errorf("listing :%s: %v", remote, err)
	}
	if !cp.recursive && len(ents) > 0 && ents[0].kind == 'd' {
		return fmt.Errorf(":%s is a directory (use -r)", remote)
	}
	type dirMeta struct {
		local string
		meta  archiveMeta
	}
	var dirs []dirMeta
	for _, e := range ents {
		if e.path != remote && !strings.HasPrefix(e.path, strings.TrimSuffix(remote, "/")+"/") {
			return fmt.Errorf("the listing of :%s holds %q", remote, e.path)
		}
		target := local
		if e.path != remote {
			target = filepath.Join(local, filepath.FromSlash(relPath(remote, e.path)))
		}
		switch e.kind {
		case 'l':
			if err := replaceWithSymlink(e.target, target); err != nil {
				return err
			}
			continue
		case 'd', '-':
		default:
			cp.skip(":"+e.path, "not a regular file, directory or symlink")
			continue
		}
		fi, err := cp.cl.Stat(ctx, e.path)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			cp.skip(":"+e.path, describe(err))
			continue
		}
		meta := &archiveMeta{mode: cp.keptMode(e.mode), mtime: cp.mtime(fi.ModTime())}
		if e.kind == 'd' {
			// Writable for now, so that its contents can be made.
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dirMeta{target, *meta})
			continue
		}
		if err := cp.downloadFile(ctx, e.path, target, fi.Size(), meta); err != nil {
			return err
		}
	}
	// Deepest first: setting a directory's mode may make it read-only,
	// and making a child changes its parent's time.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := os.Chmod(d.local, d.meta.mode); err != nil {
			return err
		}
		if d.meta.mtime.IsZero() {
			continue
		}
		if err := os.Chtimes(d.local, time.Time{}, d.meta.mtime); err != nil {
			return err
		}
	}
	return nil
}

// mtime is t with -a, else zero (times are not kept).
func (cp *copier) mtime(t time.Time) time.Time {
	if cp.archive {
		return t
	}
	return time.Time{}
}

// replaceWithSymlink makes local a symlink to target, replacing what was
// there at once (a symlink made under a temporary name, then renamed).
func replaceWithSymlink(target, local string) error {
	tmp := tempName(local, filepath.Join, filepath.Dir, filepath.Base)
	if err := os.Symlink(filepath.FromSlash(target), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, local); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// downloadFile copies a remote file to local through a temporary file in
// local's directory, renamed over local once complete: a failed copy never
// leaves a truncated file under the final name. meta's mode is applied, and
// its modification time unless zero.
func (cp *copier) downloadFile(ctx context.Context, remote, local string, size int64, meta *archiveMeta) error {
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	bar := cp.bar(filepath.Base(local), size)
	_, err = cp.cl.Download(ctx, remote, tmp, bar.update)
	bar.finish(err)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf(":%s -> %s: %s", remote, local, describe(err))
	}
	mode := fs.FileMode(0o644)
	if meta != nil {
		mode = meta.mode
	} else if old, err := os.Stat(local); err == nil && old.Mode().IsRegular() {
		mode = old.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		return err
	}
	if meta != nil && !meta.mtime.IsZero() {
		if err := os.Chtimes(tmp.Name(), time.Time{}, meta.mtime); err != nil {
			return err
		}
	}
	return os.Rename(tmp.Name(), local)
}

package cli

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/protocol"
)

// A location is a cp operand: a remote absolute path (":/abs") or a local
// path ("-" is stdin/stdout).
type location struct {
	remote bool
	path   string
}

func parseLocation(s string) location {
	if rest, ok := strings.CutPrefix(s, ":"); ok {
		return location{remote: true, path: rest}
	}
	return location{path: s}
}

func (l location) String() string {
	if l.remote {
		return ":" + l.path
	}
	return l.path
}

// remotePath accepts an argument of ls or cat: ":/abs" or "/abs".
func remotePath(s string) (string, bool) {
	s = strings.TrimPrefix(s, ":")
	return path.Clean(s), path.IsAbs(s)
}

func (c *command) cat(ctx context.Context, args []string) int {
	fs := c.flags(":/FILE...")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return c.usageErr("no file given")
	}
	var files []string
	for _, a := range fs.Args() {
		p, ok := remotePath(a)
		if !ok {
			return c.usageErr("%q is not an absolute remote path (:/abs/path)", a)
		}
		files = append(files, p)
	}
	cl, code := c.dial(ctx)
	if cl == nil {
		return code
	}
	defer cl.Close()
	code = 0
	for _, f := range files {
		if _, err := cl.Download(ctx, f, c.stdout, nil); err != nil {
			code = c.fail(exitFailure, "%s: %s", f, describe(err))
		}
	}
	return code
}

func (c *command) ls(ctx context.Context, args []string) int {
	fs := c.flags("[-l] [-a] [:/DIR...]")
	long := fs.Bool("l", false, "long format: size, modification time (UTC), name")
	all := fs.Bool("a", false, "include names that start with a dot")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	var dirs []string
	for _, a := range fs.Args() {
		p, ok := remotePath(a)
		if !ok {
			return c.usageErr("%q is not an absolute remote path (:/abs/path)", a)
		}
		dirs = append(dirs, p)
	}
	cl, code := c.dial(ctx)
	if cl == nil {
		return code
	}
	defer cl.Close()
	if len(dirs) == 0 {
		dirs = []string{"/"}
		if cwd := cl.Info().Cwd; cwd != "" {
			if p, err := localPathOfURI(cwd); err == nil {
				dirs = []string{p}
			}
		}
	}
	code = 0
	for i, dir := range dirs {
		if len(dirs) > 1 {
			if i > 0 {
				fmt.Fprintln(c.stdout)
			}
			fmt.Fprintf(c.stdout, "%s:\n", dir)
		}
		if err := c.list(ctx, cl, dir, *long, *all); err != nil {
			code = c.fail(exitFailure, "%s: %s", dir, describe(err))
		}
	}
	return code
}

func (c *command) list(ctx context.Context, cl *client.Client, dir string, long, all bool) error {
	fi, err := cl.Stat(ctx, dir)
	if err != nil {
		return err
	}
	if !fi.IsDir {
		c.printEntry(fi, dir, long)
		return nil
	}
	ents, err := cl.ReadDir(ctx, dir)
	if err != nil {
		return err
	}
	var shown []client.DirEntry
	for _, e := range ents {
		if all || !strings.HasPrefix(e.Name, ".") {
			shown = append(shown, e)
		}
	}
	if !long {
		for _, e := range shown {
			name := e.Name
			if e.IsDir {
				name += "/"
			}
			fmt.Fprintln(c.stdout, name)
		}
		return nil
	}
	// Long format needs one fs/getMetadata per entry: run a few at once.
	infos := make([]*client.FileInfo, len(shown))
	errs := make([]error, len(shown))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, e := range shown {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			infos[i], errs[i] = cl.Stat(ctx, path.Join(dir, e.Name))
		}()
	}
	wg.Wait()
	for i, e := range shown {
		if errs[i] != nil {
			// Vanished since the listing: say so in place.
			fmt.Fprintf(c.stdout, "%12s  %-16s  %s\n", "?", "?", e.Name)
			continue
		}
		c.printEntry(infos[i], e.Name, true)
	}
	return nil
}

func (c *command) printEntry(fi *client.FileInfo, name string, long bool) {
	if fi.IsDir {
		name += "/"
	}
	if !long {
		fmt.Fprintln(c.stdout, name)
		return
	}
	fmt.Fprintf(c.stdout, "%12d  %s  %s\n", fi.Size, fi.ModTime.UTC().Format("2006-01-02 15:04"), name)
}

func localPathOfURI(u string) (string, error) { return fileuri.Parse(u) }

// progressMin is the size from which cp shows a progress bar on a terminal.
const progressMin = 1 << 20

func (c *command) cp(ctx context.Context, args []string) int {
	fs := c.flags("[-r] [-q] SRC... DST   (remote paths are :/abs/path)")
	recursive := fs.Bool("r", false, "copy directories recursively")
	quiet := fs.Bool("q", false, "no progress bar")
	if code, ok := c.parse(fs, args); !ok {
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
	cp := &copier{cmd: c, cl: cl, recursive: *recursive, progress: !*quiet && isTerminal(c.stderr)}
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
	return code
}

func joinPath(dir location, name string) string {
	if dir.remote {
		return path.Join(dir.path, name)
	}
	return filepath.Join(dir.path, name)
}

type copier struct {
	cmd       *command
	cl        *client.Client
	recursive bool
	progress  bool
}

func (cp *copier) isDir(ctx context.Context, l location) bool {
	if l.remote {
		fi, err := cp.cl.Stat(ctx, l.path)
		return err == nil && fi.IsDir
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
		if err := cp.cl.Copy(ctx, src.path, dst.path); err != nil {
			return fmt.Errorf("%s -> %s: %s", src, dst, describe(err))
		}
		return nil
	case dst.remote:
		return cp.upload(ctx, src.path, dst.path)
	case src.remote:
		return cp.download(ctx, src.path, dst.path)
	}
	return fmt.Errorf("%s -> %s: nothing remote", src, dst)
}

func (cp *copier) upload(ctx context.Context, local, remote string) error {
	if local == "-" {
		_, err := cp.cl.Upload(ctx, remote, cp.cmd.stdin, nil)
		if err != nil {
			return fmt.Errorf("- -> :%s: %s", remote, describe(err))
		}
		return nil
	}
	fi, err := os.Stat(local)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		if !cp.recursive {
			return fmt.Errorf("%s is a directory (use -r)", local)
		}
		return filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(local, p)
			target := path.Join(remote, filepath.ToSlash(rel))
			switch {
			case d.IsDir():
				if err := cp.cl.MkdirAll(ctx, target); err != nil {
					return fmt.Errorf(":%s: %s", target, describe(err))
				}
				return nil
			case d.Type().IsRegular():
				return cp.uploadFile(ctx, p, target)
			}
			fmt.Fprintf(cp.cmd.stderr, "exec-server cp: skipping %s: not a regular file or directory\n", p)
			return nil
		})
	}
	return cp.uploadFile(ctx, local, remote)
}

func (cp *copier) uploadFile(ctx context.Context, local, remote string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	bar := cp.bar(path.Base(remote), fi.Size())
	_, err = cp.cl.Upload(ctx, remote, f, bar.update)
	bar.finish(err)
	if err != nil {
		return fmt.Errorf("%s -> :%s: %s", local, remote, describe(err))
	}
	return nil
}

func (cp *copier) download(ctx context.Context, remote, local string) error {
	if local == "-" {
		if _, err := cp.cl.Download(ctx, remote, cp.cmd.stdout, nil); err != nil {
			return fmt.Errorf(":%s: %s", remote, describe(err))
		}
		return nil
	}
	fi, err := cp.cl.Stat(ctx, remote)
	if err != nil {
		return fmt.Errorf(":%s: %s", remote, describe(err))
	}
	if !fi.IsDir {
		return cp.downloadFile(ctx, remote, local, fi.Size)
	}
	if !cp.recursive {
		return fmt.Errorf(":%s is a directory (use -r)", remote)
	}
	w, err := cp.cl.Walk(ctx, remote, client.WalkOptions{})
	if err != nil {
		return fmt.Errorf(":%s: %s", remote, describe(err))
	}
	if w.Truncated {
		return fmt.Errorf(":%s: too many entries to copy in one walk", remote)
	}
	if err := os.MkdirAll(local, 0o755); err != nil {
		return err
	}
	// Directories first, so every file's parent exists.
	for _, kind := range []string{protocol.FsKindDirectory, protocol.FsKindFile} {
		for _, e := range w.Entries {
			if e.Kind != kind {
				continue
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(e.Path, remote), "/")
			target := filepath.Join(local, filepath.FromSlash(rel))
			if kind == protocol.FsKindDirectory {
				if err := os.MkdirAll(target, 0o755); err != nil {
					return err
				}
				continue
			}
			efi, err := cp.cl.Stat(ctx, e.Path)
			if err != nil {
				return fmt.Errorf(":%s: %s", e.Path, describe(err))
			}
			if err := cp.downloadFile(ctx, e.Path, target, efi.Size); err != nil {
				return err
			}
		}
	}
	for _, e := range w.Entries {
		if e.Kind != protocol.FsKindDirectory && e.Kind != protocol.FsKindFile {
			fmt.Fprintf(cp.cmd.stderr, "exec-server cp: skipping :%s: %s\n", e.Path, e.Kind)
		}
	}
	for p, msg := range w.Errors {
		fmt.Fprintf(cp.cmd.stderr, "exec-server cp: skipping :%s: %s\n", p, msg)
	}
	return nil
}

func (cp *copier) downloadFile(ctx context.Context, remote, local string, size int64) error {
	// Write to a temporary name and rename, so a failed copy never leaves
	// a truncated file under the final name.
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
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), local)
}

// progressBar draws one line on a terminal: name, percent, bar, amounts
// and rate. It is inert when disabled.
type progressBar struct {
	w        io.Writer
	name     string
	total    int64
	on       bool
	start    time.Time
	lastDraw time.Time
	done     int64
}

func (cp *copier) bar(name string, total int64) *progressBar {
	return &progressBar{w: cp.cmd.stderr, name: name, total: total, on: cp.progress && total >= progressMin, start: time.Now()}
}

func (b *progressBar) update(done int64) {
	if !b.on {
		return
	}
	b.done = done
	if now := time.Now(); now.Sub(b.lastDraw) >= 100*time.Millisecond || done == b.total {
		b.lastDraw = now
		b.draw()
	}
}

func (b *progressBar) draw() {
	const width = 30
	frac := 1.0
	if b.total > 0 {
		frac = float64(b.done) / float64(b.total)
	}
	filled := int(frac * width)
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	rate := float64(b.done) / max(time.Since(b.start).Seconds(), 0.001)
	name := b.name
	if len(name) > 24 {
		name = name[:21] + "..."
	}
	fmt.Fprintf(b.w, "\r%-24s %3.0f%% [%s] %s/%s %s/s\x1b[K", name, frac*100, bar, human(b.done), human(b.total), human(int64(rate)))
}

func (b *progressBar) finish(err error) {
	if !b.on {
		return
	}
	if err == nil {
		b.done = b.total
		b.draw()
	}
	fmt.Fprintln(b.w)
}

// human renders a byte count with a binary unit.
func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

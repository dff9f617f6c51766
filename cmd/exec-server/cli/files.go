package cli

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/fileuri"
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
	return c.eachPath(ctx, c.flags(":/FILE..."), args, "file", func(cl *client.Client, f string) error {
		_, err := cl.Download(ctx, f, c.stdout, nil)
		return err
	})
}

func (c *command) ls(ctx context.Context, args []string) int {
	fs := c.flags("[-l] [-a] [:/DIR...]")
	long := fs.BoolP("long", "l", false, "long format: mode, owner, size, time (UTC), name and link target (the server's ls -l)")
	all := fs.BoolP("all", "a", false, "include names that start with a dot")
	if code, ok := c.parse(fs, args, true); !ok {
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
	if long {
		// Mode, owner and link targets are not on the wire: the server's
		// own ls shows them (the metadata-only listing below if it has none).
		if out, ok := serverLs(ctx, cl, dir, all); ok {
			_, err := c.stdout.Write(out)
			return err
		}
	}
	if !fi.IsDir() {
		c.printEntry(fi, dir, long)
		return nil
	}
	ents, err := cl.ReadDir(ctx, dir)
	if err != nil {
		return err
	}
	var shown []fs.DirEntry
	for _, e := range ents {
		if all || !strings.HasPrefix(e.Name(), ".") {
			shown = append(shown, e)
		}
	}
	if !long {
		for _, e := range shown {
			name := e.Name()
			if e.IsDir() {
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
			infos[i], errs[i] = cl.Stat(ctx, path.Join(dir, e.Name()))
		}()
	}
	wg.Wait()
	for i, e := range shown {
		if errs[i] != nil {
			// Vanished since the listing: say so in place.
			fmt.Fprintf(c.stdout, "%12s  %-16s  %s\n", "?", "?", e.Name())
			continue
		}
		c.printEntry(infos[i], e.Name(), true)
	}
	return nil
}

func (c *command) printEntry(fi *client.FileInfo, name string, long bool) {
	if fi.IsDir() {
		name += "/"
	}
	if !long {
		fmt.Fprintln(c.stdout, name)
		return
	}
	fmt.Fprintf(c.stdout, "%12d  %s  %s\n", fi.Size(), fi.ModTime().UTC().Format("2006-01-02 15:04"), name)
}

func localPathOfURI(u string) (string, error) { return fileuri.Parse(u) }

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

// serverLs runs ls -l on the server (UTC times, numeric-free C locale):
// mode, links, owner, group, size, time, name and symlink targets. ok is
// false when it could not run (no /bin/sh or ls there).
func serverLs(ctx context.Context, cl *client.Client, dir string, all bool) ([]byte, bool) {
	flags := "-l"
	if all {
		flags = "-la"
	}
	var stderr strings.Builder
	out, code, err := cl.Output(ctx, client.Cmd{
		Argv:       []string{"/bin/sh", "-c", `exec ls "$1" -- "$2"`, "sh", flags, dir},
		Env:        map[string]string{"LC_ALL": "C", "TZ": "UTC0"},
		InheritEnv: "core",
		Stderr:     &stderr,
	})
	if err != nil || code != 0 {
		return nil, false
	}
	return out, true
}

// rm, mkdir and mv: the remote file operations of coreutils, on the
// protocol's fs/remove and fs/createDirectory (mv: client.Rename).
func (c *command) rm(ctx context.Context, args []string) int {
	fs := c.flags("[-r] [-f] :/PATH...")
	recursive := fs.BoolP("recursive", "r", false, "remove directories and their contents")
	force := fs.BoolP("force", "f", false, "ignore missing paths")
	return c.eachPath(ctx, fs, args, "path", func(cl *client.Client, p string) error {
		if p == "/" {
			return fmt.Errorf("refusing to remove /")
		}
		if *recursive {
			if !*force {
				if _, err := cl.Stat(ctx, p); err != nil {
					return err
				}
			}
			return cl.RemoveAll(ctx, p)
		}
		err := cl.Remove(ctx, p)
		if *force && isNotFound(err) {
			return nil
		}
		return err
	})
}

func (c *command) mkdir(ctx context.Context, args []string) int {
	fs := c.flags("[-p] :/DIR...")
	parents := fs.BoolP("parents", "p", false, "make parent directories as needed; an existing directory is fine")
	return c.eachPath(ctx, fs, args, "path", func(cl *client.Client, p string) error {
		if *parents {
			return cl.MkdirAll(ctx, p)
		}
		return cl.Mkdir(ctx, p)
	})
}

func (c *command) mv(ctx context.Context, args []string) int {
	fs := c.flags(":/SRC :/DST")
	if code, ok := c.parse(fs, args, true); !ok {
		return code
	}
	if fs.NArg() != 2 {
		return c.usageErr("want SRC and DST")
	}
	var ps [2]string
	for i, a := range fs.Args() {
		p, ok := remotePath(a)
		if !ok {
			return c.usageErr("%q is not an absolute remote path (:/abs/path)", a)
		}
		ps[i] = p
	}
	cl, code := c.dial(ctx)
	if cl == nil {
		return code
	}
	defer cl.Close()
	if err := cl.Rename(ctx, ps[0], ps[1]); err != nil {
		return c.fail(exitFailure, "%s -> %s: %s", ps[0], ps[1], describe(err))
	}
	return 0
}

// eachPath parses remote path operands (noun names them in the usage error) and runs op on each; a failure is
// reported naming the path, and the rest still run (exit 1 then).
func (c *command) eachPath(ctx context.Context, fs *pflag.FlagSet, args []string, noun string, op func(*client.Client, string) error) int {
	if code, ok := c.parse(fs, args, true); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return c.usageErr("no %s given", noun)
	}
	var paths []string
	for _, a := range fs.Args() {
		p, ok := remotePath(a)
		if !ok {
			return c.usageErr("%q is not an absolute remote path (:/abs/path)", a)
		}
		paths = append(paths, p)
	}
	cl, code := c.dial(ctx)
	if cl == nil {
		return code
	}
	defer cl.Close()
	code = 0
	for _, p := range paths {
		if err := op(cl, p); err != nil {
			code = c.fail(exitFailure, "%s: %s", p, describe(err))
		}
	}
	return code
}

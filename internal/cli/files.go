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
	fs := c.flags(":/FILE...")
	if code, ok := c.parse(fs, args, true); !ok {
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
	long := fs.BoolP("long", "l", false, "long format: size, modification time (UTC), name")
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

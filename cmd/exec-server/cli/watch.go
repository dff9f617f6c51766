package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// watch prints the changes under a path on the server's machine (fs/watch,
// an extension of this project's server), one line per change, "KIND\tPATH";
// a lost stretch of changes prints "overflow\t-". It runs until interrupted
// or, with --count, until that many lines were printed.
func (c *command) watch(ctx context.Context, args []string) int {
	fs := c.flags("[-r] [--count N] [:]/PATH")
	recursive := fs.BoolP("recursive", "r", false, "watch everything under PATH")
	count := fs.Int("count", 0, "exit after `N` changes (0: run until interrupted)")
	if code, ok := c.parse(fs, args, true); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return c.usageErr("want one PATH")
	}
	cl, code := c.dial(ctx)
	if cl == nil {
		return code
	}
	defer cl.Close()
	// ":/path" as in cp; the colon is optional as for ls and cat.
	w, err := cl.Watch(ctx, strings.TrimPrefix(fs.Arg(0), ":"), *recursive)
	if errors.Is(err, errors.ErrUnsupported) {
		return c.fail(exitFailure, "the server cannot watch paths (no fs/watch)")
	}
	if err != nil {
		return c.fail(exitRemote, "%s", describe(err))
	}
	defer w.Close()
	printed := 0
	for {
		select {
		case <-ctx.Done():
			return 0
		case cs, ok := <-w.Changes():
			if !ok {
				return c.fail(exitRemote, "watch ended: %s", describe(w.Err()))
			}
			lines := make([]string, 0, len(cs.Changes)+1)
			for _, ch := range cs.Changes {
				lines = append(lines, ch.Kind+"\t"+ch.Path)
			}
			if cs.Overflow {
				lines = append(lines, "overflow\t-")
			}
			for _, l := range lines {
				if _, err := fmt.Fprintln(c.stdout, l); err != nil {
					return c.fail(exitFailure, "writing: %v", err)
				}
				printed++
				if *count > 0 && printed >= *count {
					return 0
				}
			}
		}
	}
}

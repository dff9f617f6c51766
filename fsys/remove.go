package fsys

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/execgo/exec-server/protocol"
)

func (f *FS) remove(ctx context.Context, _ *Handles, raw json.RawMessage) (any, error) {
	var p protocol.FsRemoveParams
	if err := protocol.DecodeParams(raw, &p, "WireFsRemoveParams", "path"); err != nil {
		return nil, err
	}
	path, err := parsePath(p.Path)
	if err != nil {
		return nil, err
	}
	if err := checkSandbox(p.Sandbox); err != nil {
		return nil, err
	}
	recursive := p.Recursive == nil || *p.Recursive
	force := p.Force == nil || *p.Force
	if path == "/" {
		return nil, refuseRemove(path, "it is the root directory")
	}
	st, err := os.Lstat(path)
	if err != nil {
		if force && errors.Is(err, fs.ErrNotExist) {
			return protocol.Empty{}, nil
		}
		return nil, err
	}
	// The guard looks at the canonical path: a symlinked parent or ".."
	// cannot smuggle "/" or a mount point past it. The last component is
	// not resolved because a symlink itself is what gets removed.
	parent, err := realpath(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	canon := filepath.Join(parent, filepath.Base(path))
	if canon == "/" {
		return nil, refuseRemove(path, "it is the root directory")
	}
	mounts, err := f.mounts.load()
	if err != nil {
		return nil, protocol.Internal("fs/remove: cannot read the mount table: %v", err)
	}
	if mounts[canon] {
		return nil, refuseRemove(path, "it is the root of a mounted filesystem")
	}
	if !st.IsDir() {
		return protocol.Empty{}, os.Remove(path)
	}
	if !recursive {
		return protocol.Empty{}, syscall.Rmdir(path)
	}
	for m := range mounts {
		if strings.HasPrefix(m, canon+"/") {
			return nil, refuseRemove(path, "a filesystem is mounted inside it at `"+m+"`")
		}
	}
	return protocol.Empty{}, removeTree(ctx, path, devOf(st))
}

func refuseRemove(path, why string) error {
	return protocol.InvalidRequest("fs/remove refuses to remove `%s`: %s", path, why)
}

func devOf(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Dev
	}
	return 0
}

// removeTree removes the directory p and everything below it, checking ctx
// between entries. It never follows symlinks and never crosses into another
// filesystem (a different st_dev), whatever the mount table said.
func removeTree(ctx context.Context, p string, dev uint64) error {
	dir, err := os.Open(p)
	if err != nil {
		return ignoreNotExist(err)
	}
	for {
		if err := ctx.Err(); err != nil {
			dir.Close()
			return err
		}
		ents, rerr := dir.ReadDir(256)
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				dir.Close()
				return err
			}
			child := filepath.Join(p, e.Name())
			if !e.IsDir() {
				if err := ignoreNotExist(os.Remove(child)); err != nil {
					dir.Close()
					return err
				}
				continue
			}
			st, err := os.Lstat(child)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				dir.Close()
				return err
			}
			if devOf(st) != dev {
				dir.Close()
				return refuseRemove(child, "it is on another filesystem")
			}
			if err := removeTree(ctx, child, dev); err != nil {
				dir.Close()
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			dir.Close()
			return unwrapSyscall(rerr)
		}
	}
	dir.Close()
	return ignoreNotExist(syscall.Rmdir(p))
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// mountTable reads the mount points from a mountinfo file each time it is
// asked: mounts change, and fs/remove of a directory is rare enough.
type mountTable struct{ path string }

func (t mountTable) load() (map[string]bool, error) {
	f, err := os.Open(t.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts := make(map[string]bool)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// Fields: id parent major:minor root mountpoint options ...
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 {
			mounts[unescapeMount(fields[4])] = true
		}
	}
	return mounts, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

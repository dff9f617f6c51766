package fsys

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/protocol"
)

func (f *FS) walk(ctx context.Context, _ *Handles, raw json.RawMessage) (any, error) {
	var p struct {
		Path    string          `json:"path"`
		Options json.RawMessage `json:"options"`
		Sandbox json.RawMessage `json:"sandbox"`
	}
	if err := jsonscan.DecodeParams(raw, &p, "WireFsWalkParams", "path"); err != nil {
		return nil, err
	}
	path, err := parsePath(p.Path)
	if err != nil {
		return nil, err
	}
	if p.Options == nil {
		return nil, protocol.InvalidParams("missing field `options`")
	}
	var opts protocol.FsWalkOptions
	if err := jsonscan.DecodeParams(p.Options, &opts, "WalkOptions", "maxDepth", "maxDirectories", "maxEntries", "followDirectorySymlinks"); err != nil {
		return nil, err
	}
	plan, err := f.confinement(protocol.MethodFsWalk, p.Sandbox, opRead)
	if err != nil {
		return nil, err
	}
	if opts.MaxDepth > protocol.FsWalkMaxDepth || opts.MaxDirectories > protocol.FsWalkMaxDirectories || opts.MaxEntries > protocol.FsWalkMaxEntries {
		return nil, protocol.InvalidRequest("filesystem walk limits exceed maximums: depth=%d, directories=%d, entries=%d",
			protocol.FsWalkMaxDepth, protocol.FsWalkMaxDirectories, protocol.FsWalkMaxEntries)
	}
	if opts.MaxDirectories == 0 || opts.MaxEntries == 0 {
		return nil, protocol.InvalidRequest("filesystem walk limits must be greater than zero")
	}
	if plan != nil {
		return f.callConfined(ctx, plan, protocol.MethodFsWalk, raw)
	}
	return walkTree(ctx, path, opts)
}

type walkDir struct {
	path  string
	depth uint64
}

type fileID struct{ dev, ino uint64 }

func idOf(st os.FileInfo) fileID {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return fileID{s.Dev, s.Ino}
	}
	return fileID{}
}

// walkTree lists the tree under root breadth first, each directory's names
// in byte order, as the reference does:
//   - the root is read if it is a directory (a symlink to one only when
//     following symlinks); anything else gives an empty result;
//   - an entry whose target cannot be stat'ed (a dangling link) is skipped
//     silently and not counted; every other entry counts against maxEntries,
//     and the walk stops, truncated, at the first entry over the limit;
//   - regular files and directories are listed; symlinks to files, FIFOs,
//     sockets and devices are not; a symlink to a directory is listed (and
//     descended) only when following symlinks;
//   - the root has depth 0 and a directory at depth d is read while
//     d <= maxDepth; each read counts against maxDirectories;
//   - a directory already read (same device and inode) is not read again;
//   - a directory that cannot be read goes to errors and the walk goes on.
func walkTree(ctx context.Context, root string, opts protocol.FsWalkOptions) (*protocol.FsWalkResult, error) {
	res := &protocol.FsWalkResult{Entries: []protocol.FsWalkEntry{}, Errors: []protocol.FsWalkError{}}
	lst, err := os.Lstat(root)
	if err != nil {
		return nil, err
	}
	st := lst
	if lst.Mode()&fs.ModeSymlink != 0 {
		if !opts.FollowDirectorySymlinks {
			return res, nil
		}
		if st, err = os.Stat(root); err != nil {
			return nil, err
		}
	}
	if !st.IsDir() {
		return res, nil
	}
	seen := map[fileID]bool{idOf(st): true}
	queue := []walkDir{{path: root}}
	var dirsRead, entriesSeen uint64
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if dirsRead >= opts.MaxDirectories {
			res.Truncated = true
			break
		}
		dirsRead++
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ents, err := readDirSorted(d.path)
		if err != nil {
			res.Errors = append(res.Errors, protocol.FsWalkError{Path: fileuri.FromPath(d.path), Message: protocol.FromOSError(err).Message})
			continue
		}
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			child := filepath.Join(d.path, e.Name())
			isLink := e.Type()&fs.ModeSymlink != 0
			// Only a symlink needs a stat here; the directory entry's type
			// is enough for everything else.
			typ := e.Type()
			if isLink {
				cst, err := os.Stat(child)
				if err != nil {
					continue
				}
				typ = cst.Mode().Type()
			}
			entriesSeen++
			if entriesSeen > opts.MaxEntries {
				res.Truncated = true
				return res, nil
			}
			switch {
			case typ.IsDir():
				if isLink && !opts.FollowDirectorySymlinks {
					continue
				}
				res.Entries = append(res.Entries, protocol.FsWalkEntry{Path: fileuri.FromPath(child), Kind: protocol.FsKindDirectory})
				if d.depth+1 > opts.MaxDepth {
					continue
				}
				cst, err := os.Stat(child)
				if err != nil {
					continue
				}
				if id := idOf(cst); !seen[id] {
					seen[id] = true
					queue = append(queue, walkDir{path: child, depth: d.depth + 1})
				}
			case typ.IsRegular() && !isLink:
				res.Entries = append(res.Entries, protocol.FsWalkEntry{Path: fileuri.FromPath(child), Kind: protocol.FsKindFile})
			}
		}
	}
	return res, nil
}

func readDirSorted(p string) ([]os.DirEntry, error) {
	dir, err := openDir(p)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	ents, err := dir.ReadDir(-1)
	if err != nil {
		return nil, unwrapSyscall(err)
	}
	slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

package fsys

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/protocol"
)

func (f *FS) copy(ctx context.Context, _ *Handles, raw json.RawMessage) (any, error) {
	var p struct {
		SourcePath      string          `json:"sourcePath"`
		DestinationPath string          `json:"destinationPath"`
		Recursive       json.RawMessage `json:"recursive"`
		Sandbox         json.RawMessage `json:"sandbox"`
	}
	if err := jsonscan.DecodeParams(raw, &p, "WireFsCopyParams", "sourcePath", "destinationPath"); err != nil {
		return nil, err
	}
	src, err := parsePath(p.SourcePath)
	if err != nil {
		return nil, err
	}
	dst, err := parsePath(p.DestinationPath)
	if err != nil {
		return nil, err
	}
	// recursive is required (decisions.md 9); null is a type error, as in
	// the reference.
	var recursive bool
	switch {
	case p.Recursive == nil:
		return nil, protocol.InvalidParams("missing field `recursive`")
	case bytes.Equal(p.Recursive, []byte("null")):
		return nil, protocol.InvalidParams("invalid type: null, expected a boolean")
	default:
		if err := json.Unmarshal(p.Recursive, &recursive); err != nil {
			return nil, protocol.InvalidParams("invalid type: expected a boolean for field `recursive`")
		}
	}
	plan, err := f.confinement(protocol.MethodFsCopy, p.Sandbox, opWrite)
	if err != nil {
		return nil, err
	}
	if plan != nil {
		return f.callConfined(ctx, plan, protocol.MethodFsCopy, raw)
	}
	g := f.deny
	st, err := os.Lstat(src)
	if err != nil {
		return nil, err
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		return protocol.Empty{}, copySymlink(src, dst, g)
	case st.IsDir():
		if !recursive {
			return nil, protocol.InvalidRequest("fs/copy requires recursive: true when sourcePath is a directory")
		}
		srcReal, err := realpath(src)
		if err != nil {
			return nil, err
		}
		dstReal, err := resolveDest(dst)
		if err != nil {
			return nil, err
		}
		if dstReal == srcReal || strings.HasPrefix(dstReal, strings.TrimSuffix(srcReal, "/")+"/") {
			return nil, protocol.InvalidRequest("fs/copy cannot copy a directory to itself or one of its descendants")
		}
		return protocol.Empty{}, copyTree(ctx, src, dst, st, g)
	case st.Mode().IsRegular():
		return protocol.Empty{}, copyFile(ctx, src, dst, st, g)
	default:
		return nil, protocol.InvalidRequest("fs/copy only supports regular files, directories, and symlinks")
	}
}

// resolveDest canonicalises a destination that may not exist yet: its
// parent must exist (else ENOENT, as the reference).
func resolveDest(dst string) (string, error) {
	if real, err := realpath(dst); err == nil {
		return real, nil
	}
	parent, err := realpath(filepath.Dir(dst))
	if err != nil {
		return "", err
	}
	return filepath.Join(parent, filepath.Base(dst)), nil
}

func copySymlink(src, dst string, g guard) error {
	target, err := os.Readlink(src)
	if err != nil {
		return err
	}
	if err := g.create(dst); err != nil {
		return err
	}
	return os.Symlink(target, dst)
}

// copyTree copies the directory src onto dst, merging into an existing
// directory. Symlinks are copied as links; FIFOs, sockets and devices inside
// the tree are skipped, as the reference does. ctx is checked per entry;
// g per path made.
func copyTree(ctx context.Context, src, dst string, st os.FileInfo, g guard) error {
	if err := g.create(dst); err != nil {
		return err
	}
	dir, err := openDir(src)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := os.Mkdir(dst, st.Mode().Perm()|0o700); err != nil {
		if !errors.Is(err, fs.ErrExist) || !isDirNoFollow(dst) {
			return err
		}
	}
	for {
		ents, rerr := dir.ReadDir(256)
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return err
			}
			s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
			info, err := e.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return err
			}
			switch {
			case info.Mode()&fs.ModeSymlink != 0:
				err = copySymlink(s, d, g)
			case info.IsDir():
				err = copyTree(ctx, s, d, info, g)
			case info.Mode().IsRegular():
				err = copyFile(ctx, s, d, info, g)
			}
			if err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return unwrapSyscall(rerr)
		}
	}
	// The directory's own permissions last, so a read-only source
	// directory does not stop its own copy from being filled.
	return os.Chmod(dst, st.Mode().Perm())
}

func isDirNoFollow(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.IsDir()
}

// copyFile copies a regular file with its permission bits. Copying a file
// onto itself is a no-op (the reference truncates it to nothing). The
// destination is truncated only once it is known to be a regular file.
// The data moves with copy_file_range where the kernel allows, in pieces
// so that ctx is honoured.
func copyFile(ctx context.Context, src, dst string, st os.FileInfo, g guard) error {
	in, _, err := openRegular(src, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer in.Close()
	if dstSt, err := os.Stat(dst); err == nil && os.SameFile(st, dstSt) {
		return nil
	}
	if err := g.create(dst); err != nil {
		return err
	}
	out, outSt, err := openRegular(dst, os.O_WRONLY|os.O_CREATE)
	if err != nil {
		return err
	}
	if os.SameFile(st, outSt) {
		return out.Close()
	}
	if err := out.Truncate(0); err != nil {
		out.Close()
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			out.Close()
			return err
		}
		n, err := out.ReadFrom(&io.LimitedReader{R: in, N: 64 << 20})
		if err != nil {
			out.Close()
			return err
		}
		if n == 0 {
			break
		}
	}
	if err := out.Chmod(st.Mode().Perm()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

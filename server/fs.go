package server

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/execgo/exec-server/fsys"
)

// fsHandles is one connection's table of open fs handles.
type fsHandles = *fsys.Handles

// fsService is the seam to the filesystem family.
type fsService struct {
	fs    *fsys.FS
	names []string
}

// newFS wires the filesystem family (fsys) into the server.
func newFS(cfg Config) fsService {
	f := fsys.New(fsys.Options{MaxFileBytes: cfg.MaxFileBytes, MaxHandles: cfg.MaxHandles})
	return fsService{fs: f, names: f.Methods()}
}

func (f fsService) methods() []string { return f.names }

func (f fsService) has(name string) bool { return slices.Contains(f.names, name) }

func (f fsService) newHandles() fsHandles { return f.fs.NewHandles() }

func (f fsService) call(ctx context.Context, h fsHandles, method string, params json.RawMessage) (any, error) {
	return f.fs.Call(ctx, h, method, params)
}

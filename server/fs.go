package server

import (
	"context"
	"encoding/json"
	"slices"
)

// fsHandles is one connection's table of open fs handles.
type fsHandles interface{ CloseAll() }

// fsService is the seam to the filesystem family.
type fsService struct {
	names []string
	newH  func() fsHandles
	run   func(ctx context.Context, h fsHandles, method string, params json.RawMessage) (any, error)
}

func (f fsService) methods() []string { return f.names }

func (f fsService) has(name string) bool { return slices.Contains(f.names, name) }

func (f fsService) newHandles() fsHandles {
	if f.newH == nil {
		return nil
	}
	return f.newH()
}

func (f fsService) call(ctx context.Context, h fsHandles, method string, params json.RawMessage) (any, error) {
	return f.run(ctx, h, method, params)
}

// newFS wires the filesystem family (fsys) into the server.
func newFS(cfg Config) fsService {
	return fsService{}
}

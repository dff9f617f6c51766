package server

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/fswatch"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
)

// watches is one connection's watch state. Watches belong to the
// connection: their notifications can only go to it, and they end with it.
type watches struct {
	mu      sync.Mutex
	missing *fswatch.Missing
	tree    *fswatch.Tree
	closed  bool
}

// missingFor returns the connection's fs/watchMissing state, created on
// first use so that connections that never watch hold no inotify fd.
func (cs *connState) missingFor() *fswatch.Missing {
	w := &cs.watches
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.missing == nil {
		w.missing = fswatch.NewMissing(func(id uint64) {
			frame := append(jsonrpc.GetBuffer(), `{"method":"`+protocol.NotifyFsMissingChanged+`","params":{"watchId":`...)
			frame = strconv.AppendUint(frame, id, 10)
			frame = append(frame, "}}"...)
			_ = cs.conn.Send(cs.conn.Context(), frame)
		})
		if w.closed {
			w.missing.Close()
		}
	}
	return w.missing
}

// closeWatches ends every watch of the connection and waits for their
// goroutines.
func (cs *connState) closeWatches() {
	w := &cs.watches
	w.mu.Lock()
	w.closed = true
	m, t := w.missing, w.tree
	w.mu.Unlock()
	if m != nil {
		m.Close()
	}
	if t != nil {
		t.Close()
	}
}

// treeFor returns the connection's fs/watch state, created on first use.
func (cs *connState) treeFor() *fswatch.Tree {
	w := &cs.watches
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tree == nil {
		// The package's defaults bound it (README "Filesystem watches").
		w.tree = fswatch.NewTree(fswatch.Options{}, func(b fswatch.Batch) {
			_ = cs.conn.Send(cs.conn.Context(), encodeChanged(jsonrpc.GetBuffer(), b))
		})
		if w.closed {
			w.tree.Close()
		}
	}
	return w.tree
}

// encodeChanged writes an fs/changed notification; paths are file URIs,
// as everywhere in the protocol.
func encodeChanged(dst []byte, b fswatch.Batch) []byte {
	dst = append(dst, `{"method":"`+protocol.NotifyFsChanged+`","params":{"watchId":`...)
	dst = jsonrpc.AppendString(dst, b.WatchID)
	dst = append(dst, `,"changes":[`...)
	for i, c := range b.Changes {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"path":`...)
		dst = jsonrpc.AppendString(dst, fileuri.FromPath(c.Path))
		dst = append(dst, `,"kind":"`...)
		dst = append(dst, c.Kind...)
		dst = append(dst, `"}`...)
	}
	dst = append(dst, ']')
	if b.Overflow {
		dst = append(dst, `,"overflow":true`...)
	}
	return append(dst, "}}"...)
}

func (s *Server) watchMethods(m map[string]method) {
	m[protocol.MethodFsWatchMissing] = method{
		family: familyFilesystem, inline: true,
		decode: func(raw json.RawMessage) (any, error) {
			p, err := fswatch.DecodeMissingParams(raw)
			if err != nil {
				return nil, err
			}
			return &p, nil
		},
		call: func(_ context.Context, cs *connState, p any) (any, error) {
			ok, err := cs.missingFor().Watch(*p.(*fswatch.MissingParams))
			if err != nil {
				return nil, err
			}
			return protocol.FsWatchMissingResult{Watching: ok}, nil
		},
	}
	// fs/watch runs on the read loop, as fs/unwatch does, so that an
	// fs/unwatch pipelined behind it finds the watch.
	m[protocol.MethodFsWatch] = method{
		family: familyFilesystem, inline: true,
		decode: func(raw json.RawMessage) (any, error) {
			p, err := fswatch.DecodeWatchParams(raw)
			if err != nil {
				return nil, err
			}
			return &p, nil
		},
		call: func(_ context.Context, cs *connState, p any) (any, error) {
			w := p.(*protocol.FsWatchParams)
			if err := cs.treeFor().Watch(w.WatchID, w.Path, w.Recursive); err != nil {
				return nil, err
			}
			return protocol.Empty{}, nil
		},
	}
	m[protocol.MethodFsUnwatch] = method{
		family: familyFilesystem, inline: true,
		decode: func(raw json.RawMessage) (any, error) {
			p, err := fswatch.DecodeUnwatchParams(raw)
			if err != nil {
				return nil, err
			}
			return &p, nil
		},
		call: func(_ context.Context, cs *connState, p any) (any, error) {
			if err := cs.treeFor().Unwatch(p.(*protocol.FsUnwatchParams).WatchID); err != nil {
				return nil, err
			}
			return protocol.Empty{}, nil
		},
	}
}

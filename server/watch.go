package server

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/execgo/exec-server/fswatch"
	"github.com/execgo/exec-server/jsonrpc"
)

// Watch methods: fs/watchMissing is the reference's; fs/watch and
// fs/unwatch are this server's extension (README "Filesystem watches").
const (
	methodFsWatchMissing   = "fs/watchMissing"
	methodFsMissingChanged = "fs/missingChanged"
)

// watches is one connection's watch state. Watches belong to the
// connection: their notifications can only go to it, and they end with it.
type watches struct {
	mu      sync.Mutex
	missing *fswatch.Missing
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
			frame := append(jsonrpc.GetBuffer(), `{"method":"`+methodFsMissingChanged+`","params":{"watchId":`...)
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
	m := w.missing
	w.mu.Unlock()
	if m != nil {
		m.Close()
	}
}

type watchingResult struct {
	Watching bool `json:"watching"`
}

func (s *Server) watchMethods(m map[string]method) {
	m[methodFsWatchMissing] = method{
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
			return watchingResult{Watching: ok}, nil
		},
	}
}

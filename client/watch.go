package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/protocol"
)

// Filesystem watches (fs/watch, fs/changed, fs/unwatch): an extension of
// this project's server (README "Filesystem watches"); other servers make
// Watch fail with errors.ErrUnsupported.

// Change kinds, as the server reports them.
const (
	ChangeCreated  = "created"
	ChangeModified = "modified"
	ChangeRemoved  = "removed"
	ChangeRenamed  = "renamed"
)

// Change is one path that changed.
type Change struct {
	Path string // absolute path on the server's machine
	Kind string // ChangeCreated, ChangeModified, ChangeRemoved or ChangeRenamed
}

// ChangeSet is what one fs/changed notification carried. Overflow says that
// changes were lost (the server's kernel queue overflowed, the connection
// was replaced, or this Watch's buffer was full): rescan what matters.
type ChangeSet struct {
	Changes  []Change
	Overflow bool
}

// WatchBuffer is how many change sets a Watch holds for a reader that has
// fallen behind; past it, sets are dropped and the next one delivered says
// Overflow.
const WatchBuffer = 1024

// Watch is one fs/watch on the server. Its change sets arrive on Changes
// until Close; the channel is closed then, or when the client is closed,
// gives up reconnecting (within Options.ReconnectTimeout, or RefusedTimeout)
// or the watch cannot be restored after a reconnect (Err says why).
type Watch struct {
	c         *Client
	id        string
	path      string
	recursive bool
	ch        chan ChangeSet

	mu      sync.Mutex
	queue   []ChangeSet
	wake    chan struct{}
	closed  bool
	err     error
	stopped chan struct{}
}

// Changes delivers the watch's change sets in the order the server sent
// them.
func (w *Watch) Changes() <-chan ChangeSet { return w.ch }

// Path is the watched path.
func (w *Watch) Path() string { return w.path }

// Err is why the watch ended, nil while it runs or after Close.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// watchRegistry holds each client's live watches, to route fs/changed and
// to set the watches again on a new connection (the server's watches end
// with the connection that made them).
var (
	watchRegistry sync.Map // *Client → *clientWatches
	watchSeq      atomic.Uint64
)

type clientWatches struct {
	mu   sync.Mutex
	byID map[string]*Watch
	gen  uint64 // connection generation the watches were set on
}

func (c *Client) watches() *clientWatches {
	if v, ok := watchRegistry.Load(c); ok {
		return v.(*clientWatches)
	}
	v, loaded := watchRegistry.LoadOrStore(c, &clientWatches{byID: map[string]*Watch{}})
	if !loaded {
		// The client's context ends at Close: its watches end with it.
		go func() {
			<-c.ctx.Done()
			cw := v.(*clientWatches)
			cw.mu.Lock()
			ws := cw.byID
			cw.byID = map[string]*Watch{}
			cw.mu.Unlock()
			for _, w := range ws {
				w.end(ErrClosed)
			}
			watchRegistry.Delete(c)
		}()
	}
	return v.(*clientWatches)
}

// Watch watches path (an absolute path on the server's machine), and with
// recursive everything under it. ctx bounds the request only.
func (c *Client) Watch(ctx context.Context, path string, recursive bool) (*Watch, error) {
	u, err := uri("watch", path)
	if err != nil {
		return nil, err
	}
	w := &Watch{
		c: c, id: fmt.Sprintf("%s-w%d", c.idPrefix, watchSeq.Add(1)), path: path, recursive: recursive,
		ch: make(chan ChangeSet), wake: make(chan struct{}, 1), stopped: make(chan struct{}),
	}
	cw := c.watches()
	// Registered first: a change may be reported before the reply.
	cw.mu.Lock()
	cw.byID[w.id] = w
	cw.mu.Unlock()
	if err := c.extension(ctx, protocol.MethodFsWatch, map[string]any{"watchId": w.id, "path": u, "recursive": recursive}, nil, true); err != nil {
		cw.mu.Lock()
		delete(cw.byID, w.id)
		cw.mu.Unlock()
		return nil, err
	}
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	cw.mu.Lock()
	if cw.gen == 0 {
		cw.gen = gen
	}
	cw.mu.Unlock()
	go w.deliver()
	return w, nil
}

// endWatches ends every watch of a Client that gave up (lost connection
// or session): their Changes close and Err says why.
func (c *Client) endWatches(err error) {
	v, ok := watchRegistry.Load(c)
	if !ok {
		return
	}
	cw := v.(*clientWatches)
	cw.mu.Lock()
	ws := cw.byID
	cw.byID = map[string]*Watch{}
	cw.mu.Unlock()
	for _, w := range ws {
		w.end(err)
	}
}

// Close ends the watch (fs/unwatch) and closes Changes.
func (w *Watch) Close() error {
	cw := w.c.watches()
	cw.mu.Lock()
	_, live := cw.byID[w.id]
	delete(cw.byID, w.id)
	cw.mu.Unlock()
	if !live {
		return nil
	}
	w.end(nil)
	ctx, cancel := context.WithTimeout(w.c.ctx, w.c.opts.ReconnectTimeout)
	defer cancel()
	err := w.c.extension(ctx, protocol.MethodFsUnwatch, map[string]any{"watchId": w.id}, nil, false)
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrSessionLost) {
		return nil // the server's watch went with the connection
	}
	return err
}

// end stops delivery; err (nil for Close) is what Err reports.
func (w *Watch) end(err error) {
	w.mu.Lock()
	if !w.closed {
		w.closed, w.err = true, err
		close(w.stopped)
	}
	w.mu.Unlock()
}

// push queues a change set; it runs on the read loop and never blocks.
func (w *Watch) push(cs ChangeSet) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	if len(w.queue) >= WatchBuffer {
		w.queue[len(w.queue)-1].Overflow = true
	} else {
		w.queue = append(w.queue, cs)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// deliver hands queued sets to the reader, and closes Changes at the end.
func (w *Watch) deliver() {
	defer close(w.ch)
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.mu.Unlock()
			select {
			case <-w.wake:
				continue
			case <-w.stopped:
				return
			}
		}
		next := w.queue[0]
		w.mu.Unlock()
		select {
		case w.ch <- next:
			w.mu.Lock()
			w.queue = w.queue[1:]
			w.mu.Unlock()
		case <-w.stopped:
			return
		}
	}
}

// extNotify routes the notifications of this project's extensions; it runs
// on the read loop (Client.onNotify) and must not block.
func (c *Client) extNotify(method string, params json.RawMessage) {
	if method != protocol.NotifyFsChanged {
		return
	}
	var n protocol.FsChangedNotification
	if err := json.Unmarshal(params, &n); err != nil {
		c.opts.Logger.Debug("exec-server client: undecodable fs/changed", "err", err)
		return
	}
	v, ok := watchRegistry.Load(c)
	if !ok {
		return
	}
	cw := v.(*clientWatches)
	cw.mu.Lock()
	w := cw.byID[n.WatchID]
	cw.mu.Unlock()
	if w == nil {
		return
	}
	cs := ChangeSet{Overflow: n.Overflow, Changes: make([]Change, 0, len(n.Changes))}
	for _, ch := range n.Changes {
		p, err := fileuri.Parse(ch.Path)
		if err != nil {
			p = ch.Path
		}
		cs.Changes = append(cs.Changes, Change{Path: p, Kind: ch.Kind})
	}
	w.push(cs)
}

// rewatch sets every live watch again on a new connection: the server's
// watches ended with the old one. Each watch is told (a set with Overflow)
// that changes between the two connections were not seen; a watch that
// cannot be set again ends with the error.
func (c *Client) rewatch() {
	v, ok := watchRegistry.Load(c)
	if !ok {
		return
	}
	cw := v.(*clientWatches)
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	cw.mu.Lock()
	if cw.gen == gen {
		cw.mu.Unlock()
		return
	}
	cw.gen = gen
	ws := make([]*Watch, 0, len(cw.byID))
	for _, w := range cw.byID {
		ws = append(ws, w)
	}
	cw.mu.Unlock()
	if len(ws) == 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for _, w := range ws {
			ctx, cancel := context.WithTimeout(c.ctx, c.opts.ReconnectTimeout)
			err := c.call(ctx, protocol.MethodFsWatch, map[string]any{"watchId": w.id, "path": fileuri.FromPath(w.path), "recursive": w.recursive}, nil, true)
			cancel()
			var pe *Error
			if errors.As(err, &pe) && pe.Code == -32600 && strings.Contains(pe.Message, "already in use") {
				// Watch's own request was retried on the new connection
				// and set it there already.
				err = nil
			}
			if err != nil {
				cw.mu.Lock()
				delete(cw.byID, w.id)
				cw.mu.Unlock()
				w.end(fmt.Errorf("exec-server client: setting the watch of %s again after a reconnect: %w", w.path, err))
				continue
			}
			w.push(ChangeSet{Overflow: true})
		}
	}()
}

package fswatch

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/execgo/exec-server/protocol"
)

// Change kinds of fs/changed.
const (
	KindCreated  = "created"
	KindModified = "modified"
	KindRemoved  = "removed"
	KindRenamed  = "renamed"
)

// Defaults for Options.
const (
	DefaultMaxWatches = 64
	DefaultMaxDirs    = 65536
	DefaultMaxQueued  = 16384
	DefaultWindow     = 50 * time.Millisecond
)

// Options bound one connection's fs/watch state.
type Options struct {
	MaxWatches int           // watch ids at once
	MaxDirs    int           // inotify watches (directories and files) at once
	MaxQueued  int           // distinct paths waiting for the window to close
	Window     time.Duration // changes are coalesced for this long after the first
}

// Change is one path's change in a window (native path).
type Change struct {
	Path string
	Kind string
}

// Batch is one fs/changed notification. Overflow means changes were lost
// (the kernel's queue overflowed, or MaxQueued or MaxDirs was reached):
// the client must rescan what it watches.
type Batch struct {
	WatchID  string
	Changes  []Change
	Overflow bool
}

// Tree is one connection's fs/watch state: any number of watches (up to
// MaxWatches) sharing one inotify descriptor, created on first use.
type Tree struct {
	opts Options
	send func(Batch) // may block (back-pressure); calls are serialized

	mu      sync.Mutex
	w       *fsnotify.Watcher
	watches map[string]*treeWatch
	dirs    map[string]int // inotify watch path → number of watches using it
	pending map[string]*pendingSet
	queued  int
	timer   *time.Timer
	closed  bool

	sendMu sync.Mutex     // keeps batches in order
	wg     sync.WaitGroup // the event loop and flushes in flight
}

type treeWatch struct {
	id        string
	root      string
	recursive bool
	dirs      map[string]bool // inotify watches this watch holds
}

type pendingSet struct {
	order    []string
	kind     map[string]string
	overflow bool
}

// NewTree returns the fs/watch state of one connection.
func NewTree(opts Options, send func(Batch)) *Tree {
	if opts.MaxWatches <= 0 {
		opts.MaxWatches = DefaultMaxWatches
	}
	if opts.MaxDirs <= 0 {
		opts.MaxDirs = DefaultMaxDirs
	}
	if opts.MaxQueued <= 0 {
		opts.MaxQueued = DefaultMaxQueued
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	return &Tree{opts: opts, send: send, watches: map[string]*treeWatch{}, dirs: map[string]int{}, pending: map[string]*pendingSet{}}
}

// Watch starts watch id on path (a directory, recursively if asked, or a
// file).
func (t *Tree) Watch(id, path string, recursive bool) error {
	path = filepath.Clean(path)
	fi, err := os.Stat(path)
	if err != nil {
		return protocol.FromOSError(err)
	}
	recursive = recursive && fi.IsDir()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return protocol.InvalidRequest("connection is closing")
	}
	if t.watches[id] != nil {
		return protocol.InvalidRequest("watch id %q is already in use; fs/unwatch it first or pick another id", id)
	}
	if len(t.watches) >= t.opts.MaxWatches {
		return protocol.InvalidRequest("too many watches: this connection has %d (limit %d); fs/unwatch one first", len(t.watches), t.opts.MaxWatches)
	}
	if t.w == nil {
		w, err := fsnotify.NewBufferedWatcher(1024)
		if err != nil {
			return protocol.Internal("fs/watch: %v", err)
		}
		t.w = w
		t.wg.Add(1)
		go t.loop(w)
	}
	tw := &treeWatch{id: id, root: path, recursive: recursive, dirs: map[string]bool{}}
	if err := t.addLocked(tw, path); err != nil {
		t.dropLocked(tw)
		return err
	}
	if recursive {
		err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() || p == path {
				return nil // unreadable entries are skipped, as a walk does
			}
			return t.addLocked(tw, p)
		})
		if err != nil {
			t.dropLocked(tw)
			return err
		}
	}
	t.watches[id] = tw
	return nil
}

// addLocked adds an inotify watch on p for tw, within MaxDirs.
func (t *Tree) addLocked(tw *treeWatch, p string) error {
	if tw.dirs[p] {
		return nil
	}
	if t.dirs[p] == 0 {
		if len(t.dirs) >= t.opts.MaxDirs {
			return protocol.InvalidRequest("too many watched directories: this connection watches %d (limit %d); watch a smaller tree or without recursive", len(t.dirs), t.opts.MaxDirs)
		}
		if err := t.w.Add(p); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return protocol.InvalidRequest("the system's inotify watch limit is reached (fs.inotify.max_user_watches)")
			}
			return protocol.FromOSError(err)
		}
	}
	t.dirs[p]++
	tw.dirs[p] = true
	return nil
}

// dropLocked releases tw's inotify watches.
func (t *Tree) dropLocked(tw *treeWatch) {
	for p := range tw.dirs {
		t.releaseLocked(p)
	}
	tw.dirs = map[string]bool{}
}

func (t *Tree) releaseLocked(p string) {
	if t.dirs[p]--; t.dirs[p] <= 0 {
		delete(t.dirs, p)
		_ = t.w.Remove(p) // already gone when the directory was removed
	}
}

// Unwatch ends watch id; changes still pending for it are dropped.
func (t *Tree) Unwatch(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	tw := t.watches[id]
	if tw == nil {
		return protocol.InvalidRequest("unknown watch id %q", id)
	}
	delete(t.watches, id)
	t.dropLocked(tw)
	if ps := t.pending[id]; ps != nil {
		t.queued -= len(ps.order)
		delete(t.pending, id)
	}
	return nil
}

// Len reports the watches and inotify watches in force.
func (t *Tree) Len() (watches, dirs int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.watches), len(t.dirs)
}

// Close ends every watch and waits for the event loop and any flush in
// flight (send must return once the connection is gone).
func (t *Tree) Close() {
	t.mu.Lock()
	t.closed = true
	w := t.w
	if t.timer != nil && t.timer.Stop() {
		t.wg.Done() // the flush that will not run
	}
	t.timer = nil
	t.pending = map[string]*pendingSet{}
	t.mu.Unlock()
	if w != nil {
		_ = w.Close()
	}
	t.wg.Wait()
}

func (t *Tree) loop(w *fsnotify.Watcher) {
	defer t.wg.Done()
	for {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			t.handle(ev)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			t.handleErr(err)
		}
	}
}

// handleErr marks every watch's next batch as overflowed: inotify lost
// events, so no watch can trust its change list.
func (t *Tree) handleErr(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	_ = err // any error from the kernel queue means events may be missing
	for id := range t.watches {
		t.setLocked(id).overflow = true
	}
	t.armLocked()
}

func kindOf(op fsnotify.Op) string {
	switch {
	case op.Has(fsnotify.Create):
		return KindCreated
	case op.Has(fsnotify.Remove):
		return KindRemoved
	case op.Has(fsnotify.Rename):
		return KindRenamed
	case op.Has(fsnotify.Write), op.Has(fsnotify.Chmod):
		return KindModified
	}
	return ""
}

func (t *Tree) handle(ev fsnotify.Event) {
	kind := kindOf(ev.Op)
	if kind == "" {
		return
	}
	name := filepath.Clean(ev.Name)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if kind == KindRemoved || kind == KindRenamed {
		// The inotify watch on a removed or moved-away directory is gone
		// or names a stale path: forget it (a move's new name arrives as
		// a creation and is watched afresh).
		for _, tw := range t.watches {
			if tw.dirs[name] && name != tw.root {
				delete(tw.dirs, name)
				t.releaseLocked(name)
			}
		}
	}
	for _, tw := range t.watches {
		if !tw.covers(name) {
			continue
		}
		t.addChangeLocked(tw.id, name, kind)
		if kind == KindCreated && tw.recursive {
			t.followLocked(tw, name)
		}
	}
	t.armLocked()
}

// followLocked watches a directory created inside a recursive watch, and
// reports what was created in it before its watch was in place.
func (t *Tree) followLocked(tw *treeWatch, dir string) {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if p != dir {
			t.addChangeLocked(tw.id, p, KindCreated)
		}
		if d.IsDir() {
			if err := t.addLocked(tw, p); err != nil {
				// Past MaxDirs this subtree is not watched: say so.
				t.setLocked(tw.id).overflow = true
				return filepath.SkipAll
			}
		}
		return nil
	})
}

func (tw *treeWatch) covers(name string) bool {
	if name == tw.root {
		return true
	}
	if tw.recursive {
		return strings.HasPrefix(name, tw.root+"/") || tw.root == "/"
	}
	return filepath.Dir(name) == tw.root
}

func (t *Tree) setLocked(id string) *pendingSet {
	ps := t.pending[id]
	if ps == nil {
		ps = &pendingSet{kind: map[string]string{}}
		t.pending[id] = ps
	}
	return ps
}

// addChangeLocked coalesces a change into the window: one entry per path,
// the latest kind, except that a path created in the window stays
// "created" when it is then modified.
func (t *Tree) addChangeLocked(id, path, kind string) {
	ps := t.setLocked(id)
	if old, ok := ps.kind[path]; ok {
		if !(old == KindCreated && kind == KindModified) {
			ps.kind[path] = kind
		}
		return
	}
	if t.queued >= t.opts.MaxQueued {
		ps.overflow = true
		return
	}
	t.queued++
	ps.order = append(ps.order, path)
	ps.kind[path] = kind
}

// armLocked starts the window when changes are pending and none is open.
func (t *Tree) armLocked() {
	if t.timer != nil || len(t.pending) == 0 {
		return
	}
	t.wg.Add(1)
	t.timer = time.AfterFunc(t.opts.Window, t.flush)
}

// flush sends what the window gathered, one batch per watch.
func (t *Tree) flush() {
	defer t.wg.Done()
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	t.mu.Lock()
	t.timer = nil
	if t.closed {
		t.mu.Unlock()
		return
	}
	pending := t.pending
	t.pending = map[string]*pendingSet{}
	t.queued = 0
	t.mu.Unlock()
	ids := make([]string, 0, len(pending))
	for id := range pending {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ps := pending[id]
		b := Batch{WatchID: id, Overflow: ps.overflow, Changes: make([]Change, 0, len(ps.order))}
		for _, p := range ps.order {
			b.Changes = append(b.Changes, Change{Path: p, Kind: ps.kind[p]})
		}
		t.send(b)
	}
}

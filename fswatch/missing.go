// Package fswatch implements the filesystem watches of the protocol:
// fs/watchMissing (the reference's one-shot existence watch) and fs/watch
// (this server's change stream). It knows nothing of transports: results
// are returned and notifications are handed to a callback the server wires.
package fswatch

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"

	"github.com/execgo/exec-server/protocol"
)

// MaxMissingPaths bounds the paths of one fs/watchMissing request (codex
// sends about ten: one per ancestor of its cwd).
const MaxMissingPaths = 4096

// MissingParams are fs/watchMissing's params, with paths already parsed.
type MissingParams struct {
	WatchID uint64
	Missing []string
	Present string // "" when absent or null
}

// Missing is one connection's fs/watchMissing state: at most one watch is
// in force; a request with a higher watchId replaces it.
type Missing struct {
	fire func(watchID uint64) // called at most once per watch, from the watch's goroutine

	mu      sync.Mutex
	current uint64 // 0 before the first watch: a watchId must be above it, as on the reference
	active  *missingWatch
	closed  bool
}

// NewMissing returns the state of one connection; fire pushes
// fs/missingChanged.
func NewMissing(fire func(watchID uint64)) *Missing { return &Missing{fire: fire} }

type missingWatch struct {
	id      uint64
	w       *fsnotify.Watcher
	targets map[string]bool // missing paths and their ancestors: creating one fires
	present string
	done    chan struct{} // closed when the goroutine has ended
	stop    chan struct{}
}

// Watch answers fs/watchMissing: whether the watch is in force.
func (m *Missing) Watch(p MissingParams) (bool, error) {
	if len(p.Missing) > MaxMissingPaths {
		return false, protocol.InvalidRequest("too many paths: fs/watchMissing takes at most %d missing paths, got %d", MaxMissingPaths, len(p.Missing))
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false, nil
	}
	if p.WatchID <= m.current {
		// A stale request: the newer watch stays in force.
		m.mu.Unlock()
		return false, nil
	}
	m.current = p.WatchID
	old := m.active
	m.active = nil
	m.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	if len(p.Missing) == 0 {
		// present alone is not watched: the reference answers false.
		return false, nil
	}
	mw, ok, err := startMissing(p)
	if err != nil || !ok {
		return false, err
	}
	m.mu.Lock()
	if m.closed || m.current != p.WatchID {
		// Closed or replaced while the watch was being set up.
		m.mu.Unlock()
		mw.w.Close() // never ran: no goroutine to stop
		return false, nil
	}
	m.active = mw
	m.mu.Unlock()
	go mw.run(m.fire)
	return true, nil
}

// Close ends the watch in force; it returns once its goroutine and inotify
// descriptor are gone.
func (m *Missing) Close() {
	m.mu.Lock()
	m.closed = true
	old := m.active
	m.active = nil
	m.mu.Unlock()
	if old != nil {
		old.cancel()
	}
}

// startMissing adds the inotify watches, then checks the paths: checking
// after the watches are in place leaves no window in which a creation is
// missed. ok is false when a missing path exists or present does not.
func startMissing(p MissingParams) (*missingWatch, bool, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, false, protocol.Internal("fs/watchMissing: %v", err)
	}
	mw := &missingWatch{id: p.WatchID, w: w, targets: map[string]bool{}, present: p.Present,
		done: make(chan struct{}), stop: make(chan struct{})}
	dirs := map[string]bool{}
	for _, path := range p.Missing {
		path = filepath.Clean(path)
		// Every component from the deepest existing ancestor down is a
		// target: creating it is a step towards the missing path.
		for q := path; ; q = filepath.Dir(q) {
			mw.targets[q] = true
			parent := filepath.Dir(q)
			if parent == q {
				break
			}
			if fi, err := os.Stat(parent); err == nil && fi.IsDir() {
				dirs[parent] = true
				break
			}
		}
	}
	if p.Present != "" {
		dirs[filepath.Dir(p.Present)] = true
		mw.targets[p.Present] = true
	}
	for d := range dirs {
		if err := w.Add(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.Close()
			return nil, false, protocol.Internal("fs/watchMissing: watching %s: %v", d, err)
		}
	}
	if p.Present != "" {
		// The file itself, for writes in place (its directory only sees
		// creations, removals and renames of entries).
		if err := w.Add(p.Present); err != nil {
			w.Close()
			if errors.Is(err, os.ErrNotExist) {
				return nil, false, nil
			}
			return nil, false, protocol.Internal("fs/watchMissing: watching %s: %v", p.Present, err)
		}
	}
	for _, path := range p.Missing {
		// Only "does not exist" is missing: a path under a file (ENOTDIR)
		// or an unreadable one is refused, as on the reference.
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			w.Close()
			return nil, false, nil
		}
	}
	return mw, true, nil
}

// cancel stops a running watch and waits for its goroutine, which closes
// the inotify descriptor.
func (mw *missingWatch) cancel() {
	close(mw.stop)
	<-mw.done
}

func (mw *missingWatch) run(fire func(uint64)) {
	defer close(mw.done)
	defer mw.w.Close()
	for {
		select {
		case <-mw.stop:
			return
		case ev, ok := <-mw.w.Events:
			if !ok {
				return
			}
			if mw.fires(ev) {
				select {
				case <-mw.stop:
				default:
					fire(mw.id)
				}
				return
			}
		case err, ok := <-mw.w.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: firing makes the client re-probe,
				// which is always correct.
				fire(mw.id)
				return
			}
		}
	}
}

// fires reports whether ev is the creation of a missing path or of one of
// its missing ancestors, or any change to the present path.
func (mw *missingWatch) fires(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if mw.present != "" && name == mw.present {
		// Any change, a chmod included (the reference fires on one).
		return ev.Op&(fsnotify.Create|fsnotify.Write|fsnotify.Remove|fsnotify.Rename|fsnotify.Chmod) != 0
	}
	return ev.Has(fsnotify.Create) && mw.targets[name]
}

package fswatch

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/execgo/exec-server/protocol"
)

// batches collects fs/changed batches.
type batches chan Batch

func (b batches) send(x Batch) { b <- x }

func (b batches) next(t *testing.T) Batch {
	t.Helper()
	select {
	case x := <-b:
		return x
	case <-time.After(5 * time.Second):
		t.Fatal("no fs/changed batch")
		return Batch{}
	}
}

func newTree(t *testing.T, opts Options) (*Tree, batches) {
	t.Helper()
	b := make(batches, 64)
	tr := NewTree(opts, b.send)
	t.Cleanup(tr.Close)
	return tr, b
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func find(b Batch, path string) string {
	for _, c := range b.Changes {
		if c.Path == path {
			return c.Kind
		}
	}
	return ""
}

func TestTreeKindsAndCoalescing(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "old"), "x")
	write(t, filepath.Join(dir, "gone"), "x")
	// A long window so that every change below lands in one batch.
	tr, b := newTree(t, Options{Window: 300 * time.Millisecond})
	if err := tr.Watch("w", dir, false); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "f")
	write(t, f, "1") // created, then modified: stays created
	write(t, f, "2")
	write(t, filepath.Join(dir, "old"), "y")
	if err := os.Remove(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "old"), filepath.Join(dir, "new")); err != nil {
		t.Fatal(err)
	}
	got := b.next(t)
	if got.WatchID != "w" || got.Overflow {
		t.Fatalf("batch %+v", got)
	}
	for _, c := range []struct{ name, kind string }{
		{"f", KindCreated}, {"old", KindRenamed}, {"gone", KindRemoved}, {"new", KindCreated},
	} {
		if k := find(got, filepath.Join(dir, c.name)); k != c.kind {
			t.Errorf("%s: kind %q, want %q (batch %+v)", c.name, k, c.kind, got.Changes)
		}
	}
	paths := map[string]bool{}
	for _, c := range got.Changes {
		if paths[c.Path] {
			t.Errorf("%s twice in one batch", c.Path)
		}
		paths[c.Path] = true
	}
}

func TestTreeRecursiveFollowsNewDirectories(t *testing.T) {
	dir := t.TempDir()
	mkdir(t, filepath.Join(dir, "a/b"))
	tr, b := newTree(t, Options{Window: time.Millisecond})
	if err := tr.Watch("r", dir, true); err != nil {
		t.Fatal(err)
	}
	if _, dirs := tr.Len(); dirs != 3 {
		t.Fatalf("watching %d directories, want 3", dirs)
	}
	write(t, filepath.Join(dir, "a/b/deep"), "1")
	if got := b.next(t); find(got, filepath.Join(dir, "a/b/deep")) != KindCreated {
		t.Fatalf("deep write: %+v", got)
	}
	mkdir(t, filepath.Join(dir, "n"))
	for find(b.next(t), filepath.Join(dir, "n")) != KindCreated {
	}
	write(t, filepath.Join(dir, "n/x"), "1")
	for find(b.next(t), filepath.Join(dir, "n/x")) == "" {
	}
	// Non-recursive watches see only their directory's entries.
	if err := tr.Watch("flat", dir, false); err != nil {
		t.Fatal(err)
	}
	if err := tr.Unwatch("r"); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a/b/deeper"), "1")
	write(t, filepath.Join(dir, "top"), "1")
	got := b.next(t)
	if got.WatchID != "flat" || find(got, filepath.Join(dir, "top")) != KindCreated || find(got, filepath.Join(dir, "a/b/deeper")) != "" {
		t.Fatalf("flat watch got %+v", got)
	}
}

func TestTreeOverflowMarksEveryWatch(t *testing.T) {
	dir := t.TempDir()
	tr, b := newTree(t, Options{Window: time.Millisecond})
	for _, id := range []string{"a", "b"} {
		if err := tr.Watch(id, dir, false); err != nil {
			t.Fatal(err)
		}
	}
	// What fsnotify reports on IN_Q_OVERFLOW; the kernel queue's size
	// is system-wide, so the overflow itself is simulated.
	tr.handleErr(fsnotify.ErrEventOverflow)
	var ids []string
	for range 2 {
		got := b.next(t)
		if !got.Overflow {
			t.Fatalf("batch without overflow: %+v", got)
		}
		ids = append(ids, got.WatchID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("overflow batches for %v", ids)
	}
}

func TestTreeQueueBoundMarksOverflow(t *testing.T) {
	dir := t.TempDir()
	tr, b := newTree(t, Options{Window: 300 * time.Millisecond, MaxQueued: 3})
	if err := tr.Watch("w", dir, false); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		write(t, filepath.Join(dir, string(rune('a'+i))), "1")
	}
	got := b.next(t)
	if !got.Overflow || len(got.Changes) != 3 {
		t.Fatalf("want 3 changes and overflow, got %+v", got)
	}
}

func TestTreeBounds(t *testing.T) {
	dir := t.TempDir()
	mkdir(t, filepath.Join(dir, "a/b/c"))
	tr, _ := newTree(t, Options{MaxWatches: 2, MaxDirs: 3})
	wantErr := func(err error, code int) {
		t.Helper()
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != code {
			t.Fatalf("got %v, want code %d", err, code)
		}
	}
	wantErr(tr.Watch("r", dir, true), protocol.CodeInvalidRequest) // 4 directories > 3
	if w, d := tr.Len(); w != 0 || d != 0 {
		t.Fatalf("a refused watch left %d watches, %d directories", w, d)
	}
	if err := tr.Watch("1", dir, false); err != nil {
		t.Fatal(err)
	}
	wantErr(tr.Watch("1", dir, false), protocol.CodeInvalidRequest)
	if err := tr.Watch("2", filepath.Join(dir, "a"), false); err != nil {
		t.Fatal(err)
	}
	wantErr(tr.Watch("3", dir, false), protocol.CodeInvalidRequest)
	wantErr(tr.Watch("x", filepath.Join(dir, "nope"), false), protocol.CodeNotFound)
	wantErr(tr.Unwatch("nope"), protocol.CodeInvalidRequest)
	if err := tr.Unwatch("1"); err != nil {
		t.Fatal(err)
	}
	if w, d := tr.Len(); w != 1 || d != 1 {
		t.Fatalf("after unwatch: %d watches, %d directories", w, d)
	}
}

func TestTreeCloseLeaksNothing(t *testing.T) {
	dir := t.TempDir()
	mkdir(t, filepath.Join(dir, "a/b"))
	fds, gs := openFDs(t), runtime.NumGoroutine()
	for range 20 {
		tr := NewTree(Options{Window: time.Millisecond}, func(Batch) {})
		if err := tr.Watch("w", dir, true); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, "a/f"), "1") // a flush may be in flight at Close
		tr.Close()
		if err := tr.Watch("v", dir, false); err == nil {
			t.Fatal("a closed Tree accepted a watch")
		}
	}
	if n := settle(gs); n > gs {
		t.Errorf("goroutines: %d before, %d after", gs, n)
	}
	if n := openFDs(t); n > fds {
		t.Errorf("descriptors: %d before, %d after", fds, n)
	}
}

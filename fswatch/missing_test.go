package fswatch

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// fired collects fs/missingChanged pushes.
type fired chan uint64

func (f fired) fire(id uint64) { f <- id }

func (f fired) expect(t *testing.T, id uint64) {
	t.Helper()
	select {
	case got := <-f:
		if got != id {
			t.Fatalf("fired watch %d, want %d", got, id)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("watch %d did not fire", id)
	}
}

// quiet checks nothing fires for a while: inotify delivers in well under
// a millisecond, so 200 ms without a push means none is coming.
func (f fired) quiet(t *testing.T, after string) {
	t.Helper()
	select {
	case got := <-f:
		t.Fatalf("after %s: watch %d fired", after, got)
	case <-time.After(200 * time.Millisecond):
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestMissingAncestorFiresOnce(t *testing.T) {
	dir := t.TempDir()
	f := make(fired, 4)
	m := NewMissing(f.fire)
	defer m.Close()
	ok, err := m.Watch(MissingParams{WatchID: 1, Missing: []string{filepath.Join(dir, "a/b/c"), filepath.Join(dir, "d")}})
	if err != nil || !ok {
		t.Fatalf("Watch: %v %v", ok, err)
	}
	f.quiet(t, "Watch")
	mkdir(t, filepath.Join(dir, "a")) // an ancestor two levels up
	f.expect(t, 1)
	mkdir(t, filepath.Join(dir, "d"))
	mkdir(t, filepath.Join(dir, "a/b/c"))
	f.quiet(t, "further creations")
}

func TestMissingReplaceAndRefuse(t *testing.T) {
	dir := t.TempDir()
	mkdir(t, filepath.Join(dir, "exists"))
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := make(fired, 4)
	m := NewMissing(f.fire)
	defer m.Close()
	p := func(s ...string) []string {
		for i := range s {
			s[i] = filepath.Join(dir, s[i])
		}
		return s
	}
	for _, c := range []struct {
		name string
		p    MissingParams
		want bool
	}{
		{"watchId 0 first", MissingParams{WatchID: 0, Missing: p("x")}, false},
		{"nothing to watch", MissingParams{WatchID: 1}, false},
		{"present alone", MissingParams{WatchID: 2, Present: filepath.Join(dir, "file")}, false},
		{"under a file", MissingParams{WatchID: 3, Missing: p("file/x")}, false},
		{"first", MissingParams{WatchID: 4, Missing: p("x")}, true},
		{"same id", MissingParams{WatchID: 4, Missing: p("y")}, false},
		{"lower id", MissingParams{WatchID: 1, Missing: p("y")}, false},
		{"existing path", MissingParams{WatchID: 5, Missing: p("y", "exists")}, false},
		{"present missing", MissingParams{WatchID: 6, Missing: p("y"), Present: filepath.Join(dir, "nope")}, false},
		{"present", MissingParams{WatchID: 7, Missing: p("y"), Present: filepath.Join(dir, "file")}, true},
	} {
		ok, err := m.Watch(c.p)
		if err != nil || ok != c.want {
			t.Fatalf("%s: got %v %v, want %v", c.name, ok, err, c.want)
		}
	}
	// Watch 4 was replaced (by 5, which answered false): x fires nothing.
	mkdir(t, filepath.Join(dir, "x"))
	f.quiet(t, "creating a replaced watch's path")
	if err := os.Chmod(filepath.Join(dir, "file"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.expect(t, 7)
	if _, err := m.Watch(MissingParams{WatchID: 8, Missing: make([]string, MaxMissingPaths+1)}); err == nil {
		t.Fatal("no error past MaxMissingPaths")
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(ents)
}

// settle waits for goroutines of ended watches to be gone.
func settle(want int) int {
	n := runtime.NumGoroutine()
	for i := 0; i < 100 && n > want; i++ {
		time.Sleep(10 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

func TestMissingCloseLeaksNothing(t *testing.T) {
	dir := t.TempDir()
	fds, gs := openFDs(t), runtime.NumGoroutine()
	for i := range 50 {
		m := NewMissing(func(uint64) {})
		for id := uint64(1); id <= 3; id++ {
			if ok, err := m.Watch(MissingParams{WatchID: id, Missing: []string{filepath.Join(dir, "m", string(rune('a'+i%26)))}}); !ok || err != nil {
				t.Fatalf("Watch: %v %v", ok, err)
			}
		}
		m.Close()
		if ok, _ := m.Watch(MissingParams{WatchID: 9, Missing: []string{filepath.Join(dir, "n")}}); ok {
			t.Fatal("a closed Missing accepted a watch")
		}
	}
	if n := settle(gs); n > gs {
		t.Errorf("goroutines: %d before, %d after", gs, n)
	}
	if n := openFDs(t); n > fds {
		t.Errorf("descriptors: %d before, %d after", fds, n)
	}
}

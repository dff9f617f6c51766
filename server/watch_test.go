package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/fswatch"
)

// inotifyFDs counts this process's inotify descriptors.
func inotifyFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestWatchesOverTheWire: fs/watch, fs/changed and fs/unwatch as the README
// shows them, fs/watchMissing beside them, and both ending with the
// connection (no goroutine, no inotify descriptor left).
func TestWatchesOverTheWire(t *testing.T) {
	checkGoroutines(t)
	before := inotifyFDs(t)
	dir := t.TempDir()
	p := stdioPeer(t, New(Config{}))
	p.init()
	for _, c := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"path": fileuri.FromPath(dir)}, "missing field `watchId`"},
		{map[string]any{"watchId": "w"}, "missing field `path`"},
		{map[string]any{"watchId": "", "path": fileuri.FromPath(dir)}, "watchId must not be empty"},
		{map[string]any{"watchId": "w", "path": dir}, "invalid URI"},
	} {
		if code, msg := p.callErr("fs/watch", c.params); code != -32602 || !strings.Contains(msg, c.want) {
			t.Errorf("fs/watch %v: %d %q, want -32602 %q", c.params, code, msg, c.want)
		}
	}
	if code, msg := p.callErr("fs/watch", map[string]any{"watchId": "w", "path": fileuri.FromPath(filepath.Join(dir, "nope"))}); code != -32004 {
		t.Errorf("fs/watch of a missing path: %d %q, want -32004", code, msg)
	}
	if r := p.call("fs/watch", map[string]any{"watchId": "w", "path": fileuri.FromPath(dir), "recursive": true}); string(r) != "{}" {
		t.Fatalf("fs/watch result %s", r)
	}
	r := p.call("fs/watchMissing", map[string]any{"watchId": 1, "missing": []string{fileuri.FromPath(filepath.Join(dir, "m"))}})
	if string(r) != `{"watching":true}` {
		t.Fatalf("fs/watchMissing result %s", r)
	}
	if err := os.Mkdir(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := p.wait("fs/missingChanged", func(w wire) bool { return w.Method == "fs/missingChanged" })
	if w.raw != `{"method":"fs/missingChanged","params":{"watchId":1}}` {
		t.Fatalf("got %s", w.raw)
	}
	w = p.wait("fs/changed", func(w wire) bool { return w.Method == "fs/changed" })
	var got struct {
		WatchID  string           `json:"watchId"`
		Changes  []map[string]any `json:"changes"`
		Overflow *bool            `json:"overflow"`
	}
	mustUnmarshal(t, w.Params, &got)
	want := map[string]any{"path": fileuri.FromPath(filepath.Join(dir, "m")), "kind": "created"}
	if got.WatchID != "w" || len(got.Changes) != 1 || got.Overflow != nil || !mapsEqual(got.Changes[0], want) {
		t.Fatalf("fs/changed %s", w.raw)
	}
	if code, _ := p.callErr("fs/watch", map[string]any{"watchId": "w", "path": fileuri.FromPath(dir)}); code != -32600 {
		t.Errorf("a duplicate watchId: code %d, want -32600", code)
	}
	if r := p.call("fs/unwatch", map[string]any{"watchId": "w"}); string(r) != "{}" {
		t.Fatalf("fs/unwatch result %s", r)
	}
	if code, msg := p.callErr("fs/unwatch", map[string]any{"watchId": "w"}); code != -32600 || !strings.Contains(msg, "unknown watch id") {
		t.Errorf("fs/unwatch twice: %d %q", code, msg)
	}
	p.call("fs/watch", map[string]any{"watchId": "again", "path": fileuri.FromPath(dir)})
	p.call("fs/watchMissing", map[string]any{"watchId": 2, "missing": []string{fileuri.FromPath(filepath.Join(dir, "n"))}})
	if n := inotifyFDs(t); n != before+2 {
		t.Fatalf("%d inotify descriptors while watching, want %d", n, before+2)
	}
	p.stop()
	if n := inotifyFDs(t); n != before {
		t.Errorf("%d inotify descriptors after the connection ended, want %d", n, before)
	}
}

func mapsEqual(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestEncodeChangedMatchesEncodingJSON: the hand-written frame is valid
// JSON with the documented shape.
func TestEncodeChangedMatchesEncodingJSON(t *testing.T) {
	for _, b := range []fswatch.Batch{
		{WatchID: "w", Changes: []fswatch.Change{}},
		{WatchID: "q\"\n\u2028", Changes: []fswatch.Change{{Path: "/a b/%", Kind: "created"}, {Path: "/x", Kind: "removed"}}, Overflow: true},
	} {
		frame := encodeChanged(nil, b)
		var got struct {
			Method string `json:"method"`
			Params struct {
				WatchID string `json:"watchId"`
				Changes []struct {
					Path, Kind string
				} `json:"changes"`
				Overflow bool `json:"overflow"`
			} `json:"params"`
		}
		if err := json.Unmarshal(frame, &got); err != nil {
			t.Fatalf("%s: %v", frame, err)
		}
		if got.Method != "fs/changed" || got.Params.WatchID != b.WatchID || got.Params.Overflow != b.Overflow || len(got.Params.Changes) != len(b.Changes) {
			t.Fatalf("%s decodes to %+v", frame, got)
		}
		for i, c := range b.Changes {
			if p, _ := fileuri.Parse(got.Params.Changes[i].Path); p != c.Path || got.Params.Changes[i].Kind != c.Kind {
				t.Errorf("change %d: %+v, want %+v", i, got.Params.Changes[i], c)
			}
		}
	}
}

package server

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// Pending long polls never delay other requests, whatever their number
// (issue 14, defect 5: with 65 pending reads of waitMs 30000 on the default
// 64 handler slots, a process/write waited 29.8 s). The write and the
// terminate must be answered before any of the long polls, none of which
// has anything to return until the terminate.
func TestLongPollsDoNotHoldHandlerSlots(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	p.call("process/start", startParams(t, "quiet", false, "sleep", "60"))
	cat := startParams(t, "cat", false, "cat")
	cat["pipeStdin"] = true
	p.call("process/start", cat)

	const polls = 200
	pollIDs := map[string]bool{}
	for range polls {
		pollIDs[p.request("process/read", map[string]any{"processId": "quiet", "waitMs": 30000})] = true
	}
	writeID := p.request("process/write", map[string]any{"processId": "cat", "chunk": base64.StdEncoding.EncodeToString([]byte("hi\n"))})
	statusID := p.request("environment/status", nil)
	termID := p.request("process/terminate", map[string]any{"processId": "cat"})
	want := map[string]string{writeID: "process/write", statusID: "environment/status", termID: "process/terminate"}
	for len(want) > 0 {
		w := p.wait("a reply", func(w wire) bool { return w.Method == "" })
		id := string(w.ID)
		if pollIDs[id] {
			t.Fatalf("a long poll was answered (%s) before %v", w.raw, want)
		}
		if _, ok := want[id]; !ok {
			t.Fatalf("unexpected reply %s", w.raw)
		}
		if w.Error != nil {
			t.Fatalf("%s failed: %s", want[id], w.raw)
		}
		delete(want, id)
	}
	// Ending the quiet process answers every long poll.
	p.call("process/terminate", map[string]any{"processId": "quiet"})
	for id := range pollIDs {
		if w := p.response(id); w.Error != nil {
			t.Fatalf("long poll %s: %s", id, w.raw)
		}
	}
	p.events("cat")
	p.events("quiet")
}

// Past MaxLongPolls, a long poll is refused with a clear error; a read
// without waitMs still works, and so do long polls once others end.
func TestLongPollLimit(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{MaxLongPolls: 3}))
	p.init()
	p.call("process/start", startParams(t, "q", false, "sleep", "60"))
	var ids []string
	for range 3 {
		ids = append(ids, p.request("process/read", map[string]any{"processId": "q", "waitMs": 30000}))
	}
	code, msg := p.callErr("process/read", map[string]any{"processId": "q", "waitMs": 30000})
	if code != -32600 || !strings.Contains(msg, "too many pending long polls") || !strings.Contains(msg, "(limit 3)") {
		t.Fatalf("fourth long poll: %d %q", code, msg)
	}
	p.call("process/read", map[string]any{"processId": "q"})
	p.call("process/terminate", map[string]any{"processId": "q"})
	for _, id := range ids {
		p.response(id)
	}
	p.call("process/read", map[string]any{"processId": "q", "waitMs": 30000}) // closed: answers at once
	p.events("q")
}

// waitMs is clamped to MaxWaitMs: an absurd value is accepted as the
// maximum (issue 14: 2^64-1 was taken as is).
func TestWaitMsIsClamped(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want uint64
	}{
		{`{"processId":"p","waitMs":18446744073709551615}`, MaxWaitMs},
		{fmt.Sprintf(`{"processId":"p","waitMs":%d}`, MaxWaitMs+1), MaxWaitMs},
		{fmt.Sprintf(`{"processId":"p","waitMs":%d}`, MaxWaitMs), MaxWaitMs},
		{`{"processId":"p","waitMs":100}`, 100},
	} {
		v, err := decodeRead([]byte(tc.raw))
		if err != nil {
			t.Fatalf("%s: %v", tc.raw, err)
		}
		if got := v.(*protocol.ReadParams).WaitMs; got == nil || *got != tc.want {
			t.Errorf("%s: waitMs %v, want %d", tc.raw, got, tc.want)
		}
	}
}

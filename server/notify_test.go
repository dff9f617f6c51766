package server

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/execgo/exec-server/process"
	"github.com/execgo/exec-server/protocol"
)

var readResultFixture = protocol.ReadResult{
	Chunks: []protocol.Chunk{
		{Seq: 1, Stream: "stdout", Chunk: []byte("hello\n")},
		{Seq: 2, Stream: "stderr", Chunk: []byte{0, 1, 2, 255}},
	},
	NextSeq: 4, Exited: true, Closed: false,
}

// The hand-written encoders must agree with encoding/json on every field.
func TestEncodeEventMatchesEncodingJSON(t *testing.T) {
	deny := false
	cases := []struct {
		ev   process.Event
		want any
	}{
		{process.Event{Kind: process.EventOutput, ProcessID: `p"1\`, Seq: 7, Stream: "stdout", Data: []byte{0, 'a', 255}},
			map[string]any{"method": "process/output", "params": protocol.OutputNotification{ProcessID: `p"1\`, Seq: 7, Stream: "stdout", Chunk: []byte{0, 'a', 255}}}},
		{process.Event{Kind: process.EventOutput, ProcessID: "p", Seq: 1, Stream: "pty", Data: nil},
			map[string]any{"method": "process/output", "params": protocol.OutputNotification{ProcessID: "p", Seq: 1, Stream: "pty", Chunk: []byte{}}}},
		{process.Event{Kind: process.EventExited, ProcessID: "é", Seq: 2, ExitCode: 137},
			map[string]any{"method": "process/exited", "params": protocol.ExitedNotification{ProcessID: "é", Seq: 2, ExitCode: 137, SandboxDenied: &deny}}},
		{process.Event{Kind: process.EventClosed, ProcessID: "", Seq: 3},
			map[string]any{"method": "process/closed", "params": protocol.ClosedNotification{ProcessID: "", Seq: 3}}},
	}
	for _, c := range cases {
		got := encodeEvent(nil, c.ev)
		want, _ := json.Marshal(c.want)
		var a, b any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("invalid JSON %s: %v", got, err)
		}
		json.Unmarshal(want, &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("encodeEvent\n got %s\nwant %s", got, want)
		}
	}
}

package server

import (
	"strconv"

	"github.com/execgo/exec-server/internal/b64codec"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/process"
	"github.com/execgo/exec-server/protocol"
)

// encodeEvent writes a process event as a notification frame by hand: this
// is the hottest path of the server (every output chunk), so the base64
// goes straight into the frame with no reflection and no copies.
func encodeEvent(dst []byte, ev process.Event) []byte {
	switch ev.Kind {
	case process.EventOutput:
		dst = append(dst, `{"method":"`+protocol.NotifyProcessOutput+`","params":{"processId":`...)
		dst = jsonrpc.AppendString(dst, ev.ProcessID)
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, ev.Seq, 10)
		dst = append(dst, `,"stream":"`...)
		dst = append(dst, ev.Stream...)
		dst = append(dst, `","chunk":"`...)
		dst = b64codec.AppendEncode(dst, ev.Data)
		return append(dst, `"}}`...)
	case process.EventExited:
		dst = append(dst, `{"method":"`+protocol.NotifyProcessExited+`","params":{"processId":`...)
		dst = jsonrpc.AppendString(dst, ev.ProcessID)
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, ev.Seq, 10)
		dst = append(dst, `,"exitCode":`...)
		dst = strconv.AppendInt(dst, int64(ev.ExitCode), 10)
		dst = append(dst, `,"sandboxDenied":`...)
		dst = strconv.AppendBool(dst, ev.SandboxDenied)
		if ev.TimedOut {
			// An extension, present only when true: a reference client
			// sees what it always saw.
			dst = append(dst, `,"timedOut":true`...)
		}
		return append(dst, `}}`...)
	default:
		dst = append(dst, `{"method":"`+protocol.NotifyProcessClosed+`","params":{"processId":`...)
		dst = jsonrpc.AppendString(dst, ev.ProcessID)
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, ev.Seq, 10)
		return append(dst, `}}`...)
	}
}

// readResult encodes a process/read result without reflection.
type readResult struct{ *protocol.ReadResult }

// AppendJSON implements jsonrpc.Appender.
func (r readResult) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"chunks":[`...)
	for i, c := range r.Chunks {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"seq":`...)
		dst = strconv.AppendUint(dst, c.Seq, 10)
		dst = append(dst, `,"stream":"`...)
		dst = append(dst, c.Stream...)
		dst = append(dst, `","chunk":"`...)
		dst = b64codec.AppendEncode(dst, c.Chunk)
		dst = append(dst, `"}`...)
	}
	dst = append(dst, `],"nextSeq":`...)
	dst = strconv.AppendUint(dst, r.NextSeq, 10)
	dst = append(dst, `,"exited":`...)
	dst = strconv.AppendBool(dst, r.Exited)
	dst = append(dst, `,"exitCode":`...)
	if r.ExitCode != nil {
		dst = strconv.AppendInt(dst, int64(*r.ExitCode), 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"closed":`...)
	dst = strconv.AppendBool(dst, r.Closed)
	dst = append(dst, `,"failure":null,"sandboxDenied":`...)
	dst = strconv.AppendBool(dst, r.SandboxDenied)
	if r.TimedOut {
		dst = append(dst, `,"timedOut":true`...)
	}
	return append(dst, '}')
}

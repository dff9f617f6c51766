package client

import (
	"errors"

	"github.com/execgo/exec-server/protocol"
)

// The SDK's classification of server errors. It reads an error's code and
// the kind this project's server puts in its data (protocol.Kind), never
// its message text. The reference server sends no data: for it each test
// falls back on the code, which, in the one request it is asked about,
// has that meaning alone.

// ErrStdinBusy is returned by writes refused because the server's stdin
// budget, shared by all its processes, is spent: processes are not reading
// their input. It is temporary (the process's stdin is still open): retry
// later, or make the processes read.
var ErrStdinBusy = errors.New("exec-server client: the server's stdin buffer is full; retry later")

// kindOrCode reports whether err is a server error of kind k, or, from a
// server that classifies nothing, of code.
func kindOrCode(err error, k protocol.Kind, code int) bool {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return false
	}
	if got := pe.Kind(); got != "" {
		return got == k
	}
	return pe.Code == code
}

// isProcessExists: process/start refused an id already in use (after a
// repeat across a reconnect, the first attempt's process).
func isProcessExists(err error) bool {
	return kindOrCode(err, protocol.KindProcessExists, protocol.CodeInvalidRequest)
}

// isUnknownProcess: process/read does not know the id (the server forgot
// the process after its retention elapsed).
func isUnknownProcess(err error) bool {
	return kindOrCode(err, protocol.KindUnknownProcess, protocol.CodeInvalidRequest)
}

// isUnknownSession: initialize with resumeSessionId found no session
// (expired, or the server restarted).
func isUnknownSession(err error) bool {
	return kindOrCode(err, protocol.KindUnknownSession, protocol.CodeInvalidRequest)
}

// stdinAction says what a failed process/write means.
type stdinAction int

const (
	stdinOther  stdinAction = iota // any other error: return it
	stdinRetry                     // the process's own queue is full: back off, same writeId
	stdinBusy                      // the server-wide budget is spent: ErrStdinBusy
	stdinClosed                    // the input is gone: ErrStdinClosed
)

// classifyWrite classifies a process/write error. Without data, -32603 is
// the reference's "failed to write to process stdin".
func classifyWrite(err error) stdinAction {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return stdinOther
	}
	switch pe.Kind() {
	case protocol.KindStdinFull:
		return stdinRetry
	case protocol.KindStdinBusy:
		return stdinBusy
	case protocol.KindStdinClosed:
		return stdinClosed
	case "":
		if pe.Code == protocol.CodeInternal {
			return stdinClosed
		}
	}
	return stdinOther
}

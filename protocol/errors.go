// Package protocol holds the wire types, method names and error codes of the
// exec-server JSON-RPC dialect. It performs no I/O: transports, handlers and
// the client SDK all share these definitions, so the mapping from a Go error to
// a wire error code lives here, in one place.
package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/execgo/exec-server/jsonrpc"
)

// Wire error codes. The first four are JSON-RPC's; the last two are the
// reference's own.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
	CodeNotFound       = -32004 // filesystem path or handle not found
	CodeSessionBusy    = -32010 // session attached to another connection
)

// Error is a JSON-RPC error object of this protocol. It is both what
// handlers return and what the client SDK hands back to its callers (use
// errors.As, or errors.Is by code or kind). It is jsonrpc.Error's shape
// with this protocol's meaning: errors.Is matches fs.ErrNotExist,
// fs.ErrPermission and fs.ErrExist where the error means that, which the
// generic jsonrpc package cannot know; As and FromWire convert between the
// two.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	// Data is the "data" member: this server's ErrorData, or whatever
	// another server sent; nil leaves it out.
	Data json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// Is reports whether target is an *Error or *jsonrpc.Error with e's code,
// or the fs sentinel e's kind means: fs.ErrNotExist for -32004 and
// KindNotFound, fs.ErrPermission for KindPermissionDenied, fs.ErrExist for
// KindAlreadyExists.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case *Error:
		return t != nil && t.Code == e.Code
	case *jsonrpc.Error:
		return t != nil && t.Code == e.Code
	}
	switch target {
	case fs.ErrNotExist:
		return e.Code == CodeNotFound || e.Kind() == KindNotFound
	case fs.ErrPermission:
		return e.Kind() == KindPermissionDenied
	case fs.ErrExist:
		return e.Kind() == KindAlreadyExists
	}
	return false
}

// As gives the error as a *jsonrpc.Error, so that a connection answers a
// handler's *Error, wherever it is in a chain, with its code and data.
func (e *Error) As(target any) bool {
	if t, ok := target.(**jsonrpc.Error); ok {
		*t = e.Wire()
		return true
	}
	return false
}

// Wire returns e as the connection's error type.
func (e *Error) Wire() *jsonrpc.Error {
	return &jsonrpc.Error{Code: e.Code, Message: e.Message, Data: e.Data}
}

// FromWire returns a peer's error as an *Error.
func FromWire(je *jsonrpc.Error) *Error {
	return &Error{Code: je.Code, Message: je.Message, Data: je.Data}
}

// Kind classifies an error beyond its code, for clients: the server sends
// it as the error's data ({"kind":"StdinBusy"}), so neither side reads
// message texts. Servers that send no data (the reference) give "", and a
// client falls back on the code. The names of the first three are Rust's
// io::ErrorKind names.
type Kind string

// Kinds.
const (
	KindNotFound         Kind = "NotFound"         // ENOENT; fs.ErrNotExist
	KindPermissionDenied Kind = "PermissionDenied" // EPERM, EACCES; fs.ErrPermission
	KindAlreadyExists    Kind = "AlreadyExists"    // EEXIST; fs.ErrExist
	KindUnknownProcess   Kind = "UnknownProcess"   // no process with that id in the session
	KindProcessExists    Kind = "ProcessExists"    // process/start with an id in use
	KindUnknownSession   Kind = "UnknownSession"   // resumeSessionId unknown or expired
	KindStdinClosed      Kind = "StdinClosed"      // the process's stdin is gone or was closed: permanent
	KindStdinFull        Kind = "StdinFull"        // the process's own stdin queue is full: retry when it reads
	KindStdinBusy        Kind = "StdinBusy"        // the server-wide stdin budget is spent: retry later
	// KindSandboxUnavailable is the reference's (0.171) process/start kind
	// for a confinement the executor cannot provide.
	KindSandboxUnavailable Kind = "sandboxUnavailable"
)

// ErrorData is the data member of this server's classified errors.
type ErrorData struct {
	Kind Kind `json:"kind"`
}

// WithKind sets e's data to name kind and returns e.
func (e *Error) WithKind(kind Kind) *Error {
	e.Data, _ = json.Marshal(ErrorData{Kind: kind})
	return e
}

// Kind returns the kind e's data names, or "".
func (e *Error) Kind() Kind {
	if len(e.Data) == 0 {
		return ""
	}
	var d ErrorData
	if json.Unmarshal(e.Data, &d) != nil {
		return ""
	}
	return d.Kind
}

// KindOf returns the kind of the *Error (or *jsonrpc.Error) in err's
// chain, or "".
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind()
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return FromWire(je).Kind()
	}
	return ""
}

// Errorf builds an *Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidRequest is -32600.
func InvalidRequest(format string, args ...any) *Error {
	return Errorf(CodeInvalidRequest, format, args...)
}

// InvalidParams is -32602.
func InvalidParams(format string, args ...any) *Error {
	return Errorf(CodeInvalidParams, format, args...)
}

// Internal is -32603.
func Internal(format string, args ...any) *Error { return Errorf(CodeInternal, format, args...) }

// NotFound is -32004.
func NotFound(format string, args ...any) *Error { return Errorf(CodeNotFound, format, args...) }

// ToError converts any error to a wire error. *Error values pass through;
// operating-system errors are mapped with FromOSError; anything else is an
// internal error carrying its text.
func ToError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return FromWire(je)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return FromOSError(err)
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// FromOSError maps an operating-system error the way the reference does:
// not-found is -32004, permission errors are -32600, everything else -32603,
// with the reference's "<strerror> (os error N)" text so clients that match on
// messages keep working.
func FromOSError(err error) *Error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			errno = syscall.ENOENT
		case errors.Is(err, fs.ErrPermission):
			errno = syscall.EACCES
		case errors.Is(err, fs.ErrExist):
			errno = syscall.EEXIST
		default:
			return &Error{Code: CodeInternal, Message: err.Error()}
		}
	}
	code := CodeInternal
	switch errno {
	case syscall.ENOENT:
		code = CodeNotFound
	case syscall.EPERM, syscall.EACCES:
		code = CodeInvalidRequest
	}
	return errnoKind(&Error{Code: code, Message: OSErrorText(errno)}, errno)
}

// errnoKind gives e the kind errno means, if any.
func errnoKind(e *Error, errno syscall.Errno) *Error {
	switch errno {
	case syscall.ENOENT:
		return e.WithKind(KindNotFound)
	case syscall.EPERM, syscall.EACCES:
		return e.WithKind(KindPermissionDenied)
	case syscall.EEXIST:
		return e.WithKind(KindAlreadyExists)
	}
	return e
}

// OSErrorText renders an errno as Rust's io::Error does: the C library's
// strerror text, then " (os error N)". The reference is linked with musl,
// whose texts differ from glibc's (and Go's) for some errors, so on Linux
// those come from muslText (errors_linux.go); the rest, and every errno on
// other systems (where the numbers are not Linux's anyway), are Go's text with
// a capital first letter.
func OSErrorText(errno syscall.Errno) string {
	s, ok := muslText[errno]
	if !ok {
		s = errno.Error()
		if s != "" && s[0] >= 'a' && s[0] <= 'z' {
			s = string(s[0]-'a'+'A') + s[1:]
		}
	}
	return fmt.Sprintf("%s (os error %d)", s, int(errno))
}

// SpawnError maps an error from starting a process: every OS failure is
// -32603 there (the reference reports a missing cwd or program as internal).
func SpawnError(err error) *Error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errnoKind(&Error{Code: CodeInternal, Message: OSErrorText(errno)}, errno)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return SpawnError(pe.Err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return errnoKind(&Error{Code: CodeInternal, Message: OSErrorText(syscall.ENOENT)}, syscall.ENOENT)
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

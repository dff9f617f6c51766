// Package protocol holds the wire types, method names and error codes of the
// exec-server JSON-RPC dialect. It performs no I/O: transports, handlers and
// the client SDK all share these definitions, so the mapping from a Go error to
// a wire error code lives here, in one place.
package protocol

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
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

// Error is a JSON-RPC error object. It is both what handlers return and what
// the client SDK hands back to its callers (use errors.As).
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

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
	return &Error{Code: code, Message: OSErrorText(errno)}
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
		return &Error{Code: CodeInternal, Message: OSErrorText(errno)}
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return SpawnError(pe.Err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return &Error{Code: CodeInternal, Message: OSErrorText(syscall.ENOENT)}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

package jsonrpc

import (
	"encoding/json"
	"errors"
	"fmt"
)

// JSON-RPC 2.0's error codes. Applications define their own beside them
// (-32000 to -32099 are reserved for implementation-defined server errors).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Error is a JSON-RPC error object: what a handler answers and what a call
// returns when the peer answered with an error. Two errors are the same
// kind, for errors.Is, when their codes are equal:
//
//	errors.Is(err, jsonrpc.ErrMethodNotFound)
//	errors.Is(err, &jsonrpc.Error{Code: -32004})
type Error struct {
	Code int `json:"code"`
	// Data is the optional "data" member, raw JSON; nil leaves it out.
	// It comes before Message, in the reference's key order.
	Data    json.RawMessage `json:"data,omitempty"`
	Message string          `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// Is matches any *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && e != nil && t.Code == e.Code
}

// Sentinels for errors.Is; they carry no message.
var (
	ErrParse          = &Error{Code: CodeParseError}
	ErrInvalidRequest = &Error{Code: CodeInvalidRequest}
	ErrMethodNotFound = &Error{Code: CodeMethodNotFound}
	ErrInvalidParams  = &Error{Code: CodeInvalidParams}
	ErrInternal       = &Error{Code: CodeInternalError}
)

// Errorf builds an *Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ToError returns the *Error in err's chain, or else an internal error
// carrying err's text; nil stays nil.
func ToError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternalError, Message: err.Error()}
}

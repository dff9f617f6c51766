package protocol

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestFromOSErrorAnySystem checks what holds on every system: the code
// mapping, and Rust's "<Text> (os error N)" shape with this system's number.
// The exact texts and Linux numbers are pinned in errors_linux_test.go.
func TestFromOSErrorAnySystem(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		errno syscall.Errno
		code  int
	}{
		{"ENOENT", &os.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, syscall.ENOENT, CodeNotFound},
		{"fs.ErrNotExist", fmt.Errorf("gone: %w", fs.ErrNotExist), syscall.ENOENT, CodeNotFound},
		{"EACCES", syscall.EACCES, syscall.EACCES, CodeInvalidRequest},
		{"EPERM", syscall.EPERM, syscall.EPERM, CodeInvalidRequest},
		{"fs.ErrExist", fmt.Errorf("x: %w", fs.ErrExist), syscall.EEXIST, CodeInternal},
		{"ENOTDIR", syscall.ENOTDIR, syscall.ENOTDIR, CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromOSError(tt.err)
			suffix := fmt.Sprintf(" (os error %d)", int(tt.errno))
			text, ok := strings.CutSuffix(got.Message, suffix)
			if got.Code != tt.code || !ok || text == "" || text[0] < 'A' || text[0] > 'Z' {
				t.Errorf("FromOSError(%v) = {%d %q}, want code %d and \"<Capitalised text>%s\"", tt.err, got.Code, got.Message, tt.code, suffix)
			}
		})
	}
}

func TestToError(t *testing.T) {
	own := NotFound("unknown file handle `h`")
	tests := []struct {
		name string
		err  error
		code int
		msg  string
	}{
		{"own error passes through", own, CodeNotFound, "unknown file handle `h`"},
		{"wrapped own error", fmt.Errorf("ctx: %w", InvalidParams("bad %s", "x")), CodeInvalidParams, "bad x"},
		{"errno", &os.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, CodeNotFound, OSErrorText(syscall.ENOENT)},
		{"plain", errors.New("plain"), CodeInternal, "plain"},
	}
	for _, tt := range tests {
		got := ToError(tt.err)
		if got.Code != tt.code || got.Message != tt.msg {
			t.Errorf("%s: ToError = {%d %q}, want {%d %q}", tt.name, got.Code, got.Message, tt.code, tt.msg)
		}
	}
	if ToError(nil) != nil {
		t.Error("ToError(nil) != nil")
	}
	if ToError(own) != own {
		t.Error("ToError did not return the same *Error")
	}
}

func TestErrorText(t *testing.T) {
	e := Errorf(CodeInvalidRequest, "process %s already exists", "p")
	if e.Error() != "process p already exists (code -32600)" {
		t.Errorf("Error() = %q", e.Error())
	}
	for _, c := range []struct {
		e    *Error
		code int
	}{
		{InvalidRequest("x"), -32600}, {InvalidParams("x"), -32602}, {Internal("x"), -32603}, {NotFound("x"), -32004},
	} {
		if c.e.Code != c.code {
			t.Errorf("constructor gave code %d, want %d", c.e.Code, c.code)
		}
	}
}

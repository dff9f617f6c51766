package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/execgo/exec-server/jsonrpc"
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

// TestErrorIs: errors.Is matches by code (against *Error and
// *jsonrpc.Error) and the fs sentinels by code -32004 or by kind; a
// reference server's error (no data) matches by code alone.
func TestErrorIs(t *testing.T) {
	notFound := FromOSError(syscall.ENOENT)
	denied := FromOSError(syscall.EACCES)
	exists := FromOSError(syscall.EEXIST)
	spawnMissing := SpawnError(syscall.ENOENT) // -32603 with kind NotFound
	handle := NotFound("unknown file handle `h`")
	refDenied := &Error{Code: CodeInvalidRequest, Message: "Permission denied (os error 13)"}
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"code", denied, &Error{Code: CodeInvalidRequest}, true},
		{"other code", denied, &Error{Code: CodeInternal}, false},
		{"jsonrpc sentinel", InvalidParams("x"), jsonrpc.ErrInvalidParams, true},
		{"jsonrpc other", InvalidParams("x"), jsonrpc.ErrInternal, false},
		{"wrapped", fmt.Errorf("op: %w", notFound), fs.ErrNotExist, true},
		{"-32004 without data", handle, fs.ErrNotExist, true},
		{"ENOENT at spawn", spawnMissing, fs.ErrNotExist, true},
		{"EACCES", denied, fs.ErrPermission, true},
		{"EACCES is not missing", denied, fs.ErrNotExist, false},
		{"EEXIST", exists, fs.ErrExist, true},
		{"EEXIST is not permission", exists, fs.ErrPermission, false},
		{"reference text is not read", refDenied, fs.ErrPermission, false},
		{"process exists is no file", InvalidRequest("process p already exists").WithKind(KindProcessExists), fs.ErrExist, false},
	}
	for _, tt := range tests {
		if got := errors.Is(tt.err, tt.target); got != tt.want {
			t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", tt.name, tt.err, tt.target, got, tt.want)
		}
	}
}

// TestErrorWire: an *Error is found as a *jsonrpc.Error in a chain (so a
// connection answers it with its code and data), and comes back intact.
func TestErrorWire(t *testing.T) {
	e := Internal("failed to write to process stdin: busy").WithKind(KindStdinBusy)
	var je *jsonrpc.Error
	if !errors.As(fmt.Errorf("wrapped: %w", e), &je) || je.Code != CodeInternal || string(je.Data) != `{"kind":"StdinBusy"}` {
		t.Fatalf("As *jsonrpc.Error: %+v", je)
	}
	back := FromWire(je)
	if back.Kind() != KindStdinBusy || back.Message != e.Message || KindOf(je) != KindStdinBusy || KindOf(fmt.Errorf("w: %w", back)) != KindStdinBusy {
		t.Fatalf("round trip: %+v", back)
	}
	out, err := json.Marshal(e)
	if err != nil || string(out) != `{"code":-32603,"data":{"kind":"StdinBusy"},"message":"failed to write to process stdin: busy"}` {
		t.Errorf("Marshal = %s, %v", out, err)
	}
	if out, _ := json.Marshal(InvalidParams("x")); string(out) != `{"code":-32602,"message":"x"}` {
		t.Errorf("without a kind: %s, want no data member", out)
	}
	for _, d := range []string{``, `null`, `"text"`, `{"kind":5}`, `[1]`} {
		if k := (&Error{Code: 1, Data: json.RawMessage(d)}).Kind(); k != "" {
			t.Errorf("data %s: kind %q", d, k)
		}
	}
	if ToError(jsonrpc.Errorf(-32010, "busy")).Code != -32010 {
		t.Error("ToError of a *jsonrpc.Error lost its code")
	}
}

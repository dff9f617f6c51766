package protocol

// The reference runs on Linux and links musl: these tests pin its exact
// texts and Linux's errno numbers, which only hold here.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestFromOSError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code int
		msg  string
	}{
		{"ENOENT", syscall.ENOENT, CodeNotFound, "No such file or directory (os error 2)"},
		{"ENOENT in PathError", &os.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, CodeNotFound, "No such file or directory (os error 2)"},
		{"ENOENT wrapped twice", fmt.Errorf("ctx: %w", &os.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}), CodeNotFound, "No such file or directory (os error 2)"},
		{"fs.ErrNotExist", fmt.Errorf("gone: %w", fs.ErrNotExist), CodeNotFound, "No such file or directory (os error 2)"},
		{"EACCES", syscall.EACCES, CodeInvalidRequest, "Permission denied (os error 13)"},
		{"EPERM", &os.PathError{Op: "chmod", Path: "/x", Err: syscall.EPERM}, CodeInvalidRequest, "Operation not permitted (os error 1)"},
		{"fs.ErrPermission", fmt.Errorf("no: %w", fs.ErrPermission), CodeInvalidRequest, "Permission denied (os error 13)"},
		{"EISDIR", syscall.EISDIR, CodeInternal, "Is a directory (os error 21)"},
		{"ENOTDIR", &os.PathError{Op: "open", Path: "/x", Err: syscall.ENOTDIR}, CodeInternal, "Not a directory (os error 20)"},
		{"EEXIST", syscall.EEXIST, CodeInternal, "File exists (os error 17)"},
		{"fs.ErrExist", fmt.Errorf("x: %w", fs.ErrExist), CodeInternal, "File exists (os error 17)"},
		{"ENOTEMPTY", syscall.ENOTEMPTY, CodeInternal, "Directory not empty (os error 39)"},
		{"EBADF", syscall.EBADF, CodeInternal, "Bad file descriptor (os error 9)"},
		{"EROFS", syscall.EROFS, CodeInternal, "Read-only file system (os error 30)"},
		// The reference links musl: its strerror texts, not glibc's.
		{"ELOOP", syscall.ELOOP, CodeInternal, "Symbolic link loop (os error 40)"},
		{"ENAMETOOLONG", syscall.ENAMETOOLONG, CodeInternal, "Filename too long (os error 36)"},
		{"ENXIO", syscall.ENXIO, CodeInternal, "No such device or address (os error 6)"},
		{"EIO", syscall.EIO, CodeInternal, "I/O error (os error 5)"},
		{"EXDEV", syscall.EXDEV, CodeInternal, "Cross-device link (os error 18)"},
		{"EMFILE", syscall.EMFILE, CodeInternal, "No file descriptors available (os error 24)"},
		{"unlisted errno keeps Go's text", syscall.Errno(4095), CodeInternal, "Errno 4095 (os error 4095)"},
		{"not an OS error", errors.New("boom"), CodeInternal, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromOSError(tt.err)
			if got.Code != tt.code || got.Message != tt.msg {
				t.Errorf("FromOSError(%v) = {%d %q}, want {%d %q}", tt.err, got.Code, got.Message, tt.code, tt.msg)
			}
		})
	}
}

// TestFromOSErrorRealFiles maps errors the kernel really returns, with the
// texts the reference answered for the same operations.
func TestFromOSErrorRealFiles(t *testing.T) {
	dir := t.TempDir()
	loop := dir + "/loop"
	if err := os.Symlink(loop, loop); err != nil {
		t.Fatal(err)
	}
	file := dir + "/f"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		op   func() error
		code int
		msg  string
	}{
		{"missing", func() error { _, err := os.ReadFile(dir + "/missing"); return err }, CodeNotFound, "No such file or directory (os error 2)"},
		{"symlink loop", func() error { _, err := os.ReadFile(loop); return err }, CodeInternal, "Symbolic link loop (os error 40)"},
		{"name too long", func() error { _, err := os.ReadFile(dir + "/" + strings.Repeat("a", 300)); return err }, CodeInternal, "Filename too long (os error 36)"},
		{"below a file", func() error { _, err := os.ReadFile(file + "/x"); return err }, CodeInternal, "Not a directory (os error 20)"},
		{"write a directory", func() error { return os.WriteFile(dir, nil, 0o644) }, CodeInternal, "Is a directory (os error 21)"},
		{"mkdir existing", func() error { return os.Mkdir(dir, 0o755) }, CodeInternal, "File exists (os error 17)"},
		{"rmdir non-empty", func() error { return syscall.Rmdir(dir) }, CodeInternal, "Directory not empty (os error 39)"},
	}
	for _, tt := range tests {
		err := tt.op()
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		got := FromOSError(err)
		if got.Code != tt.code || got.Message != tt.msg {
			t.Errorf("%s: FromOSError(%v) = {%d %q}, want {%d %q}", tt.name, err, got.Code, got.Message, tt.code, tt.msg)
		}
	}
}

func TestSpawnError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		msg  string
	}{
		{"ENOENT", syscall.ENOENT, "No such file or directory (os error 2)"},
		{"fork/exec ENOENT", &os.PathError{Op: "fork/exec", Path: "/nope", Err: syscall.ENOENT}, "No such file or directory (os error 2)"},
		{"chdir ENOTDIR", &os.PathError{Op: "chdir", Path: "/f", Err: syscall.ENOTDIR}, "Not a directory (os error 20)"},
		{"EACCES", fmt.Errorf("start: %w", syscall.EACCES), "Permission denied (os error 13)"},
		{"fs.ErrNotExist", fmt.Errorf("x: %w", fs.ErrNotExist), "No such file or directory (os error 2)"},
		{"other", errors.New("weird"), "weird"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SpawnError(tt.err)
			// Every spawn failure is -32603, permission and not-found included.
			if got.Code != CodeInternal || got.Message != tt.msg {
				t.Errorf("SpawnError(%v) = {%d %q}, want {%d %q}", tt.err, got.Code, got.Message, CodeInternal, tt.msg)
			}
		})
	}
}

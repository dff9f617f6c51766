// The server package (run in process here) builds on Linux only.

//go:build linux

package client_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	serverpkg "github.com/execgo/exec-server/server"
)

// inProcessServer serves cfg on 127.0.0.1 until the test ends and returns
// its URL.
func inProcessServer(t *testing.T, cfg serverpkg.Config) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	urls := make(chan string, 1)
	cfg.Listen = "ws://127.0.0.1:0"
	cfg.DirectChildren = true
	cfg.OnListen = func(u string) { urls <- u }
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := serverpkg.Run(ctx, cfg); err != nil {
			t.Errorf("server.Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case u := <-urls:
		return u
	case <-done:
		t.Fatal("the server ended before listening")
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not listen within 10s")
	}
	return ""
}

// TestStdinBudgetIsTemporary: when the server-wide stdin budget is spent
// (processes not reading their input), a write fails with ErrStdinBusy, a
// temporary error, not ErrStdinClosed: the process's stdin is still open.
func TestStdinBudgetIsTemporary(t *testing.T) {
	ctx := testCtx(t)
	url := inProcessServer(t, serverpkg.Config{MaxStdinBytes: 1 << 20})
	c, err := client.Dial(ctx, url, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.Start(ctx, client.Cmd{Argv: []string{"sleep", "60"}, Env: shEnv, StdinPipe: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(ctx)
	chunk := make([]byte, 128<<10)
	var werr error
	for i := 0; i < 64 && werr == nil; i++ {
		werr = p.Write(ctx, chunk)
	}
	if werr == nil {
		t.Fatal("8 MiB written to a process that reads nothing, through a 1 MiB budget")
	}
	if errors.Is(werr, client.ErrStdinClosed) {
		t.Errorf("budget exhausted: %v, reported as ErrStdinClosed (permanent)", werr)
	}
	if !errors.Is(werr, client.ErrStdinBusy) {
		t.Errorf("budget exhausted: %v, want ErrStdinBusy", werr)
	}
}

// TestErrorsMatchFS: the SDK's errors match the io/fs sentinels where they
// mean that, on both servers (the reference by code alone: it sends no
// error data), and nothing else.
func TestErrorsMatchFS(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		dir := t.TempDir()
		missing := filepath.Join(dir, "missing")
		_, err := c.ReadFile(ctx, missing)
		if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrPermission) {
			t.Errorf("ReadFile of a missing file: %v; want fs.ErrNotExist only", err)
		}
		if _, err := c.Stat(ctx, missing); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat of a missing file: %v; want fs.ErrNotExist", err)
		}
		if err := c.Mkdir(ctx, filepath.Join(missing, "sub")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Mkdir under a missing parent: %v; want fs.ErrNotExist", err)
		}
		err = c.Mkdir(ctx, dir)
		if s.name == "reference" {
			// -32603 "File exists (os error 17)": only the text says so.
			if err == nil {
				t.Errorf("Mkdir of an existing directory succeeded")
			}
			return
		}
		if !errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Mkdir of an existing directory: %v; want fs.ErrExist", err)
		}
		// Not found at spawn is -32603, still fs.ErrNotExist by its kind.
		_, err = c.Start(ctx, client.Cmd{Argv: []string{filepath.Join(dir, "no-such-program")}, Env: shEnv})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Start of a missing program: %v; want fs.ErrNotExist", err)
		}
	})
}

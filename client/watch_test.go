package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
)

// nextChange waits for a change set that names path with kind.
func nextChange(t testing.TB, w *client.Watch, path, kind string) client.ChangeSet {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case cs, ok := <-w.Changes():
			if !ok {
				t.Fatalf("changes closed (err %v) waiting for %s %s", w.Err(), kind, path)
			}
			for _, c := range cs.Changes {
				if c.Path == path && c.Kind == kind {
					return cs
				}
			}
		case <-timeout:
			t.Fatalf("no %s of %s", kind, path)
		}
	}
}

// TestWatch: created, modified and removed changes of a recursive watch as
// local paths; Close ends the channel; a missing path fails; the
// reference, which has no fs/watch, gives errors.ErrUnsupported.
func TestWatch(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		dir := t.TempDir()
		if s.name == "reference" {
			if _, err := c.Watch(ctx, dir, true); !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("Watch on the reference: %v, want ErrUnsupported", err)
			}
			return
		}
		if _, err := c.Watch(ctx, "relative", false); err == nil {
			t.Error("Watch of a relative path: no error")
		}
		if _, err := c.Watch(ctx, filepath.Join(dir, "missing"), false); err == nil {
			t.Error("Watch of a missing path: no error")
		}
		w, err := c.Watch(ctx, dir, true)
		if err != nil {
			t.Fatal(err)
		}
		if w.Path() != dir {
			t.Errorf("Path %q", w.Path())
		}
		sub := filepath.Join(dir, "sub")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		nextChange(t, w, sub, client.ChangeCreated)
		f := filepath.Join(sub, "f")
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		nextChange(t, w, f, client.ChangeCreated)
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
		nextChange(t, w, f, client.ChangeRemoved)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		for range w.Changes() {
		}
		if w.Err() != nil {
			t.Errorf("Err after Close: %v", w.Err())
		}
		if err := w.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// TestWatchReconnect: the server's watches end with the connection; after
// the client reconnects, the watch is set again, says Overflow once (what
// happened in between was not seen), and reports changes again.
func TestWatchReconnect(t *testing.T) {
	bin, err := ours()
	if err != nil {
		t.Skip(err)
	}
	s := server{name: "ours", bin: bin, env: func(testing.TB) []string { return os.Environ() }}
	p := newProxy(t, strings.TrimPrefix(s.listen(t), "ws://"))
	ctx := testCtx(t)
	c, err := client.Dial(ctx, p.url(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir := t.TempDir()
	w, err := c.Watch(ctx, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(dir, "a")
	if err := os.WriteFile(a, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	nextChange(t, w, a, client.ChangeCreated)
	p.cut()
	timeout := time.After(20 * time.Second)
	for overflow := false; !overflow; {
		select {
		case cs, ok := <-w.Changes():
			if !ok {
				t.Fatalf("changes closed: %v", w.Err())
			}
			overflow = cs.Overflow
		case <-timeout:
			t.Fatal("no Overflow set after the reconnect")
		}
	}
	b := filepath.Join(dir, "b")
	if err := os.WriteFile(b, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	nextChange(t, w, b, client.ChangeCreated)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range w.Changes() {
	}
	if !errors.Is(w.Err(), client.ErrClosed) {
		t.Errorf("Err after the client's Close: %v", w.Err())
	}
}

// BenchmarkWatchLatency: from a file write on the server's machine to the
// fs/changed that names it reaching the client (ns/op is that latency,
// including the server's coalescing window).
func BenchmarkWatchLatency(b *testing.B) {
	bin, err := ours()
	if err != nil {
		b.Skip(err)
	}
	s := server{name: "ours", bin: bin, env: func(testing.TB) []string { return os.Environ() }}
	c := s.stdio(b, client.Options{})
	ctx := testCtx(b)
	dir := b.TempDir()
	w, err := c.Watch(ctx, dir, false)
	if err != nil {
		b.Fatal(err)
	}
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	nextChange(b, w, f, client.ChangeCreated)
	for b.Loop() {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
		nextChange(b, w, f, client.ChangeModified)
		// The write's other events (truncate, close) may follow in a
		// second set: let the window pass, untimed, so each round starts
		// clean.
		b.StopTimer()
		drain(w, 30*time.Millisecond)
		b.StartTimer()
	}
}

func drain(w *client.Watch, quiet time.Duration) {
	for {
		select {
		case <-w.Changes():
		case <-time.After(quiet):
			return
		}
	}
}

// BenchmarkWatch10kDirsRSS: the server process's memory for one recursive
// watch over 10 000 directories, end to end (our server over stdio):
// rss-MB is the growth of its RSS from before the watch to after it was
// set. Run with -benchtime 1x.
func BenchmarkWatch10kDirsRSS(b *testing.B) {
	bin, err := ours()
	if err != nil {
		b.Skip(err)
	}
	s := server{name: "ours", bin: bin, env: func(testing.TB) []string { return os.Environ() }}
	dir := b.TempDir()
	for i := range 100 {
		for j := range 100 {
			if err := os.MkdirAll(filepath.Join(dir, "d"+strconv.Itoa(i), "e"+strconv.Itoa(j)), 0o755); err != nil {
				b.Fatal(err)
			}
		}
	}
	for b.Loop() {
		b.StopTimer()
		cmd := s.command(b, "stdio")
		ctx := testCtx(b)
		c, err := client.DialStdio(ctx, cmd, client.Options{})
		if err != nil {
			b.Fatal(err)
		}
		before := procRSS(b, cmd.Process.Pid)
		b.StartTimer()
		w, err := c.Watch(ctx, dir, true)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		time.Sleep(200 * time.Millisecond) // let the watch's goroutines settle
		b.ReportMetric(float64(procRSS(b, cmd.Process.Pid)-before)/(1<<20), "rss-MB")
		w.Close()
		c.Close()
		b.StartTimer()
	}
}

// procRSS reads a process's resident set size in bytes.
func procRSS(tb testing.TB, pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		tb.Skip(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	tb.Skip("no VmRSS")
	return 0
}

// When the server dies, Changes closes within the reconnect bounds and Err
// says why (before, the watch waited forever); when a new server comes up on
// the same address, a Client without processes starts a fresh session and
// its watch goes on (one Overflow set for what was missed).
func TestWatchServerDeath(t *testing.T) {
	bin, err := ours()
	if err != nil {
		t.Skip(err)
	}
	s := server{name: "ours", bin: bin, env: func(testing.TB) []string { return os.Environ() }}
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "gone", true: "restarted"}[restart], func(t *testing.T) {
			ctx := testCtx(t)
			dir := t.TempDir()
			first := s.command(t, "ws://127.0.0.1:0")
			url := startListening(t, first)
			c, err := client.Dial(ctx, url, client.Options{ReconnectTimeout: 5 * time.Minute, RefusedTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			w, err := c.Watch(ctx, dir, true)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			first.Process.Kill()
			first.Wait()
			if !restart {
				timeout := time.After(60 * time.Second)
				for {
					select {
					case _, ok := <-w.Changes():
						if ok {
							continue
						}
						if !errors.Is(w.Err(), client.ErrConnectionLost) {
							t.Errorf("Err = %v, want ErrConnectionLost", w.Err())
						}
						return
					case <-timeout:
						t.Fatal("Changes still open a minute after the server died")
					}
				}
			}
			startListening(t, s.command(t, url))
			f := filepath.Join(dir, "after")
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				// Until the watch is set again on the new server.
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					os.WriteFile(f, []byte(strconv.Itoa(i)), 0o644)
				}
			}()
			timeout := time.After(30 * time.Second)
			for {
				select {
				case cs, ok := <-w.Changes():
					if !ok {
						t.Fatalf("Changes closed after the restart: %v", w.Err())
					}
					for _, ch := range cs.Changes {
						if ch.Path == f {
							return
						}
					}
				case <-timeout:
					t.Fatal("no change reported after the restart")
				}
			}
		})
	}
}

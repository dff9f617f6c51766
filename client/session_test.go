package client_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/protocol"
)

// resume attaches a new Client to session sid, retrying while the server
// has not yet noticed that the previous connection ended.
func resume(t *testing.T, ctx context.Context, url, sid string) *client.Client {
	t.Helper()
	for {
		c, err := client.Dial(ctx, url, client.Options{ResumeSession: sid})
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		if ctx.Err() != nil {
			t.Fatalf("resuming %s: %v", sid, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Detach leaves the session's processes running, to be resumed; Close
// terminates them.
func TestDetachLeavesProcessesRunning(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		url := s.listen(t)
		for _, detach := range []bool{true, false} {
			c, err := client.Dial(ctx, url, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := c.Start(context.WithoutCancel(ctx), client.Cmd{Argv: []string{"sleep", "60"}, Env: shEnv})
			if err != nil {
				t.Fatal(err)
			}
			sid, id := c.SessionID(), p.ID()
			if detach {
				err = c.Detach()
			} else {
				err = c.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			// Close's kill may be reported before the client closes;
			// after Detach the process is still running.
			if code, err := p.Wait(ctx); !errors.Is(err, client.ErrClosed) && (detach || err != nil) {
				t.Errorf("detach=%v: Wait after closing the client: %d, %v", detach, code, err)
			}
			if err := c.Detach(); err != nil {
				t.Errorf("Detach of a closed client: %v", err)
			}
			r := resume(t, ctx, url, sid)
			after := uint64(0)
			res, err := r.ReadProcess(ctx, protocol.ReadParams{ProcessID: id, AfterSeq: &after})
			if err != nil {
				t.Fatalf("detach=%v: process/read after resuming: %v", detach, err)
			}
			if detach && res.Exited {
				t.Errorf("Detach: the process exited: %+v", res)
			}
			// Close's kill takes effect shortly after process/terminate
			// answers.
			for wait := uint64(1000); !detach && !res.Exited; {
				if ctx.Err() != nil {
					t.Fatal("Close: the process still runs")
				}
				if res, err = r.ReadProcess(ctx, protocol.ReadParams{ProcessID: id, AfterSeq: &after, WaitMs: &wait}); err != nil {
					t.Fatal(err)
				}
			}
			if detach {
				if _, err := client.TerminateByID(r, ctx, id); err != nil {
					t.Error(err)
				}
			}
			r.Close()
		}
	})
}

// OnStateChange reports the first connection, a dropped connection, its resumption and, when
// the server cannot be reached again, the end.
func TestOnStateChange(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		px := newProxy(t, strings.TrimPrefix(s.listen(t), "ws://"))
		type change struct {
			s   client.State
			err error
		}
		changes := make(chan change, 10)
		c, err := client.Dial(ctx, px.url(), client.Options{
			ReconnectTimeout: 2 * time.Second,
			OnStateChange:    func(s client.State, err error) { changes <- change{s, err} },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		next := func(want client.State) error {
			t.Helper()
			select {
			case ch := <-changes:
				if ch.s != want {
					t.Fatalf("state %v (%v), want %v", ch.s, ch.err, want)
				}
				return ch.err
			case <-ctx.Done():
				t.Fatalf("no %v", want)
			}
			return nil
		}
		next(client.Connected)
		px.cut()
		if err := next(client.Reconnecting); err == nil {
			t.Error("Reconnecting without a reason")
		}
		next(client.Reconnected)
		if _, err := c.EnvironmentStatus(ctx); err != nil {
			t.Fatal(err)
		}
		px.ln.Close()
		px.cut()
		next(client.Reconnecting)
		if err := next(client.Lost); !errors.Is(err, client.ErrConnectionLost) {
			t.Errorf("Lost with %v, want ErrConnectionLost", err)
		}
		c.Close()
		select {
		case ch := <-changes:
			t.Errorf("after Lost and Close: %v", ch.s)
		default:
		}
	})
}

// Exited is closed when the exit status is known, while a background job
// still holds the output open: the job writes only after the test saw
// Exited, and its output still arrives before Wait returns.
func TestExitedBeforeOutputEnds(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		flag := filepath.Join(t.TempDir(), "go")
		script := `(while [ ! -e "$1" ]; do sleep 0.02; done; echo late) & echo early; exit 4`
		var out strings.Builder
		var mu sync.Mutex
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", script, "sh", flag}, Env: shEnv, Stdout: lockedBuilder{&mu, &out}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Exited():
		case <-ctx.Done():
			t.Fatal("Exited never closed")
		}
		if code, ok := p.ExitCode(); code != 4 || !ok {
			t.Errorf("ExitCode after Exited: %d, %v", code, ok)
		}
		if err := os.WriteFile(flag, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		code, err := p.Wait(ctx)
		if code != 4 || err != nil {
			t.Errorf("Wait: %d, %v", code, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if out.String() != "early\nlate\n" {
			t.Errorf("output %q, want early and late", out.String())
		}
	})
}

type lockedBuilder struct {
	mu *sync.Mutex
	b  io.Writer
}

func (l lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

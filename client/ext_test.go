package client_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/protocol"
)

// TestTerminateGrace: SIGTERM first, the kill after the grace period;
// errors.ErrUnsupported on a server without graceMs, with nothing sent.
func TestTerminateGrace(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		start := func(script string) *client.Process {
			p, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", script + "; echo ready; while :; do sleep 0.05; done"}, Env: shEnv})
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 6)
			if _, err := io.ReadFull(p.Stdout(), buf); err != nil || string(buf) != "ready\n" {
				t.Fatalf("read %q, %v", buf, err)
			}
			return p
		}
		polite := start(`trap 'exit 7' TERM`)
		if s.name == "reference" {
			if _, err := polite.TerminateGrace(ctx, time.Minute); !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("TerminateGrace on the reference: %v, want ErrUnsupported", err)
			}
			if running, err := polite.Terminate(ctx); !running || err != nil {
				t.Errorf("Terminate = %v, %v: the process was not running after TerminateGrace", running, err)
			}
			return
		}
		if running, err := polite.TerminateGrace(ctx, time.Minute); !running || err != nil {
			t.Errorf("TerminateGrace = %v, %v", running, err)
		}
		if code, err := polite.Wait(ctx); code != 7 || err != nil {
			t.Errorf("polite: Wait = %d, %v; want 7 (its SIGTERM handler)", code, err)
		}
		stubborn := start(`trap '' TERM`)
		if running, err := stubborn.TerminateGrace(ctx, 100*time.Millisecond); !running || err != nil {
			t.Errorf("TerminateGrace = %v, %v", running, err)
		}
		if code, err := stubborn.Wait(ctx); code != 137 || err != nil {
			t.Errorf("stubborn: Wait = %d, %v; want 137", code, err)
		}
	})
}

// TestTimeoutAndList: Cmd.Timeout and ListProcesses on this project's
// server; errors.ErrUnsupported on the reference, which has neither.
func TestTimeoutAndList(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		c := s.stdio(t, client.Options{})
		ctx := testCtx(t)
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"sleep", "30"}, Env: shEnv, Timeout: 100 * time.Millisecond, ProcessID: "slow"})
		if s.name == "reference" {
			if !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("Start with Timeout on the reference: %v, want ErrUnsupported", err)
			}
			if _, err := c.ListProcesses(ctx); !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("ListProcesses on the reference: %v, want ErrUnsupported", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if code, err := p.Wait(ctx); code != 137 || err != nil || !p.TimedOut() {
			t.Errorf("Wait = %d, %v, timed out %v; want 137 timed out", code, err, p.TimedOut())
		}
		q, err := c.Start(ctx, client.Cmd{Argv: []string{"true"}, Env: shEnv, Timeout: time.Minute, ProcessID: "quick"})
		if err != nil {
			t.Fatal(err)
		}
		if code, err := q.Wait(ctx); code != 0 || err != nil || q.TimedOut() {
			t.Errorf("quick: Wait = %d, %v, timed out %v", code, err, q.TimedOut())
		}
		if _, err := c.Start(ctx, client.Cmd{Argv: []string{"true"}, Env: shEnv, Timeout: 8 * 24 * time.Hour}); err == nil {
			t.Error("a Timeout past the bound was accepted")
		}
		list, err := c.ListProcesses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]protocol.ProcessInfo{}
		for _, in := range list {
			got[in.ProcessID] = in
		}
		if len(list) != 2 || !got["slow"].TimedOut || got["quick"].TimedOut || got["quick"].ExitCode == nil || *got["quick"].ExitCode != 0 {
			t.Errorf("ListProcesses = %+v", list)
		}
	})
}

package client_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
)

// As with exec.CommandContext, the end of Start's context kills the
// process; context.WithoutCancel opts out.
func TestStartContextKillsTheProcess(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		c := s.stdio(t, client.Options{})
		pctx, cancel := context.WithCancel(ctx)
		p, err := c.Start(pctx, client.Cmd{Argv: []string{"sleep", "100"}, Env: shEnv})
		if err != nil {
			t.Fatal(err)
		}
		// A second process, detached from the same context, survives it.
		q, err := c.Start(context.WithoutCancel(pctx), client.Cmd{Argv: []string{"sh", "-c", "sleep 0.5; echo alive"}, Env: shEnv})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		defer wcancel()
		code, err := p.Wait(wctx)
		if err != nil {
			t.Fatalf("Wait after the context ended: %v (the process was not killed)", err)
		}
		if code == 0 {
			t.Errorf("exit code 0, want a kill's")
		}
		out, err := io.ReadAll(q.Stdout())
		if err != nil || string(out) != "alive\n" {
			t.Errorf("the detached process's output %q, %v", out, err)
		}
		if code, err := q.Wait(wctx); err != nil || code != 0 {
			t.Errorf("the detached process: %d, %v", code, err)
		}
	})
}

package relay

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// The environments homed on a node share a few request dispatchers: a
// node homing 300 of them runs about as many goroutines as before, where
// nats.go's callback subscriptions ran one each; and a request still
// reaches its environment's home (ping), and none reaches a node that
// resigned it.
func TestFleetRequestsShareDispatchers(t *testing.T) {
	a, b := twoNodesExecutorOnA(t, "E")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if reg, attached, ok := b.fab.ping(ctx, "E"); !ok || !attached || reg == "" {
		t.Fatalf("ping of E from b: reg %q attached %v ok %v, want its home's answer", reg, attached, ok)
	}

	const envs = 300
	settle := func() int {
		time.Sleep(100 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	before := settle()
	for i := range envs {
		a.fab.becomeHome(fmt.Sprint("env-", i), "reg")
	}
	if grown := settle() - before; grown > envs/10 {
		t.Fatalf("homing %d environments grew the goroutines by %d, want at most %d", envs, grown, envs/10)
	}
	// They have no executor: a node that resigns one stops answering for
	// it, and a request then finds no responder at once.
	a.fab.resign("env-7")
	a.fab.mu.Lock()
	_, still := a.fab.homes["env-7"]
	_, tok := a.fab.reqEnv[envToken("env-7")]
	a.fab.mu.Unlock()
	if still || tok {
		t.Fatalf("env-7 resigned: home %v, token %v, want neither", still, tok)
	}
	start := time.Now()
	if _, _, ok := b.fab.ping(ctx, "env-7"); ok {
		t.Fatal("ping of a resigned environment answered")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("ping of a resigned environment took %v: no responders should be immediate", d)
	}
}

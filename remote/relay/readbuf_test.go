package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// goneRouter is a MemRouter whose executor route can be made to vanish
// while the sockets stay up: a harness frame then finds no route and the
// harness leg stops serving without a read error.
type goneRouter struct {
	*MemRouter
	gone atomic.Bool
}

func (g *goneRouter) Executor(env string) (Leg, string, bool) {
	if g.gone.Load() {
		return nil, "", false
	}
	return g.MemRouter.Executor(env)
}

// A socket whose serving ends without a read error (here: a harness frame
// whose route has gone) gives its last frame's read buffer back to the
// pool: with every socket but the idle executor's gone, no pooled buffer
// is out.
func TestReadBufferReturnedWhenServingStops(t *testing.T) {
	gr := &goneRouter{MemRouter: NewMemRouter(16, 16, 16, 16)}
	r := startRelay(t, Options{Router: gr})
	reg := r.register(t, "E", randomKey())
	dial(t, reg["url"].(string))
	waitFor(t, "executor attached", func() bool { l, _, ok := r.router.Executor("E"); return ok && l != nil })
	b := r.connect(t, "E", randomKey())
	h := dial(t, b["url"].(string))
	h.CloseRead(context.Background()) // answers the relay's close at once
	waitFor(t, "harness socket tracked", func() bool { return r.sockets() == 2 })
	gr.gone.Store(true)
	write(t, h, handshakeFrame("s-1", make([]byte, 100)))
	waitFor(t, "harness socket ended", func() bool { return r.sockets() == 1 })
	if n := r.readBufsHeld.Load(); n != 0 {
		t.Fatalf("%d pooled read buffers out after the harness socket ended, want 0", n)
	}
}

func (s *Server) sockets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.legs)
}

// waitFor polls cond (the state it waits on has no event of its own)
// with a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within 30 s", what)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

package relay

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Per-stream recovery time: how long a stream running the reliability
// extension was stalled by a lost socket or node until it resumed (its
// first resume frame routed afterwards, from either end), observed by the
// node routing it then:
//
//   - a harness socket lost at this node: from the moment it went;
//   - an executor socket lost at this node (it redials here): from then,
//     for each of the environment's streams resumed within ResumeGrace;
//   - a takeover (the executor redialled here from another home): from
//     the previous home's last heartbeat seen here (up to hbInterval
//     before it died, so the figure errs long by at most 1 s), for each
//     stream resumed within TakeoverGrace.
//
// Resume frames are rare (one per stream per reconnection): the lock
// below is off the data path.

var recoveryBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30}

type histogram struct {
	counts [11]atomic.Uint64 // per bucket of recoveryBuckets, then +Inf
	sumNs  atomic.Int64
	n      atomic.Uint64
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(recoveryBuckets) && s > recoveryBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
	h.n.Add(1)
}

func (h *histogram) write(w io.Writer, name, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cum uint64
	for i, le := range recoveryBuckets {
		cum += h.counts[i].Load()
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", name, le, cum)
	}
	cum += h.counts[len(recoveryBuckets)].Load()
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, cum, name, float64(h.sumNs.Load())/1e9, name, h.n.Load())
}

// stall is an environment's interruption: streams resumed before until
// count from since, once each.
type stall struct {
	since, until time.Time
	seen         map[string]bool
}

type recoveries struct {
	hist histogram

	mu     sync.Mutex
	held   map[string]time.Time // env + "\x00" + stream: harness socket lost at
	stalls map[string]*stall    // env → its executor's interruption
}

func streamKey(env, stream string) string { return env + "\x00" + stream }

// harnessLost: stream's harness socket went at this node.
func (r *recoveries) harnessLost(env, stream string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held == nil {
		r.held = make(map[string]time.Time)
	}
	r.held[streamKey(env, stream)] = now
}

// released: a held stream ended without resuming.
func (r *recoveries) released(env, stream string) {
	r.mu.Lock()
	delete(r.held, streamKey(env, stream))
	r.mu.Unlock()
}

// executorLost: env's streams stalled since 'since' until they resume,
// which counts only before until.
func (r *recoveries) executorLost(env string, since, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalls == nil {
		r.stalls = make(map[string]*stall)
	}
	now := time.Now()
	for e, st := range r.stalls {
		if now.After(st.until) {
			delete(r.stalls, e)
		}
	}
	r.stalls[env] = &stall{since: since, until: until, seen: make(map[string]bool)}
}

// resumed: a resume frame of stream was routed now.
func (r *recoveries) resumed(env, stream string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := streamKey(env, stream)
	if at, ok := r.held[k]; ok {
		delete(r.held, k)
		r.hist.observe(now.Sub(at))
		return
	}
	st := r.stalls[env]
	if st == nil {
		return
	}
	if now.After(st.until) {
		delete(r.stalls, env)
		return
	}
	if !st.seen[stream] {
		st.seen[stream] = true
		r.hist.observe(now.Sub(st.since))
	}
}

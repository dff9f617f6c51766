package relay

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Membership: which nodes are alive.
//
// Every node publishes a heartbeat on rly.hb.<node> each hbInterval. A
// node silent for Options.FleetNodeDeadAfter is only suspected: the
// heartbeat shares its NATS connection with bulk frames, and a node
// starved of CPU (or whose heartbeat queues behind frames) can be late
// while alive. Before it is declared dead it is asked directly, a request
// on rly.probe.<node>:
//
//   - an answer: it is alive (the suspicion is refuted and counted);
//   - "no responders": it has no subscription on NATS any more, its
//     connection is gone (a killed process's socket is closed by its
//     kernel, and the NATS server drops its interest at once): dead;
//   - no answer in time: still suspected, probed again; it is declared
//     dead once its probes have gone unanswered for probePatience times
//     FleetNodeDeadAfter (a host gone without closing its sockets, whose
//     interest the NATS server keeps until its own pings fail, or a node
//     hung). A live node this late is of no use to its streams anyway.
//
// A dead node's legs go (reapDead). Death detection is not on the path of
// a takeover: a dead home's executor redials to a survivor, which
// announces itself and moves every forwarder at once (becomeHome, onHome);
// it releases what only the dead node would have released.

const probePatience = 4

type membership struct {
	probing  map[string]bool      // a probe of the node is out
	suspect  map[string]time.Time // suspected since (its first probe)
	declared map[string]time.Time // nodes declared dead, until heard again
	reap     chan struct{}        // a node was declared dead: reap now
}

func (f *fabric) onHeartbeat(m *nats.Msg) {
	node := strings.TrimPrefix(m.Subject, "rly.hb.")
	f.mu.Lock()
	f.peers[node] = time.Now()
	delete(f.mem.declared, node)
	delete(f.mem.suspect, node)
	f.mu.Unlock()
	f.peerHeard(node, string(m.Data)) // its peer link address, if any
}

// onProbe answers another node asking whether this one is alive.
func (f *fabric) onProbe(m *nats.Msg) { m.Respond(nil) }

// heartbeats publishes this node's and acts on the silence of others.
func (f *fabric) heartbeats() {
	defer f.s.wg.Done()
	// A shorter FleetNodeDeadAfter than three heartbeats would make every
	// live node look silent between two of them: beat faster then.
	iv := min(hbInterval, f.s.opts.FleetNodeDeadAfter/3)
	t := time.NewTicker(iv / 2)
	defer t.Stop()
	subj := "rly.hb." + f.node
	// The first at once: a node that dies young has been seen.
	hb := []byte(f.linkAddr) // where peers may link to this node (peerlink.go)
	f.nc.Publish(subj, hb)
	last := time.Now()
	for {
		select {
		case <-f.s.stop:
			return
		case now := <-t.C:
			if now.Sub(last) >= iv && !f.hbPaused.Load() {
				f.nc.Publish(subj, hb)
				last = now
			}
			f.reapDead(now)
			f.resizePools(now)
		case <-f.mem.reap:
			f.reapDead(time.Now())
		}
	}
}

// silent: node has not been heard for FleetNodeDeadAfter (counting from
// since, when this node started depending on it, if later). f.mu is held.
func (f *fabric) silent(node string, since, now time.Time) bool {
	seen, ok := f.peers[node]
	if !ok || seen.Before(since) {
		seen = since
	}
	return now.Sub(seen) >= f.s.opts.FleetNodeDeadAfter
}

// alive: node is not declared dead (it may be suspected). f.mu is held.
func (f *fabric) alive(node string, since, now time.Time) bool {
	_, dead := f.mem.declared[node]
	return !dead || !f.silent(node, since, now)
}

func (f *fabric) reapDead(now time.Time) {
	if f.nc.Status() != nats.CONNECTED {
		// We are the one cut off: others' silence means nothing.
		return
	}
	var lost []*remoteLeg
	var orphans []*fwdLeg
	suspects := map[string]bool{}
	f.mu.Lock()
	for _, rl := range f.remote {
		if !f.silent(rl.node, rl.at, now) {
			continue
		}
		if f.alive(rl.node, rl.at, now) {
			suspects[rl.node] = true
		} else {
			lost = append(lost, rl)
		}
	}
	for _, fl := range f.fwd {
		if fl.home == "" || !f.silent(fl.home, fl.at, now) {
			continue
		}
		if f.alive(fl.home, fl.at, now) {
			suspects[fl.home] = true
		} else {
			orphans = append(orphans, fl)
		}
	}
	for node, at := range f.mem.declared {
		// Forgotten once nothing here depends on it any more.
		if !suspects[node] && now.Sub(at) > 10*f.s.opts.FleetNodeDeadAfter {
			delete(f.mem.declared, node)
		}
	}
	for node := range f.mem.suspect {
		if !suspects[node] && !f.mem.probing[node] {
			delete(f.mem.suspect, node)
		}
	}
	var probe []string
	for node := range suspects {
		if _, ok := f.mem.suspect[node]; !ok {
			f.mem.suspect[node] = now
		}
		if !f.mem.probing[node] {
			f.mem.probing[node] = true
			probe = append(probe, node)
		}
	}
	f.mu.Unlock()
	for _, node := range probe {
		f.s.wg.Add(1)
		go f.probe(node)
	}
	for _, rl := range lost {
		f.s.log.Warn("fleet: node dead, dropping its harness legs", "node", rl.node, "env", rl.env)
		rl.lost()
	}
	for _, fl := range orphans {
		f.s.log.Warn("fleet: home node dead, closing its forwarded socket", "node", fl.home, "env", fl.env)
		fl.rehome("relay_node_lost")
	}
}

// probe asks a suspected node directly and declares it dead or alive
// (see the top of this file); the next reapDead acts on a death.
func (f *fabric) probe(node string) {
	defer f.s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), f.s.opts.FleetNodeDeadAfter)
	defer cancel()
	go func() {
		select {
		case <-f.s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, err := f.nc.RequestWithContext(ctx, "rly.probe."+node, nil)
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.mem.probing, node)
	switch {
	case err == nil:
		f.peers[node] = now
		delete(f.mem.declared, node)
		delete(f.mem.suspect, node)
		f.st.refuted.Add(1)
		f.s.log.Info("fleet: a silent node answered its probe: alive", "node", node)
	case errors.Is(err, nats.ErrNoResponders):
		f.declareLocked(node, now, "no responders")
	case errors.Is(err, context.DeadlineExceeded):
		if since, ok := f.mem.suspect[node]; ok && now.Sub(since) >= probePatience*f.s.opts.FleetNodeDeadAfter {
			f.declareLocked(node, now, "silent, probe unanswered")
		}
	}
}

func (f *fabric) declareLocked(node string, now time.Time, why string) {
	if _, ok := f.mem.declared[node]; ok {
		return
	}
	f.mem.declared[node] = now
	delete(f.mem.suspect, node)
	f.st.nodesLost.Add(1)
	f.s.log.Warn("fleet: node declared dead", "node", node, "why", why)
	select {
	case f.mem.reap <- struct{}{}:
	default:
	}
}

package relay

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// CurrentChecker is implemented by stores that can tell, without a round
// trip, that reg is env's current registration. A false answer means "not
// known here": the caller asks the store itself.
type CurrentChecker interface {
	IsCurrentRegistration(env, reg string) bool
}

// regMirror is a node's copy of the registration ids in the KV bucket,
// fed by a watch: an executor redialling a node after its own died (a
// takeover, hundreds at once) is checked against it instead of a
// JetStream read each, which took 194 ms p50 / 350 ms p99 while 332
// executors attached at once (exec-bench fleet). It only ever says yes:
// an id it lacks, a different id, or an entry older than the bucket's TTL
// (expiry leaves no marker to watch) sends the caller to the bucket. A
// registration replaced moments ago on another node may still be seen
// as current here until the watch delivers the new one, as a bucket read
// racing the put would.
type regMirror struct {
	ttl, max int64 // ns; entries kept before a prune
	mu       sync.Mutex
	ids      map[string]mirrored // env → its registration
}

type mirrored struct {
	id string
	at time.Time // put or touched
}

// watchRegistrations starts the mirror; it ends when the NATS connection
// closes (the watch's subscription closes its channel). nil if the watch
// cannot start: every check then goes to the bucket.
func watchRegistrations(regs jetstream.KeyValue, ttl time.Duration, maxRecords int) *regMirror {
	w, err := regs.WatchAll(context.Background())
	if err != nil {
		return nil
	}
	m := &regMirror{ttl: int64(ttl), max: int64(2 * maxRecords), ids: make(map[string]mirrored)}
	go func() {
		for e := range w.Updates() {
			if e != nil {
				m.apply(e)
			}
		}
	}()
	return m
}

func (m *regMirror) apply(e jetstream.KeyValueEntry) {
	b, err := base64.RawURLEncoding.DecodeString(e.Key())
	if err != nil {
		return
	}
	env := string(b)
	var id string
	if e.Operation() == jetstream.KeyValuePut {
		var v kvReg
		if json.Unmarshal(e.Value(), &v) == nil {
			id = v.ID
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == "" {
		delete(m.ids, env)
		return
	}
	if int64(len(m.ids)) >= m.max {
		// Expired registrations leave no marker: drop them here.
		now := time.Now()
		for k, v := range m.ids {
			if int64(now.Sub(v.at)) >= m.ttl {
				delete(m.ids, k)
			}
		}
		if int64(len(m.ids)) >= m.max {
			clear(m.ids)
		}
	}
	m.ids[env] = mirrored{id: id, at: e.Created()}
}

func (m *regMirror) current(env, reg string) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	v, ok := m.ids[env]
	m.mu.Unlock()
	return ok && v.id == reg && int64(time.Since(v.at)) < m.ttl
}

// IsCurrentRegistration: the mirror knows reg as env's registration.
func (k *KVStore) IsCurrentRegistration(env, reg string) bool { return k.mirror.current(env, reg) }

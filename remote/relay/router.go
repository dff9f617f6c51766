package relay

import (
	"errors"
	"sync"
)

// Leg is one rendezvous websocket as the router sees it: a socket on this
// node, or one on another node of a fleet that frames reach through NATS.
type Leg interface {
	// Send queues one binary frame; false means the leg is gone or too slow
	// (and has been cut). frame is borrowed for the call only: a leg that
	// keeps it copies it.
	Send(frame []byte) bool
	// sendOwned is Send of a frame the leg may keep without a copy (one
	// NATS handed over).
	sendOwned(frame []byte) bool
	// Close ends the leg.
	Close(reason string)
	// Cut drops the socket at once, as a network failure would.
	Cut()
	// Env is the environment the leg serves.
	Env() string
	// deliver queues f behind what is queued: the fault shaper's delayed
	// frames and the tests' injected messages. A leg on another node
	// ignores the delay and drops text messages.
	deliver(f outFrame) bool
}

// Router errors.
var (
	ErrNoExecutor   = errors.New("relay: no executor attached")
	ErrStaleRoute   = errors.New("relay: registration is not the attached one")
	ErrStreamOwned  = errors.New("relay: stream id belongs to another socket")
	ErrTooMany      = errors.New("relay: limit reached")
	errUnknownRoute = errors.New("relay: unknown route")
)

// Router knows, per environment, the executor leg (and the registration it
// dialled for) and which harness leg owns each stream id. It moves no
// bytes. A multi-node router would return Legs that forward to the node
// holding the socket.
type Router interface {
	// AttachExecutor makes l the executor leg of env for registration reg
	// and returns the legs it displaces, which the caller closes: the
	// previous executor leg, and its harness legs unless reg is the same
	// registration (the executor reconnected: streams it kept resume).
	AttachExecutor(env, reg string, l Leg) (displaced []Leg, err error)
	// DetachExecutor removes l if it is still env's executor. Streams
	// both ends run the reliability extension on stay, with their harness
	// legs, waiting for the executor to come back (waiting is then true;
	// ExpireExecutor ends the wait); the others are returned with their
	// harness legs (reset), and legs left without streams too (close).
	DetachExecutor(env string, l Leg) (reset map[Leg][]string, close []Leg, waiting bool)
	// ExpireExecutor ends the wait for an executor that did not come back:
	// it removes the route and returns its harness legs and streams.
	ExpireExecutor(env string) map[Leg][]string
	// Executor returns env's executor leg (nil while waiting for it to
	// come back) and its registration id; ok is false without a route.
	Executor(env string) (Leg, string, bool)
	// AttachHarness admits a harness leg for (env, reg).
	AttachHarness(env, reg string, h Leg) error
	// DetachHarness removes h. Of the streams it owned, those both ends
	// advertised the reliability extension on are held (orphaned, awaiting
	// a new socket that claims them with Bind); the others are ended.
	DetachHarness(env string, h Leg) (ended, held []string)
	// Advertised notes that one end of stream runs the reliability
	// extension (its advertisement heartbeat, an ack frame or data with an
	// ack: fields in clear in the frame).
	Advertised(env, stream string, fromHarness bool)
	// Release ends a held stream that no socket claimed; false if it was
	// claimed (or is gone).
	Release(env, stream string) bool
	// Bind makes h the owner of stream (idempotent for the owner; a held
	// stream is adopted). With claim (a resume frame: the harness moved
	// the stream to a new socket), h takes it from its current owner even
	// if that socket has not been seen to go yet.
	Bind(env, stream string, h Leg, claim bool) error
	// Harness returns the owner of stream (false while it is held).
	Harness(env, stream string) (Leg, bool)
	// Known reports whether stream is routed or held.
	Known(env, stream string) bool
	// Unbind releases stream if h owns it (nil: whoever owns it).
	Unbind(env, stream string, h Leg)
	// Drop removes env's route and returns its legs (the caller closes
	// them).
	Drop(env string) (exec Leg, harness []Leg)
}

// MemRouter is a Router in memory, for one node.
type MemRouter struct {
	maxEnvs, maxHarness, maxStreamsPerHarness, maxStreamsPerEnv int
	// MaxHarnessPerEnv bounds one environment's harness legs (default
	// 256), so that one environment's users cannot take every slot.
	MaxHarnessPerEnv int

	mu      sync.Mutex
	envs    map[string]*route
	harness int // harness legs in all routes
}

type route struct {
	exec    Leg
	reg     string
	legs    map[Leg]map[string]struct{} // harness leg → its streams
	streams map[string]Leg              // nil: held for a new socket
	adv     map[string]uint8            // advertisement bits per stream
}

const (
	advHarness  = 1
	advExecutor = 2
)

func newRoute(l Leg, reg string) *route {
	return &route{exec: l, reg: reg, legs: make(map[Leg]map[string]struct{}), streams: make(map[string]Leg), adv: make(map[string]uint8)}
}

// NewMemRouter bounds executor legs, harness legs, streams per harness
// leg and streams per environment.
func NewMemRouter(maxEnvs, maxHarness, maxStreamsPerHarness, maxStreamsPerEnv int) *MemRouter {
	return &MemRouter{
		maxEnvs: maxEnvs, maxHarness: maxHarness,
		maxStreamsPerHarness: maxStreamsPerHarness, maxStreamsPerEnv: maxStreamsPerEnv,
		MaxHarnessPerEnv: 256,
		envs:             make(map[string]*route),
	}
}

func (m *MemRouter) AttachExecutor(env, reg string, l Leg) ([]Leg, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		if len(m.envs) >= m.maxEnvs {
			return nil, ErrTooMany
		}
		m.envs[env] = newRoute(l, reg)
		return nil, nil
	}
	var displaced []Leg
	if r.exec != nil {
		displaced = append(displaced, r.exec)
	}
	if r.reg == reg {
		r.exec = l
		return displaced, nil
	}
	for h := range r.legs {
		displaced = append(displaced, h)
	}
	m.harness -= len(r.legs)
	*r = *newRoute(l, reg)
	return displaced, nil
}

func (m *MemRouter) DetachExecutor(env string, l Leg) (reset map[Leg][]string, close []Leg, waiting bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil || r.exec != l {
		return nil, nil, false
	}
	reset = make(map[Leg][]string)
	for h, ss := range r.legs {
		for s := range ss {
			if r.adv[s] == advHarness|advExecutor {
				waiting = true
				continue
			}
			reset[h] = append(reset[h], s)
			delete(ss, s)
			delete(r.streams, s)
			delete(r.adv, s)
		}
		if len(ss) == 0 {
			close = append(close, h)
			delete(r.legs, h)
			m.harness--
		}
	}
	// Held streams whose harness socket went too.
	for _, owner := range r.streams {
		if owner == nil {
			waiting = true
			break
		}
	}
	if waiting {
		r.exec = nil
		return reset, close, true
	}
	m.harness -= len(r.legs)
	delete(m.envs, env)
	return reset, close, false
}

func (m *MemRouter) ExpireExecutor(env string) map[Leg][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil || r.exec != nil {
		return nil
	}
	out := make(map[Leg][]string, len(r.legs))
	for h, ss := range r.legs {
		for s := range ss {
			out[h] = append(out[h], s)
		}
	}
	m.harness -= len(r.legs)
	delete(m.envs, env)
	return out
}

func (m *MemRouter) Executor(env string) (Leg, string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		return nil, "", false
	}
	return r.exec, r.reg, true
}

func (m *MemRouter) AttachHarness(env, reg string, h Leg) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	switch {
	case r == nil:
		return ErrNoExecutor
	case r.reg != reg:
		return ErrStaleRoute
	case m.harness >= m.maxHarness:
		return ErrTooMany
	case m.MaxHarnessPerEnv > 0 && len(r.legs) >= m.MaxHarnessPerEnv:
		return ErrTooMany
	}
	r.legs[h] = make(map[string]struct{})
	m.harness++
	return nil
}

func (m *MemRouter) DetachHarness(env string, h Leg) (ended, held []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		return nil, nil
	}
	ss, ok := r.legs[h]
	if !ok {
		return nil, nil
	}
	for s := range ss {
		if r.adv[s] == advHarness|advExecutor {
			r.streams[s] = nil
			held = append(held, s)
			continue
		}
		ended = append(ended, s)
		delete(r.streams, s)
		delete(r.adv, s)
	}
	delete(r.legs, h)
	m.harness--
	return ended, held
}

func (m *MemRouter) Advertised(env, stream string, fromHarness bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		return
	}
	if _, ok := r.streams[stream]; !ok {
		return
	}
	if fromHarness {
		r.adv[stream] |= advHarness
	} else {
		r.adv[stream] |= advExecutor
	}
}

func (m *MemRouter) Release(env, stream string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		return false
	}
	if owner, ok := r.streams[stream]; !ok || owner != nil {
		return false
	}
	delete(r.streams, stream)
	delete(r.adv, stream)
	return true
}

func (m *MemRouter) Bind(env, stream string, h Leg, claim bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		return errUnknownRoute
	}
	ss, ok := r.legs[h]
	if !ok {
		return errUnknownRoute
	}
	owner, bound := r.streams[stream]
	switch {
	case bound && owner == h:
		return nil
	case bound && owner != nil && !claim:
		return ErrStreamOwned
	case len(ss) >= m.maxStreamsPerHarness:
		return ErrTooMany
	case !bound && len(r.streams) >= m.maxStreamsPerEnv:
		return ErrTooMany
	}
	if bound && owner != nil {
		delete(r.legs[owner], stream)
	}
	ss[stream] = struct{}{}
	r.streams[stream] = h
	return nil
}

func (m *MemRouter) Harness(env, stream string) (Leg, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		return nil, false
	}
	h := r.streams[stream]
	return h, h != nil
}

func (m *MemRouter) Known(env, stream string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		return false
	}
	_, ok := r.streams[stream]
	return ok
}

func (m *MemRouter) Unbind(env, stream string, h Leg) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		return
	}
	owner, ok := r.streams[stream]
	if !ok || (h != nil && owner != h) {
		return
	}
	delete(r.streams, stream)
	delete(r.adv, stream)
	if owner != nil {
		delete(r.legs[owner], stream)
	}
}

// Drop removes env's route whatever its state and returns its legs, which
// the caller closes: another node of a fleet has become the environment's
// home.
func (m *MemRouter) Drop(env string) (exec Leg, harness []Leg) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		return nil, nil
	}
	for h := range r.legs {
		harness = append(harness, h)
	}
	m.harness -= len(r.legs)
	delete(m.envs, env)
	return r.exec, harness
}

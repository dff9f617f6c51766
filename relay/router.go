package relay

import (
	"errors"
	"sync"
)

// Leg is one rendezvous websocket as the router sees it.
type Leg interface {
	// Send queues one binary frame; false means the leg is gone or too slow
	// (and has been cut).
	Send(frame []byte) bool
	// Close ends the leg.
	Close(reason string)
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
	// and returns the legs it displaces: the previous executor leg and its
	// harness legs, which the caller closes.
	AttachExecutor(env, reg string, l Leg) (displaced []Leg, err error)
	// DetachExecutor removes l if it is still env's executor and returns
	// env's harness legs with their streams, which are now orphaned.
	DetachExecutor(env string, l Leg) map[Leg][]string
	// Executor returns env's executor leg and its registration id.
	Executor(env string) (Leg, string, bool)
	// AttachHarness admits a harness leg for (env, reg).
	AttachHarness(env, reg string, h Leg) error
	// DetachHarness removes h and returns the streams it owned.
	DetachHarness(env string, h Leg) []string
	// Bind makes h the owner of stream (idempotent for the owner).
	Bind(env, stream string, h Leg) error
	// Harness returns the owner of stream.
	Harness(env, stream string) (Leg, bool)
	// Unbind releases stream if h owns it (nil: whoever owns it).
	Unbind(env, stream string, h Leg)
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
	streams map[string]Leg
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
		m.envs[env] = &route{exec: l, reg: reg, legs: make(map[Leg]map[string]struct{}), streams: make(map[string]Leg)}
		return nil, nil
	}
	var displaced []Leg
	if r.exec != nil {
		displaced = append(displaced, r.exec)
	}
	for h := range r.legs {
		displaced = append(displaced, h)
	}
	m.harness -= len(r.legs)
	*r = route{exec: l, reg: reg, legs: make(map[Leg]map[string]struct{}), streams: make(map[string]Leg)}
	return displaced, nil
}

func (m *MemRouter) DetachExecutor(env string, l Leg) map[Leg][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil || r.exec != l {
		return nil
	}
	out := make(map[Leg][]string, len(r.legs))
	for h, ss := range r.legs {
		list := make([]string, 0, len(ss))
		for s := range ss {
			list = append(list, s)
		}
		out[h] = list
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

func (m *MemRouter) DetachHarness(env string, h Leg) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.envs[env]
	if r == nil {
		return nil
	}
	ss, ok := r.legs[h]
	if !ok {
		return nil
	}
	list := make([]string, 0, len(ss))
	for s := range ss {
		list = append(list, s)
		delete(r.streams, s)
	}
	delete(r.legs, h)
	m.harness--
	return list
}

func (m *MemRouter) Bind(env, stream string, h Leg) error {
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
	if owner, ok := r.streams[stream]; ok {
		if owner != h {
			return ErrStreamOwned
		}
		return nil
	}
	if len(ss) >= m.maxStreamsPerHarness || len(r.streams) >= m.maxStreamsPerEnv {
		return ErrTooMany
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
	h, ok := r.streams[stream]
	return h, ok
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
	delete(r.legs[owner], stream)
}

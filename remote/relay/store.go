package relay

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"time"
)

// Registration is an executor's current registration for an environment.
type Registration struct {
	ID  string    // executor_registration_id
	Key PublicKey // the executor's static Noise key
	At  time.Time
}

// Authorization is what a harness_key_authorization stands for: one harness
// key may open one stream to one registration before Expires.
type Authorization struct {
	Env        string
	RegID      string
	HarnessKey PublicKey
	Expires    time.Time
}

// ErrStoreFull is returned when a bound of the store is reached.
var ErrStoreFull = errors.New("relay: store is full")

// Store holds the registry's state. Registrations are last-writer-wins per
// environment; authorizations are single-use: TakeAuthorization removes the
// entry it returns. A shared Store (with a shared URL secret) is what lets
// several relay nodes serve one registry.
type Store interface {
	PutRegistration(ctx context.Context, env string, r Registration) error
	Registration(ctx context.Context, env string) (Registration, bool, error)
	PutAuthorization(ctx context.Context, token string, a Authorization) error
	TakeAuthorization(ctx context.Context, token string) (Authorization, bool, error)
}

// Toucher is implemented by stores whose registrations expire: a node
// touches the registration of every executor it holds, so that only
// registrations without a live executor expire.
type Toucher interface {
	// TouchRegistration marks env's registration reg as in use now (no-op
	// if reg is no longer env's registration).
	TouchRegistration(ctx context.Context, env, reg string) error
}

// DefaultRegistrationTTL is how long a registration no node touched stays.
const DefaultRegistrationTTL = time.Hour

// MemStore is a Store in memory, for one node. A registration that is not
// touched for RegistrationTTL (no executor holds a socket for it) expires:
// ephemeral environment ids (one per CI job) must not fill the registry.
type MemStore struct {
	maxEnvs, maxAuth int
	now              func() time.Time
	ttl              time.Duration

	mu   sync.Mutex
	regs map[string]memReg
	// Keyed by the token's hash: a dump of the map does not hand out
	// usable authorizations.
	auth map[[32]byte]Authorization
}

type memReg struct {
	Registration
	seen time.Time // put or last touched
}

// NewMemStore returns a store holding at most maxEnvs registrations and
// maxAuth unexpired authorizations; registrations expire after
// DefaultRegistrationTTL without a touch.
func NewMemStore(maxEnvs, maxAuth int) *MemStore {
	return &MemStore{
		maxEnvs: maxEnvs, maxAuth: maxAuth, now: time.Now, ttl: DefaultRegistrationTTL,
		regs: make(map[string]memReg),
		auth: make(map[[32]byte]Authorization),
	}
}

// SetRegistrationTTL changes how long an untouched registration stays
// (d ≤ 0: the default).
func (m *MemStore) SetRegistrationTTL(d time.Duration) {
	if d <= 0 {
		d = DefaultRegistrationTTL
	}
	m.mu.Lock()
	m.ttl = d
	m.mu.Unlock()
}

func (m *MemStore) expired(r memReg, now time.Time) bool { return !now.Before(r.seen.Add(m.ttl)) }

func (m *MemStore) PutRegistration(_ context.Context, env string, r Registration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if _, ok := m.regs[env]; !ok && len(m.regs) >= m.maxEnvs {
		// Full: drop what expired (a sweep costs one pass over at most
		// maxEnvs entries, and only when full).
		for k, v := range m.regs {
			if m.expired(v, now) {
				delete(m.regs, k)
			}
		}
		if len(m.regs) >= m.maxEnvs {
			return ErrStoreFull
		}
	}
	m.regs[env] = memReg{Registration: r, seen: now}
	return nil
}

func (m *MemStore) Registration(_ context.Context, env string) (Registration, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.regs[env]
	if ok && m.expired(r, m.now()) {
		delete(m.regs, env)
		return Registration{}, false, nil
	}
	return r.Registration, ok, nil
}

func (m *MemStore) TouchRegistration(_ context.Context, env, reg string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.regs[env]; ok && r.ID == reg {
		r.seen = m.now()
		m.regs[env] = r
	}
	return nil
}

// registrations is for tests.
func (m *MemStore) registrations() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.regs)
}

func (m *MemStore) PutAuthorization(_ context.Context, token string, a Authorization) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.auth) >= m.maxAuth {
		now := m.now()
		for k, v := range m.auth {
			if !now.Before(v.Expires) {
				delete(m.auth, k)
			}
		}
		if len(m.auth) >= m.maxAuth {
			return ErrStoreFull
		}
	}
	m.auth[sha256.Sum256([]byte(token))] = a
	return nil
}

func (m *MemStore) TakeAuthorization(_ context.Context, token string) (Authorization, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := sha256.Sum256([]byte(token))
	a, ok := m.auth[k]
	delete(m.auth, k)
	return a, ok, nil
}

// pendingAuthorizations is for tests and metrics.
func (m *MemStore) pendingAuthorizations() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.auth)
}

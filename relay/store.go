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

// MemStore is a Store in memory, for one node.
type MemStore struct {
	maxEnvs, maxAuth int
	now              func() time.Time

	mu   sync.Mutex
	regs map[string]Registration
	// Keyed by the token's hash: a dump of the map does not hand out
	// usable authorizations.
	auth map[[32]byte]Authorization
}

// NewMemStore returns a store holding at most maxEnvs registrations and
// maxAuth unexpired authorizations.
func NewMemStore(maxEnvs, maxAuth int) *MemStore {
	return &MemStore{
		maxEnvs: maxEnvs, maxAuth: maxAuth, now: time.Now,
		regs: make(map[string]Registration),
		auth: make(map[[32]byte]Authorization),
	}
}

func (m *MemStore) PutRegistration(_ context.Context, env string, r Registration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.regs[env]; !ok && len(m.regs) >= m.maxEnvs {
		return ErrStoreFull
	}
	m.regs[env] = r
	return nil
}

func (m *MemStore) Registration(_ context.Context, env string) (Registration, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.regs[env]
	return r, ok, nil
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

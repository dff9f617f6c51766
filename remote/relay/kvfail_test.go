package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// failingStore fails every write once down, with a store error that is
// not a bound.
type failingStore struct {
	*MemStore
	down atomic.Bool
}

var errStoreDown = errors.New("no response from stream")

func (f *failingStore) PutRegistration(ctx context.Context, env string, r Registration) error {
	if f.down.Load() {
		return errStoreDown
	}
	return f.MemStore.PutRegistration(ctx, env, r)
}

func (f *failingStore) PutAuthorization(ctx context.Context, token string, a Authorization) error {
	if f.down.Load() {
		return errStoreDown
	}
	return f.MemStore.PutAuthorization(ctx, token, a)
}

// A store that fails (a fleet's KV buckets without a leader while
// JetStream elects one after a node loss) answers 503 store_unavailable,
// which clients retry, not registry_full or 429
// too_many_pending_authorizations, which name a bound that was not hit.
func TestStoreFailureIsNotABound(t *testing.T) {
	fs := &failingStore{MemStore: NewMemStore(16, 16)}
	r := startRelay(t, Options{Store: fs})
	reg := r.register(t, "E", randomKey())
	dial(t, reg["url"].(string))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l, _, ok := r.router.Executor("E"); ok && l != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("executor not attached")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fs.down.Store(true)
	st, m := post(t, r.env("E")+"/connect", harnessToken, map[string]any{"harness_public_key": randomKey()})
	if st != 503 || errCode(m) != "store_unavailable" {
		t.Fatalf("connect with the store down: %d %v", st, m)
	}
	st, m = post(t, r.env("F")+"/register", execToken, map[string]any{"security_profile": SecurityProfile, "executor_public_key": randomKey()})
	if st != 503 || errCode(m) != "store_unavailable" {
		t.Fatalf("register with the store down: %d %v", st, m)
	}
}

// With replicated buckets, a registration put through one server is read
// back at once through another: reads go to the bucket's leader, not to
// a replica that may not have applied the put yet (direct gets).
func TestKVReplicatedReadAfterWrite(t *testing.T) {
	servers, _ := startNATSCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stores []*KVStore
	for _, ns := range servers {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		st, err := NewKVStore(ctx, nc, KVStoreOptions{Replicas: 3, Memory: true})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, st)
		js, _ := jetstream.New(nc)
		s, err := js.Stream(ctx, "KV_relay_reg")
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowDirect {
			t.Fatal("the replicated registration bucket allows direct (replica) reads")
		}
	}
	for i := range 100 {
		env := fmt.Sprint("E", i)
		reg := Registration{ID: fmt.Sprint("reg_", i), Key: randomKey(), At: time.Now()}
		if err := stores[i%3].PutRegistration(ctx, env, reg); err != nil {
			t.Fatal(err)
		}
		got, ok, err := stores[(i+1)%3].Registration(ctx, env)
		if err != nil || !ok || got.ID != reg.ID {
			t.Fatalf("put %d through one server, read through another: %+v %v %v", i, got, ok, err)
		}
	}
}

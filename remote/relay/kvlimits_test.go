package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The KV buckets are bounded: records (registrations, authorizations) and
// the size of one. Past a bound a put is refused with ErrStoreFull or
// ErrValueTooLarge, and an existing registration can still be replaced.
func TestKVStoreLimits(t *testing.T) {
	nc := natsConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := NewKVStore(ctx, nc, KVStoreOptions{Memory: true, Prefix: "lim", MaxRegistrations: 3, MaxAuthorizations: 3, MaxValueSize: 3000})
	if err != nil {
		t.Fatal(err)
	}
	reg := func(i int) Registration {
		return Registration{ID: fmt.Sprintf("reg_%d", i), Key: randomKey(), At: time.Now()}
	}
	for i := range 3 {
		if err := k.PutRegistration(ctx, fmt.Sprintf("env-%d", i), reg(i)); err != nil {
			t.Fatalf("registration %d: %v", i, err)
		}
	}
	if err := k.PutRegistration(ctx, "env-3", reg(3)); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("4th registration: %v, want ErrStoreFull", err)
	}
	if err := k.PutRegistration(ctx, "env-0", reg(10)); err != nil {
		t.Fatalf("registering env-0 again in a full bucket: %v", err)
	}
	if r, ok, err := k.Registration(ctx, "env-0"); err != nil || !ok || r.ID != "reg_10" {
		t.Fatalf("env-0: %+v %v %v", r, ok, err)
	}
	if err := k.TouchRegistration(ctx, "env-1", "reg_1"); err != nil {
		t.Fatalf("touch in a full bucket: %v", err)
	}
	big := reg(4)
	big.ID = strings.Repeat("x", 2000)
	if err := k.PutRegistration(ctx, "env-0", big); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("registration of 3800 bytes: %v, want ErrValueTooLarge", err)
	}
	a := Authorization{Env: "env-0", RegID: "reg_10", HarnessKey: randomKey(), Expires: time.Now().Add(time.Minute)}
	for i := range 3 {
		if err := k.PutAuthorization(ctx, fmt.Sprintf("tok-%d", i), a); err != nil {
			t.Fatalf("authorization %d: %v", i, err)
		}
	}
	if err := k.PutAuthorization(ctx, "tok-3", a); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("4th authorization: %v, want ErrStoreFull", err)
	}
	if _, ok, err := k.TakeAuthorization(ctx, "tok-1"); !ok || err != nil {
		t.Fatalf("take in a full bucket: %v %v", ok, err)
	}
	// The bucket's stream carries the bounds, for every node binding it.
	k2, err := NewKVStore(ctx, nc, KVStoreOptions{Memory: true, Prefix: "lim", MaxRegistrations: 3, MaxAuthorizations: 3, MaxValueSize: 3000})
	if err != nil {
		t.Fatal(err)
	}
	if err := k2.PutRegistration(ctx, "env-4", reg(4)); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("registration through a second node: %v, want ErrStoreFull", err)
	}
}

// A full registration bucket is answered registry_full (503), a clear
// refusal, by a fleet node.
func TestFleetRegistryFull(t *testing.T) {
	url := startNATS(t)
	n := startNodeOpts(t, url, "a", "", nil, KVStoreOptions{Memory: true, MaxRegistrations: 2})
	for i := range 2 {
		n.register(t, fmt.Sprintf("E%d", i), randomKey())
	}
	st, m := post(t, n.env("E2")+"/register", execToken, map[string]any{"security_profile": SecurityProfile, "executor_public_key": randomKey()})
	if st != 503 || errCode(m) != "registry_full" {
		t.Fatalf("third environment: %d %v, want 503 registry_full", st, m)
	}
}

// JetStream answers 10077 (store failed) for any refusal of its store,
// not only the record bound: here a byte bound set on the buckets'
// streams refuses puts while both buckets are far below their record
// bounds. That is a store failure (503 store_unavailable, retried), not
// ErrStoreFull (registry_full / 429 too_many_pending_authorizations).
func TestKVStoreFailureBelowBoundIsNotFull(t *testing.T) {
	nc := natsConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := NewKVStore(ctx, nc, KVStoreOptions{Memory: true, Prefix: "bytes", MaxRegistrations: 100, MaxAuthorizations: 100})
	if err != nil {
		t.Fatal(err)
	}
	reg := Registration{ID: "reg_0", Key: randomKey(), At: time.Now()}
	if err := k.PutRegistration(ctx, "env-0", reg); err != nil {
		t.Fatal(err)
	}
	a := Authorization{Env: "env-0", RegID: "reg_0", HarnessKey: randomKey(), Expires: time.Now().Add(time.Minute)}
	if err := k.PutAuthorization(ctx, "tok-0", a); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"KV_bytes_reg", "KV_bytes_auth"} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		sc := st.CachedInfo().Config
		sc.MaxBytes = int64(st.CachedInfo().State.Bytes) + 16 // one record, not two
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	err = k.PutRegistration(ctx, "env-1", reg)
	if err == nil || errors.Is(err, ErrStoreFull) {
		t.Fatalf("registration refused by a byte bound: %v, want a store failure, not ErrStoreFull", err)
	}
	err = k.PutAuthorization(ctx, "tok-1", a)
	if err == nil || errors.Is(err, ErrStoreFull) {
		t.Fatalf("authorization refused by a byte bound: %v, want a store failure, not ErrStoreFull", err)
	}
}

// What the store tries again (KVStore.retry): what a new leader or a
// reconnection ends, not an answer.
func TestStoreTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), true},
		{nats.ErrTimeout, true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{nats.ErrConnectionReconnecting, true},
		{&jetstream.APIError{Code: 503, ErrorCode: jsErrClusterNotAvail}, true},
		{jetstream.ErrKeyNotFound, false},
		{jetstream.ErrKeyExists, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{&jetstream.APIError{Code: 503, ErrorCode: jsErrStoreFailed}, false},
		{ErrStoreFull, false},
		{context.Canceled, false},
		{nats.ErrConnectionClosed, false},
	} {
		if got := storeTransient(tc.err); got != tc.want {
			t.Errorf("storeTransient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// An authorization put again with the same record (an earlier try stored
// with its answer lost) is stored; another record under the same token
// is refused, and the first stays.
func TestKVPutAuthorizationTwice(t *testing.T) {
	nc := natsConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := NewKVStore(ctx, nc, KVStoreOptions{Memory: true, Prefix: "twice"})
	if err != nil {
		t.Fatal(err)
	}
	a := Authorization{Env: "E", RegID: "reg_1", HarnessKey: randomKey(), Expires: time.Now().Add(time.Minute)}
	if err := k.PutAuthorization(ctx, "hka_1", a); err != nil {
		t.Fatal(err)
	}
	if err := k.PutAuthorization(ctx, "hka_1", a); err != nil {
		t.Fatalf("the same record again: %v", err)
	}
	b := a
	b.Env = "F"
	if err := k.PutAuthorization(ctx, "hka_1", b); err == nil {
		t.Fatal("another record under the same token was stored")
	}
	got, ok, err := k.TakeAuthorization(ctx, "hka_1")
	if err != nil || !ok || got.Env != "E" {
		t.Fatalf("take: %+v %v %v", got, ok, err)
	}
	if _, ok, err := k.TakeAuthorization(ctx, "hka_1"); err != nil || ok {
		t.Fatalf("taken twice: %v %v", ok, err)
	}
}

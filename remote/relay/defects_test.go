package relay

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// A registration nobody holds a socket for expires, so that ephemeral
// environment ids cannot fill the store; one whose executor is attached
// is touched and stays.
func TestMemStoreRegistrationsExpire(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	m := NewMemStore(2, 10)
	m.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	m.SetRegistrationTTL(time.Minute)
	for _, env := range []string{"live", "gone"} {
		if err := m.PutRegistration(ctx, env, Registration{ID: "r-" + env}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.PutRegistration(ctx, "third", Registration{ID: "r3"}); err != ErrStoreFull {
		t.Fatalf("third environment while full: %v", err)
	}
	advance(40 * time.Second)
	m.TouchRegistration(ctx, "live", "r-live")
	m.TouchRegistration(ctx, "gone", "not-its-registration")
	advance(40 * time.Second)
	if err := m.PutRegistration(ctx, "third", Registration{ID: "r3"}); err != nil {
		t.Fatalf("third environment after the untouched one expired: %v", err)
	}
	if _, ok, _ := m.Registration(ctx, "live"); !ok {
		t.Fatal("touched registration expired")
	}
	if _, ok, _ := m.Registration(ctx, "gone"); ok {
		t.Fatal("untouched registration still there")
	}
	if n := m.registrations(); n != 2 {
		t.Fatalf("%d registrations kept, want 2", n)
	}
}

// The 1 025th distinct environment id ever registered used to get
// registry_full until the relay restarted.
func TestRegistryForgetsAbandonedEnvironments(t *testing.T) {
	r := startRelay(t, Options{MaxEnvironments: 4, RegistrationTTL: 100 * time.Millisecond})
	for i := range 4 {
		r.register(t, fmt.Sprintf("ci-job-%d", i), randomKey())
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, m := post(t, r.env("ci-job-new")+"/register", execToken, map[string]any{"security_profile": SecurityProfile, "executor_public_key": randomKey()})
		if st == 200 {
			break
		}
		if errCode(m) != "registry_full" || time.Now().After(deadline) {
			t.Fatalf("register after the others expired: %d %v", st, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An attached executor's registration is touched by its node and does not
// expire while the socket lives.
func TestAttachedRegistrationStays(t *testing.T) {
	r := startRelay(t, Options{RegistrationTTL: time.Second})
	reg, _ := r.attach(t, "E")
	time.Sleep(1500 * time.Millisecond)
	cur, ok, _ := r.store.Registration(context.Background(), "E")
	if !ok || cur.ID != reg["executor_registration_id"] {
		t.Fatalf("attached registration expired: %v %v", ok, cur.ID)
	}
}

// With no frame fault switched on, routing takes no fault-shaper lock: a
// test holding it does not stall production frames.
func TestProductionPathTakesNoFaultLock(t *testing.T) {
	p := newPair(t, Options{})
	h := p.harness(t)
	p.r.faults.mu.Lock()
	defer p.r.faults.mu.Unlock()
	const sid = "s-1"
	for i := range 10 {
		f := dataFrame(sid, uint32(i), []byte{byte(i)})
		write(t, h, f)
		if got := read(t, p.exec); string(got) != string(f) {
			t.Fatalf("frame %d to the executor differs", i)
		}
		write(t, p.exec, f)
		if got := read(t, h); string(got) != string(f) {
			t.Fatalf("frame %d to the harness differs", i)
		}
	}
}

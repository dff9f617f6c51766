package relay

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Two nodes' KV stores: a registration put through one becomes current
// in the other's mirror, a new registration of the environment replaces
// it there, and an entry older than the bucket's TTL is no longer taken
// as current (expiry leaves no marker to watch).
func TestKVRegistrationMirror(t *testing.T) {
	url := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := func() *KVStore {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		k, err := NewKVStore(ctx, nc, KVStoreOptions{Memory: true, Prefix: "mir", RegistrationTTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a, b := store(), store()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("%s: not within the guard", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if b.IsCurrentRegistration("env/1", "reg_1") {
		t.Fatal("current before any put")
	}
	if err := a.PutRegistration(ctx, "env/1", Registration{ID: "reg_1", Key: randomKey(), At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor("reg_1 current at b", func() bool { return b.IsCurrentRegistration("env/1", "reg_1") })
	if b.IsCurrentRegistration("env/1", "reg_2") || b.IsCurrentRegistration("env/2", "reg_1") {
		t.Fatal("another id or environment taken as current")
	}
	if err := a.PutRegistration(ctx, "env/1", Registration{ID: "reg_2", Key: randomKey(), At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor("reg_2 replacing reg_1 at b", func() bool {
		return b.IsCurrentRegistration("env/1", "reg_2") && !b.IsCurrentRegistration("env/1", "reg_1")
	})
	waitFor("reg_2 no longer current past the TTL", func() bool { return !b.IsCurrentRegistration("env/1", "reg_2") })
}

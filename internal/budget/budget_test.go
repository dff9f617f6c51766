package budget

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestTryAcquireAndRelease(t *testing.T) {
	b := New("test bytes", 100)
	steps := []struct {
		op   string
		n    int64
		ok   bool
		used int64
	}{
		{"try", 60, true, 60},
		{"try", 41, false, 60},
		{"try", 40, true, 100},
		{"try", 1, false, 100},
		{"release", 100, true, 0},
		{"try", 0, true, 0},
		{"try", -5, true, 0},
		{"try", 101, false, 0},
	}
	for i, s := range steps {
		ok := true
		if s.op == "try" {
			ok = b.TryAcquire(s.n)
		} else {
			b.Release(s.n)
		}
		if ok != s.ok || b.Used() != s.used {
			t.Fatalf("step %d %s(%d): ok=%v used=%d, want ok=%v used=%d", i, s.op, s.n, ok, b.Used(), s.ok, s.used)
		}
	}
}

func TestForceOverdraws(t *testing.T) {
	b := New("x", 10)
	b.TryAcquire(8)
	b.Force(5)
	if b.Used() != 13 || b.TryAcquire(1) {
		t.Fatalf("after Force: used %d", b.Used())
	}
	b.Release(13)
	if !b.TryAcquire(10) {
		t.Fatal("budget not whole again after release")
	}
}

func TestNilIsUnlimited(t *testing.T) {
	b := New("x", 0)
	if b != nil {
		t.Fatal("New with limit 0 is not nil")
	}
	if !b.TryAcquire(1<<40) || b.Acquire(context.Background(), 1<<40) != nil || b.Used() != 0 || b.Limit() != 0 {
		t.Fatal("a nil budget refused or counted")
	}
	b.Force(1 << 40)
	b.Release(1 << 40)
}

func TestAcquireWaitsForRelease(t *testing.T) {
	b := New("test bytes", 10)
	if !b.TryAcquire(8) {
		t.Fatal("first acquire failed")
	}
	got := make(chan error, 1)
	go func() { got <- b.Acquire(context.Background(), 5) }()
	select {
	case err := <-got:
		t.Fatalf("Acquire returned %v while the bytes were held", err)
	case <-time.After(20 * time.Millisecond):
	}
	b.Release(8)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if b.Used() != 5 {
		t.Fatalf("used %d, want 5", b.Used())
	}
}

func TestAcquireGivesUp(t *testing.T) {
	b := New("incoming message bytes", 10)
	b.TryAcquire(10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := b.Acquire(ctx, 3)
	if err == nil || !strings.Contains(err.Error(), "incoming message bytes: 3 more bytes would exceed the server-wide limit of 10 bytes (10 in use)") {
		t.Fatalf("err = %v", err)
	}
	// Over the limit on its own: no wait at all.
	b.Release(10)
	if err := b.Acquire(context.Background(), 11); err == nil {
		t.Fatal("an acquire over the whole limit succeeded")
	}
	if b.Used() != 0 {
		t.Fatalf("failed acquires left %d bytes held", b.Used())
	}
}

func TestOverReleasePanics(t *testing.T) {
	b := New("x", 10)
	b.TryAcquire(3)
	defer func() {
		if recover() == nil {
			t.Fatal("releasing more than was taken did not panic")
		}
	}()
	b.Release(4)
}

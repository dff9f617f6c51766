package relay

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

type nopLeg struct{}

func (nopLeg) Send([]byte) bool      { return true }
func (nopLeg) Close(string)          {}
func (nopLeg) Cut()                  {}
func (nopLeg) Env() string           { return "" }
func (nopLeg) deliver(outFrame) bool { return true }

// seqOf reads a test data frame's seq (its payload is the seq, 4 bytes).
func seqOf(b []byte) uint32 {
	d := fields(fields(b)[5])[4]
	return binary.BigEndian.Uint32(d)
}

func seqFrame(i uint32) []byte {
	return dataFrame("s", i, binary.BigEndian.AppendUint32(nil, i))
}

// run pushes n data frames through the shaper and returns the seqs that
// come out, in order, with what is still held flushed at the end.
func runShaper(f Faults, n int) []uint32 {
	var fs faultState
	fs.set(f)
	to := &nopLeg{}
	var out []uint32
	for i := range n {
		for _, b := range fs.shape(true, to, "s", KindData, seqFrame(uint32(i))).frames {
			out = append(out, seqOf(b))
		}
	}
	for _, b := range fs.flushStale(0) {
		out = append(out, seqOf(b))
	}
	return out
}

func TestShaperFaults(t *testing.T) {
	const n = 2000
	cases := []struct {
		name  string
		f     Faults
		check func(out []uint32) error
	}{
		{"none", Faults{}, func(out []uint32) error {
			for i, s := range out {
				if s != uint32(i) {
					return fmt.Errorf("position %d has %d", i, s)
				}
			}
			return countIs(out, n)
		}},
		{"drop all", Faults{Drop: 1}, func(out []uint32) error { return countIs(out, 0) }},
		{"drop some", Faults{Drop: 0.1, Seed: 1}, func(out []uint32) error {
			if len(out) < n*8/10 || len(out) >= n {
				return fmt.Errorf("%d of %d delivered", len(out), n)
			}
			return nil
		}},
		{"duplicate all", Faults{Duplicate: 1}, func(out []uint32) error { return countIs(out, 2*n) }},
		{"other direction untouched", Faults{Drop: 1, ToHarness: true}, func(out []uint32) error { return countIs(out, n) }},
		{"reorder within 64", Faults{Reorder: 0.3, ReorderDepth: 64, Seed: 2}, func(out []uint32) error {
			if err := countIs(out, n); err != nil {
				return err
			}
			moved := 0
			// Receiver rule (docs/remote.md): buffered ahead of next_seq by at
			// most 64.
			next, ahead := uint32(0), map[uint32]bool{}
			for _, s := range out {
				if s != next {
					moved++
				}
				if s > next+64 {
					return fmt.Errorf("seq %d arrived while %d missing: gap over 64", s, next)
				}
				ahead[s] = true
				for ahead[next] {
					delete(ahead, next)
					next++
				}
			}
			if moved == 0 || next != n {
				return fmt.Errorf("moved %d, delivered up to %d", moved, next)
			}
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(runShaper(c.f, n)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func countIs(out []uint32, n int) error {
	if len(out) != n {
		return fmt.Errorf("%d frames out, want %d", len(out), n)
	}
	return nil
}

func TestShaperReorderByteBound(t *testing.T) {
	var fs faultState
	fs.set(Faults{Reorder: 1, ReorderDepth: 64})
	to := &nopLeg{}
	big := dataFrame("s", 0, make([]byte, 61456))
	out := fs.shape(true, to, "s", KindData, big)
	if len(out.frames) != 0 {
		t.Fatal("first frame not held")
	}
	passed := 0
	for {
		out = fs.shape(true, to, "s", KindData, big)
		passed += len(out.frames)
		if len(out.frames) > 1 || passed > 64 {
			break
		}
	}
	// The last batch is the held frame then the current one: what the
	// receiver had to buffer is everything before.
	if behind := (passed - 2) * len(big); behind > maxReorderBytes || passed > 64 {
		t.Fatalf("held frame released after %d frames, %d bytes", passed-2, behind)
	}
}

func TestShaperResetReleasesHeld(t *testing.T) {
	var fs faultState
	fs.set(Faults{Reorder: 1, ReorderDepth: 64})
	to := &nopLeg{}
	fs.shape(true, to, "s", KindData, seqFrame(0))
	out := fs.shape(true, to, "s", KindReset, resetFrame("s", "x"))
	if len(out.frames) != 2 || resetReason(out.frames[1]) != "x" {
		t.Fatalf("reset did not flush the held frame first: %d frames", len(out.frames))
	}
	if got := fs.shape(true, to, "s", KindHandshake, handshakeFrame("s", []byte{1})); len(got.frames) != 1 {
		t.Fatal("a handshake frame was shaped though AllKinds is off")
	}
}

func TestShaperCutEvery(t *testing.T) {
	var fs faultState
	fs.set(Faults{CutEvery: 3})
	var cuts []int
	for i := range 9 {
		if fs.shape(true, nopLeg{}, "s", KindData, seqFrame(uint32(i))).cut == roleEnvironment {
			cuts = append(cuts, i)
		}
	}
	if fmt.Sprint(cuts) != "[2 5 8]" {
		t.Fatalf("cuts after frames %v", cuts)
	}
}

// Through real sockets: delay and reorder toward the harness, duplicate
// toward the executor; everything arrives, within the receiver's window.
func TestFaultsThroughRelay(t *testing.T) {
	p := newPair(t, Options{})
	p.r.ForTest().SetFaults(Faults{Reorder: 0.2, ReorderDepth: 16, Duplicate: 0.2, Delay: 2 * time.Millisecond, Seed: 3})
	h := p.harness(t)
	write(t, h, resumeFrame("s"))
	read(t, p.exec)
	const n = 200
	go func() {
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			p.exec.Write(ctx, 2, seqFrame(uint32(i)))
			cancel()
		}
	}()
	seen := map[uint32]int{}
	next := uint32(0)
	dups := 0
	for next < n {
		s := seqOf(read(t, h))
		seen[s]++
		if seen[s] > 1 {
			dups++
		}
		if s > next+16 {
			t.Fatalf("seq %d while %d missing", s, next)
		}
		for seen[next] > 0 {
			next++
		}
	}
	if dups == 0 {
		t.Fatal("no duplicate seen with Duplicate 0.2")
	}
}

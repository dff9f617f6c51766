package relay

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Faults are switches for tests; set them with
// Server.ForTest().SetFaults. The zero value injects nothing.
type Faults struct {
	// Frame faults apply to data frames only, unless AllKinds, and to the
	// directions selected (none selected: both).
	ToExecutor, ToHarness bool
	AllKinds              bool
	Seed                  uint64  // for the random choices below
	Drop                  float64 // probability a frame is dropped
	Duplicate             float64 // probability a frame is sent twice
	Reorder               float64 // probability a frame is held back...
	ReorderDepth          int     // ...until up to this many later frames of its stream passed (≤ 64; default 8)
	Delay                 time.Duration
	// CutEvery cuts the socket of CutRole ("environment" or "harness";
	// default environment) after every CutEvery routed frames.
	CutEvery int
	CutRole  string
	// NoPong stops answering websocket pings (the peer's pong_timeout path).
	NoPong bool

	// Registry faults.
	Register             Failure // fail register with this status and error code
	Connect              Failure
	Validate             Failure       // 401, 403, 500, ...
	Invalid              bool          // validate answers {"valid":false}
	SlowValidate         time.Duration // validate answers only after this long
	WrongEnvironmentID   bool          // register answers a different environment_id
	WrongSecurityProfile bool          // register answers a different security_profile
	// Upgrade refuses rendezvous upgrades of UpgradeRole (default
	// environment) with Upgrade.Status and the rejection reason
	// Upgrade.Code.
	Upgrade     Failure
	UpgradeRole string
}

// TestHooks are the relay's test seams, fenced off the product API (as
// tailscale fences its test hooks behind ForTest): product code has no
// reason to hold one.
type TestHooks struct{ s *Server }

// ForTest returns the test hooks of s. Only tests call it.
func (s *Server) ForTest() TestHooks { return TestHooks{s} }

// SetFaults replaces the fault switches. Call it before the first request
// for faults that must apply from the start.
func (h TestHooks) SetFaults(f Faults) { h.s.faults.set(f) }

// Failure makes an endpoint fail Times times (0: until switched off).
type Failure struct {
	Status int
	Code   string
	Times  int
}

// faultState is the live copy of Faults with counters and the reorder
// buffers.
type faultState struct {
	// framesOn is set while a frame fault is switched on: the production
	// path reads only this (no lock, no allocation per frame).
	framesOn atomic.Bool
	// snap is the current switches, read on registry and upgrade paths.
	snap atomic.Pointer[Faults]
	// heldN is len(held): the flush loop and leg teardown skip the lock
	// when nothing is held.
	heldN atomic.Int64

	mu     sync.Mutex
	f      Faults
	rng    *rand.Rand
	routed int
	held   map[heldKey]*heldFrame
}

type heldKey struct {
	to     Leg
	stream string
}

type heldFrame struct {
	frame      []byte
	after, n   int // release after n more frames...
	bytes      int // ...or before the frames behind it pass this many bytes
	heldAtTime time.Time
}

// The receiver's reorder window is 64 records and 1 MiB (docs/remote.md); a held
// frame is released before either is exceeded.
const (
	maxReorderDepth = 64
	maxReorderBytes = 900 << 10
)

func (fs *faultState) set(f Faults) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.f = f
	snap := f
	fs.snap.Store(&snap)
	fs.framesOn.Store(f.frameFaults())
	fs.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	fs.routed = 0
	if fs.held == nil {
		fs.held = make(map[heldKey]*heldFrame)
	}
}

// frameFaults reports whether any switch acts on routed frames.
func (f *Faults) frameFaults() bool {
	return f.Drop > 0 || f.Duplicate > 0 || f.Reorder > 0 || f.Delay > 0 || f.CutEvery > 0
}

func (fs *faultState) get() Faults {
	if p := fs.snap.Load(); p != nil {
		return *p
	}
	return Faults{}
}

// take consumes one use of a registry failure; ok is false when none is
// armed.
func (fs *faultState) take(pick func(*Faults) *Failure) (Failure, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	p := pick(&fs.f)
	if p.Status == 0 {
		return Failure{}, false
	}
	out := *p
	if p.Times > 0 {
		p.Times--
		if p.Times == 0 {
			*p = Failure{}
		}
		snap := fs.f
		fs.snap.Store(&snap)
	}
	return out, true
}

// routeOut is what to send for one frame: zero, one or more copies, each
// after a delay, plus whether to cut a socket afterwards.
type routeOut struct {
	frames [][]byte
	delay  time.Duration
	cut    string // role to cut, or ""
}

// shape applies the frame faults to one frame going to leg to.
func (fs *faultState) shape(toExecutor bool, to Leg, stream string, kind Kind, frame []byte) routeOut {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	defer func() { fs.heldN.Store(int64(len(fs.held))) }()
	f := &fs.f
	out := routeOut{delay: f.Delay}
	if f.CutEvery > 0 {
		fs.routed++
		if fs.routed >= f.CutEvery {
			fs.routed = 0
			out.cut = f.CutRole
			if out.cut == "" {
				out.cut = roleEnvironment
			}
		}
	}
	k := heldKey{to, stream}
	applies := (f.AllKinds || kind == KindData) &&
		((!f.ToExecutor && !f.ToHarness) || (toExecutor && f.ToExecutor) || (!toExecutor && f.ToHarness))
	if kind == KindReset {
		// A stream that ends releases what it held, ahead of the reset.
		if h := fs.held[k]; h != nil {
			out.frames = append(out.frames, h.frame)
			delete(fs.held, k)
		}
		out.frames = append(out.frames, frame)
		return out
	}
	if !applies {
		out.frames = append(out.frames, frame)
		return out
	}
	if f.Drop > 0 && fs.rng.Float64() < f.Drop {
		return out
	}
	copies := 1
	if f.Duplicate > 0 && fs.rng.Float64() < f.Duplicate {
		copies = 2
	}
	h := fs.held[k]
	if h == nil && f.Reorder > 0 && fs.rng.Float64() < f.Reorder {
		depth := f.ReorderDepth
		if depth <= 0 {
			depth = 8
		}
		depth = min(depth, maxReorderDepth)
		fs.held[k] = &heldFrame{frame: frame, n: 1 + fs.rng.IntN(depth), heldAtTime: time.Now()}
		if copies == 2 {
			out.frames = append(out.frames, frame)
		}
		return out
	}
	if h != nil && (h.after+1 > h.n || h.bytes+len(frame) > maxReorderBytes) {
		out.frames = append(out.frames, h.frame)
		delete(fs.held, k)
		h = nil
	}
	for range copies {
		out.frames = append(out.frames, frame)
	}
	if h != nil {
		h.after++
		h.bytes += len(frame)
		if h.after >= h.n {
			out.frames = append(out.frames, h.frame)
			delete(fs.held, k)
		}
	}
	return out
}

// flushStale releases frames held longer than d: a stream that went quiet
// must not keep a record back forever.
func (fs *faultState) flushStale(d time.Duration) map[heldKey][]byte {
	if fs.heldN.Load() == 0 {
		return nil
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	defer func() { fs.heldN.Store(int64(len(fs.held))) }()
	var out map[heldKey][]byte
	for k, h := range fs.held {
		if time.Since(h.heldAtTime) >= d {
			if out == nil {
				out = make(map[heldKey][]byte)
			}
			out[k] = h.frame
			delete(fs.held, k)
		}
	}
	return out
}

// forget drops what is held for a leg that is gone.
func (fs *faultState) forget(to Leg) {
	if fs.heldN.Load() == 0 {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	defer func() { fs.heldN.Store(int64(len(fs.held))) }()
	for k := range fs.held {
		if k.to == to {
			delete(fs.held, k)
		}
	}
}

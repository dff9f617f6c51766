// Package process runs and tracks one session's processes: spawning with
// pipes or a PTY, numbering every output/exit/close event with a per-process
// sequence, retaining recent output for process/read, long-poll reads, stdin
// writes and signals. It knows the protocol's types but nothing of
// connections or framing: events go to a Sink.
//
// A process/start with a sandbox parameter runs its command confined by
// the policy (package sandbox; see sandbox.go here): it fails closed when
// the kernel cannot build the sandbox, answers sandboxType linuxSeccomp,
// and reports sandboxDenied on its exit.
package process

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/execgo/exec-server/childinit"
	"github.com/execgo/exec-server/internal/budget"
	"github.com/execgo/exec-server/netproxy"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox/policy"
)

// EventKind tells the three kinds of process events apart.
type EventKind int

// Event kinds.
const (
	EventOutput EventKind = iota
	EventExited
	EventClosed
)

// Event is one sequenced process event, in the order it must be pushed.
type Event struct {
	Kind          EventKind
	ProcessID     string
	Seq           uint64
	Stream        string // output only
	Data          []byte // output only; must not be modified
	ExitCode      int    // exited only
	SandboxDenied bool   // exited only
	TimedOut      bool   // exited only: killed by the start's timeoutMs
}

// Sink receives every event of every process, per process in seq order.
// Deliver may block to apply back-pressure (the process's output is not read
// meanwhile); it must return once the events can no longer be delivered.
type Sink interface {
	Deliver(Event)
}

// BatchSink is a Sink that can take several events of one process at once,
// in seq order: a process that exits after its output has ended delivers
// exited and closed together, which a connection may write as one.
type BatchSink interface {
	Sink
	DeliverBatch([]Event)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(Event)

// Deliver calls f.
func (f SinkFunc) Deliver(ev Event) { f(ev) }

// Options configure a Manager. Zero values take the defaults shown.
type Options struct {
	MaxProcesses int           // live processes at once (4096)
	Retention    time.Duration // how long a closed process stays readable (30s)
	RetainBytes  int           // retained output per process (1 MiB)
	RetainChunks int           // retained chunks per process (50000)
	ReadSize     int           // largest output chunk (64 KiB)
	OutputHold   time.Duration // longest wait of bulk output to fill a chunk (1ms; < 0: none; see gatherer)
	// ReuseOutput says the Sink keeps no Event.Data after Deliver
	// returns (it encodes or copies it): an output chunk's buffer is then
	// reused once the chunk leaves the retained window, unless a Read
	// returned it (see window.evict).
	ReuseOutput   bool
	StdinBuffered int // stdin bytes queued per process (8 MiB)
	// RetainBudget, when set, is shared with other managers: the bytes of
	// retained output of all their processes (see window).
	RetainBudget *budget.Bytes
	// StdinBudget, when set, is shared with other managers: the bytes of
	// stdin queued for all their processes; a write past it fails.
	StdinBudget *budget.Bytes
	// DirectChildren starts children directly instead of through the
	// session's init (package childinit, started on first use), which is
	// their parent and subreaper: with the init, no descendant, not even
	// one that called setsid, outlives its session or the server, even a
	// server killed with SIGKILL. The init needs the binary's main to call
	// childinit.MaybeMain first thing; without that, children are always
	// started directly. It costs about 1 MiB of memory per session that
	// runs processes, and a few tenths of a millisecond per start.
	DirectChildren bool
	Logger         *slog.Logger
	// Network carries a managed proxy's decisions and policy requests to
	// the client; nil: they are only logged, and misses denied.
	Network NetworkPeer
	// UpstreamProxy (host:port), when set, is an HTTP proxy that every
	// managed proxy's outbound connection goes through by CONNECT.
	UpstreamProxy string
	// ForbiddenAddr, when set, reports addresses no managed proxy may
	// connect to: the server's own listeners.
	ForbiddenAddr func(netip.AddrPort) bool
	// Masking is the executor's credential-masking authority (its CA and
	// the commands' trust bundle); nil: credential masking is refused.
	Masking *netproxy.Authority
	// MaskUpstreamRoots verifies the upstreams of intercepted connections
	// (nil: the system's roots; tests set their own).
	MaskUpstreamRoots *x509.CertPool
}

func (o Options) withDefaults() Options {
	if o.MaxProcesses <= 0 {
		o.MaxProcesses = 4096
	}
	if o.Retention <= 0 {
		o.Retention = 30 * time.Second
	}
	if o.RetainBytes <= 0 {
		o.RetainBytes = 1 << 20
	}
	if o.RetainChunks <= 0 {
		o.RetainChunks = 50000
	}
	if o.ReadSize <= 0 {
		o.ReadSize = 64 << 10
	}
	if o.OutputHold == 0 {
		o.OutputHold = time.Millisecond
	} else if o.OutputHold < 0 {
		o.OutputHold = 0
	}
	if o.StdinBuffered <= 0 {
		o.StdinBuffered = 8 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Manager owns one session's processes. It is safe for concurrent use.
type Manager struct {
	opts Options
	sink Sink

	mu     sync.Mutex
	procs  map[string]*Proc
	live   int
	closed bool

	wg sync.WaitGroup // every goroutine of every process

	spawnerOnce sync.Once
	spawner     *childinit.Spawner // nil when it could not start

	snaps snapshots // shell snapshots of this session (snapshot.go)

	hooks testHooks // set only by this package's tests, before Start
}

// testHooks let this package's tests hold a process at a chosen point, to
// order what a loaded machine orders by chance. Each is nil outside tests.
type testHooks struct {
	// beforeRead is called by a pump before each read of its stream.
	beforeRead func(p *Proc, stream string)
	// drainLook is called by a sandbox's reaper after each look whether
	// the readers have emitted everything (see awaitSandboxOutput).
	drainLook func(p *Proc, drained bool)
}

// spawnerFor returns the session's spawner, starting it on first use.
func (m *Manager) spawnerFor() *childinit.Spawner {
	if m.opts.DirectChildren || !childinit.Available() {
		return nil
	}
	m.spawnerOnce.Do(func() {
		sp, err := childinit.StartSpawner()
		if err != nil {
			m.opts.Logger.Warn("no spawner: children are started directly and their descendants may outlive the server", "err", err)
			return
		}
		m.spawner = sp
	})
	return m.spawner
}

// NewManager returns a Manager that sends events to sink.
func NewManager(opts Options, sink Sink) *Manager {
	return &Manager{opts: opts.withDefaults(), sink: sink, procs: make(map[string]*Proc)}
}

// Start spawns a process. The id is reserved while spawning, so a request
// for it in the meantime is told it is starting; a failed spawn frees it.
func (m *Manager) Start(p protocol.StartParams) (*protocol.StartResult, error) {
	if len(p.Argv) == 0 {
		return nil, protocol.InvalidParams("argv must not be empty")
	}
	if err := checkTimeout(&p); err != nil {
		return nil, err
	}
	if err := checkNetwork(&p); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, protocol.InvalidRequest("session is closed")
	}
	if _, ok := m.procs[p.ProcessID]; ok {
		m.mu.Unlock()
		return nil, protocol.InvalidRequest("process %s already exists", p.ProcessID).WithKind(protocol.KindProcessExists)
	}
	if m.live >= m.opts.MaxProcesses {
		m.mu.Unlock()
		return nil, protocol.InvalidRequest("too many processes: this session already runs %d (limit %d)", m.live, m.opts.MaxProcesses)
	}
	proc := newProc(m, p.ProcessID)
	proc.win.budget = m.opts.RetainBudget
	proc.win.reuse = m.opts.ReuseOutput && m.opts.ReadSize == chunkBufSize
	proc.ext.argv, proc.ext.startedAt = slices.Clone(p.Argv), time.Now()
	m.procs[p.ProcessID] = proc
	m.live++
	m.mu.Unlock()

	if err := proc.spawn(p); err != nil {
		m.mu.Lock()
		delete(m.procs, p.ProcessID)
		m.live--
		m.mu.Unlock()
		return nil, err
	}
	proc.armTimeout(p.TimeoutMs)
	typ := "none"
	if proc.sandboxed {
		// Any sandbox value, even disabled, as the reference.
		typ = policy.SandboxTypeLinux
	}
	return &protocol.StartResult{ProcessID: p.ProcessID, SandboxType: typ}, nil
}

func (m *Manager) get(id string) *Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.procs[id]
}

// lookup finds a process that has finished starting.
func (m *Manager) lookup(id string) (*Proc, error) {
	p := m.get(id)
	if p == nil {
		return nil, protocol.InvalidRequest("unknown process id %s", id).WithKind(protocol.KindUnknownProcess)
	}
	if !p.started() {
		return nil, protocol.InvalidRequest("process id %s is starting", id)
	}
	return p, nil
}

// Read returns retained output after p.AfterSeq, waiting up to p.WaitMs for
// something new when there is nothing yet.
func (m *Manager) Read(ctx context.Context, p protocol.ReadParams) (*protocol.ReadResult, error) {
	proc, err := m.lookup(p.ProcessID)
	if err != nil {
		return nil, err
	}
	return proc.read(ctx, p)
}

// Write queues bytes for the process's stdin.
func (m *Manager) Write(p protocol.WriteParams) (*protocol.WriteResult, error) {
	proc := m.get(p.ProcessID)
	if proc == nil {
		return &protocol.WriteResult{Status: protocol.WriteUnknownProcess}, nil
	}
	if !proc.started() {
		return &protocol.WriteResult{Status: protocol.WriteStarting}, nil
	}
	return proc.write(p)
}

// CloseStdin ends a process's input (an extension of the protocol): a
// pipe's write end is closed once queued writes are done; a terminal gets
// ^D, which a terminal in canonical mode turns into end-of-file. A process
// without writable stdin already has no input; that is not an error.
func (m *Manager) CloseStdin(id string) error {
	proc, err := m.lookup(id)
	if err != nil {
		return err
	}
	switch {
	case proc.stdin == nil:
		return nil
	case proc.tty:
		return proc.stdin.enqueue([]byte{4})
	}
	proc.stdin.closeInput()
	return nil
}

// Resize sets the terminal size of a PTY process (an extension of the
// protocol). The child gets SIGWINCH from the kernel.
func (m *Manager) Resize(p protocol.ResizeParams) error {
	// The server checks the raw params first (ResizeParams.CheckMember);
	// this guards callers of the library.
	if p.Rows < protocol.MinTermSize || p.Rows > protocol.MaxTermSize || p.Cols < protocol.MinTermSize || p.Cols > protocol.MaxTermSize {
		return protocol.InvalidParams("terminal size %dx%d is out of range: rows and cols must be between %d and %d", p.Rows, p.Cols, protocol.MinTermSize, protocol.MaxTermSize)
	}
	proc, err := m.lookup(p.ProcessID)
	if err != nil {
		return err
	}
	if !proc.tty {
		return protocol.InvalidRequest("process %s has no terminal to resize", p.ProcessID)
	}
	// Through SyscallConn (setSize), as the os package advises, not Fd.
	if err := setSize(proc.master, p.Rows, p.Cols); err != nil {
		return protocol.Internal("resize process %s: %v", p.ProcessID, err)
	}
	return nil
}

// Signals maps the protocol's signal names to the signals sent.
var Signals = map[string]syscall.Signal{
	"interrupt": syscall.SIGINT,
	"terminate": syscall.SIGTERM,
	"kill":      syscall.SIGKILL,
	"hangup":    syscall.SIGHUP,
	"quit":      syscall.SIGQUIT,
	"user1":     syscall.SIGUSR1,
	"user2":     syscall.SIGUSR2,
}

// Signal sends a named signal to the process's group. Unknown or finished
// processes are not an error, as on the reference.
func (m *Manager) Signal(p protocol.SignalParams) error {
	sig, ok := Signals[p.Signal]
	if !ok {
		return protocol.InvalidParams("unknown variant `%s`, expected one of `interrupt`, `terminate`, `kill`, `hangup`, `quit`, `user1`, `user2`", p.Signal)
	}
	if proc := m.get(p.ProcessID); proc != nil && proc.started() {
		proc.signal(sig)
	}
	return nil
}

// Terminate kills the process's whole group with SIGKILL. It reports
// whether the process was still running. With GraceMs (an extension,
// clamped to MaxGraceMs) it sends SIGTERM to the group first and the kill
// only after GraceMs if the process still runs; it answers at once.
func (m *Manager) Terminate(p protocol.TerminateParams) *protocol.TerminateResult {
	proc := m.get(p.ProcessID)
	if proc == nil {
		return &protocol.TerminateResult{Running: false}
	}
	// A process still starting is killed once it has started (spawning
	// takes a fork and an exec), as the reference does; one whose start
	// failed was never running.
	<-proc.ready
	if p.GraceMs != nil {
		grace := time.Duration(min(*p.GraceMs, protocol.MaxGraceMs)) * time.Millisecond
		return &protocol.TerminateResult{Running: proc.terminateGrace(grace)}
	}
	return &protocol.TerminateResult{Running: proc.signal(syscall.SIGKILL)}
}

// closeGrace is how long Close lets killed processes' streams drain before
// it closes them.
const closeGrace = time.Second

// Close kills every process group, waits for their goroutines to end and
// frees everything. The sink must no longer block by then (a detached session
// drops events).
func (m *Manager) Close() {
	m.snaps.close()
	m.mu.Lock()
	m.closed = true
	procs := make([]*Proc, 0, len(m.procs))
	for _, p := range m.procs {
		procs = append(procs, p)
	}
	m.mu.Unlock()
	if m.spawner != nil {
		// Everything the session ever started, daemons included, in one
		// go: a tree kill per process first would cost a /proc scan per
		// process where the spawner has no cgroups (a shutdown quadratic
		// in sessions).
		_ = m.spawner.Close()
	}
	for _, p := range procs {
		p.mu.Lock()
		p.ext.stopLocked()
		p.mu.Unlock()
		p.kill()
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	t := time.NewTimer(closeGrace)
	select {
	case <-done:
	case <-t.C:
		// A descendant outside the killed groups (it called setsid)
		// still holds an output stream open: stop reading it.
		for _, p := range procs {
			p.closeOutputs()
		}
		<-done
	}
	t.Stop()
	m.mu.Lock()
	for _, p := range m.procs {
		p.stopRetention()
		p.freeOutput()
	}
	clear(m.procs)
	m.mu.Unlock()
}

// Live reports the number of processes not yet closed.
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live
}

// freeOutput gives the retained output's bytes back to the budget.
func (p *Proc) freeOutput() {
	p.mu.Lock()
	p.win.free()
	p.mu.Unlock()
}

// closedProc is called once a process has emitted its closed event: the
// process no longer counts as live, and its id is freed after Retention.
func (m *Manager) closedProc(p *Proc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live--
	if m.closed {
		return
	}
	p.retention = time.AfterFunc(m.opts.Retention, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.procs[p.id] == p {
			delete(m.procs, p.id)
			p.freeOutput()
		}
	})
}

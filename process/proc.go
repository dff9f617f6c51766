package process

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/childinit"
	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/internal/peerproc"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox/policy"
)

// rawEvent is what a producer (an output reader or the reaper) emits; emit
// numbers it.
type rawEvent struct {
	kind     EventKind
	stream   string
	data     []byte
	exitCode int
	spare    bool // data is a whole chunk buffer (see chunkBuf)
}

// Proc is one managed process.
type Proc struct {
	id string
	m  *Manager

	ready chan struct{} // closed once spawn has finished (either way)

	// Set by spawn, read-only afterwards.
	pid int
	// pgid is the child's process group (its pid, by Setsid). Unlike pid
	// it is kept after the reap: at session end the group is killed even
	// when its leader has exited, as background children may live on.
	pgid    int
	outputs []*gatherer               // readers of the output streams
	exitCh  <-chan syscall.WaitStatus // the child's status, from the spawner
	tty     bool
	master  *os.File     // the PTY master, for resize
	stdin   *stdinWriter // nil when stdin is not writable
	// sandboxed: the command runs under a sandbox policy (the child is
	// the sandbox's init). denial sees every output chunk of a sandboxed
	// process, to judge its exit; release undoes the sandbox's traces on
	// the host once the init is reaped (it runs once; a no-op without a
	// sandbox).
	sandboxed bool
	denial    *policy.Denial
	release   func()
	// ownPIDNamespace: the child is PID 1 of a PID namespace of its own,
	// so nothing of it outlives its reap (see reap).
	ownPIDNamespace bool

	// emitMu orders events: a producer numbers its event and delivers it
	// while holding it, so the sink gets events in seq order, on the
	// producer's own goroutine (no hand-off to another goroutine for every
	// chunk). Only producers take it, never a request handler: a producer
	// blocked in Deliver (a client that does not read) holds up the
	// process's other producers and nothing else, as a full channel to a
	// separate emitter did. p.mu is never held while delivering.
	emitMu    sync.Mutex
	producers atomic.Int32 // producers still running; the last one emits closed

	mu        sync.Mutex
	nextSeq   uint64
	win       window
	exited    bool
	exitSeq   uint64
	exitCode  int
	denied    bool // sandboxDenied, set with exited
	closed    bool
	changed   chan struct{} // closed and replaced on every event
	writeIDs  map[string]struct{}
	writeFIFO []string
	retention *time.Timer
	ext       extState // list, grace and timeout (ext.go)
}

func newProc(m *Manager, id string) *Proc {
	return &Proc{
		id:      id,
		m:       m,
		ready:   make(chan struct{}),
		nextSeq: 1,
		win:     window{maxBytes: m.opts.RetainBytes, maxChunks: m.opts.RetainChunks},
		changed: make(chan struct{}),
	}
}

func (p *Proc) started() bool {
	select {
	case <-p.ready:
		return true
	default:
		return false
	}
}

func (p *Proc) spawn(sp protocol.StartParams) error {
	defer close(p.ready)
	plan, err := planOf(sp.Sandbox)
	if err != nil {
		return err
	}
	dir, err := fileuri.Parse(sp.Cwd)
	if err != nil {
		return err
	}
	env, err := buildEnv(sp.Env, sp.EnvPolicy)
	if err != nil {
		return err
	}
	if sp.ShellSnapshot != nil && maskingRequested(sp.NetworkProxy) {
		// A snapshot is captured with the real environment and replayed
		// through a file the command can read: with masking the command
		// runs without one (as the reference, which does not mask then).
		sp.ShellSnapshot = nil
	}
	if sp.ShellSnapshot != nil {
		if sp.Argv, env, err = p.m.snaps.prepare(p.m, sp, env); err != nil {
			return err
		}
	}
	nl, err := p.m.prepareNetwork(&sp, plan) // network.go
	if err != nil {
		return err
	}
	if nl == nil && maskingRequested(sp.NetworkProxy) {
		if env, err = maskWithoutProxy(sp.NetworkProxy, env); err != nil { // mask.go
			return err
		}
	}
	netStarted := false
	if nl != nil {
		env = nl.applyEnv(env)
		defer func() {
			if !netStarted {
				nl.close()
			}
		}()
	}
	if sp.Argv[0] == "" {
		// The reference's texts.
		if sp.TTY {
			return protocol.Internal("missing program for PTY spawn")
		}
		return protocol.Internal("missing program for pipe spawn")
	}
	path, err := resolveProgram(sp.Argv[0], dir, env)
	if err != nil {
		return protocol.SpawnError(err)
	}
	args := append([]string(nil), sp.Argv...)
	if sp.Arg0 != nil {
		args[0] = *sp.Arg0
	}
	pidfd := -1
	attr := &syscall.SysProcAttr{
		Setsid: true, // own session and process group: signals reach the whole tree
		// If the server dies without cleaning up, the kernel kills the child.
		Pdeathsig: syscall.SIGKILL,
		// A pidfd lets the reaper wait in the netpoller instead of
		// parking an OS thread in wait4 for every live child.
		PidFD: &pidfd,
	}
	// What is started: the command itself, or the sandbox's init, which
	// runs the command (path, args, env, dir) inside the view.
	start := childinit.SpawnAttr{Path: path, Argv: args, Env: env, Dir: dir}
	p.release = onceFunc(nil)
	if plan != nil {
		if err := checkExecutable(path); err != nil {
			return protocol.SpawnError(err)
		}
		spec, err := planCommand(plan, path, args, env, dir)
		if err != nil {
			return commandError(err)
		}
		p.release = onceFunc(spec.Release)
		if plan.Network == policy.NetworkEnabled {
			// Counted from before its start until its init is reaped: while
			// one runs, the server checks which local peers are inside it
			// (server/peer.go).
			uncount := peerproc.Sandboxes.Begin()
			release := spec.Release
			p.release = onceFunc(func() {
				uncount()
				if release != nil {
					release()
				}
			})
		}
		// The init starts in dir too: a missing cwd fails the start with
		// the same error as without a sandbox.
		start = childinit.SpawnAttr{Path: spec.Path, Argv: spec.Argv, Env: spec.Env, Dir: dir,
			Cloneflags: spec.Cloneflags, UidMappings: idMaps(spec.UidMappings), GidMappings: idMaps(spec.GidMappings)}
		attr.Cloneflags = start.Cloneflags
		p.ownPIDNamespace = start.Cloneflags&unix.CLONE_NEWPID != 0
		attr.UidMappings, attr.GidMappings = start.UidMappings, start.GidMappings
		p.sandboxed = true
		p.denial = new(policy.Denial)
	}
	if nl != nil {
		release := p.release
		p.release = onceFunc(func() { release(); nl.close() })
	}
	startOK := false
	defer func() {
		if !startOK {
			p.release()
		}
	}()

	var files [3]*os.File
	var parentEnds []*os.File // closed in the parent after start
	var readers []*os.File
	var streams []string
	closeAll := func() {
		for _, f := range parentEnds {
			f.Close()
		}
		for _, f := range readers {
			f.Close()
		}
		if p.stdin != nil {
			p.stdin.f.Close()
		}
	}

	if sp.TTY {
		master, slave, err := pty.Open()
		if err != nil {
			return protocol.SpawnError(err)
		}
		if master, err = pollable(master); err != nil {
			slave.Close()
			return protocol.SpawnError(err)
		}
		rows, cols := uint16(24), uint16(80)
		if sp.Rows != nil {
			rows = *sp.Rows
		}
		if sp.Cols != nil {
			cols = *sp.Cols
		}
		_ = setSize(master, rows, cols)
		p.master = master
		files = [3]*os.File{slave, slave, slave}
		parentEnds = append(parentEnds, slave)
		attr.Setctty = true
		attr.Ctty = 0
		readers = append(readers, master)
		streams = append(streams, protocol.StreamPTY)
		p.tty = true
		p.stdin = newStdinWriter(master, p.m.opts.StdinBuffered, p.m.opts.StdinBudget, false)
	} else {
		if sp.PipeStdin {
			r, w, err := os.Pipe()
			if err != nil {
				return protocol.SpawnError(err)
			}
			files[0] = r
			parentEnds = append(parentEnds, r)
			p.stdin = newStdinWriter(w, p.m.opts.StdinBuffered, p.m.opts.StdinBudget, true)
		} else {
			null, err := os.Open(os.DevNull)
			if err != nil {
				return protocol.SpawnError(err)
			}
			files[0] = null
			parentEnds = append(parentEnds, null)
		}
		for _, name := range []string{protocol.StreamStdout, protocol.StreamStderr} {
			r, w, err := os.Pipe()
			if err != nil {
				closeAll()
				return protocol.SpawnError(err)
			}
			// A larger pipe means fewer wake-ups for chatty children;
			// best effort.
			_, _ = unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 1<<20)
			files[1+len(readers)] = w
			parentEnds = append(parentEnds, w)
			readers = append(readers, r)
			streams = append(streams, name)
		}
	}

	var pid int
	if sp := p.m.spawnerFor(); sp != nil {
		// The session's spawner starts the child and stays its parent and
		// subreaper: nothing below it outlives the server.
		start.Setsid, start.Setctty, start.Pdeathsig = true, attr.Setctty, true
		pid, p.exitCh, err = sp.Start(start, files)
	} else {
		var proc *os.Process
		proc, err = os.StartProcess(start.Path, start.Argv, &os.ProcAttr{
			Dir:   start.Dir,
			Env:   start.Env,
			Files: files[:],
			Sys:   attr,
		})
		if err == nil {
			pid = proc.Pid
			// The reaper waits itself; the os.Process is not used again.
			_ = proc.Release()
		}
	}
	for _, f := range parentEnds {
		f.Close()
	}
	parentEnds = nil
	if err != nil {
		closeAll()
		return protocol.SpawnError(err)
	}
	startOK = true
	p.pid, p.pgid = pid, pid
	if nl != nil {
		nl.start(pid)
		netStarted = true
	}
	gs := make([]*gatherer, len(readers))
	for i, r := range readers {
		gs[i] = newGatherer(r, p.m.opts.OutputHold)
	}
	p.outputs = gs

	// Every reader and the reaper is a producer; the last one to finish
	// emits closed. The reaper waits for the readers (briefly) so that
	// output usually precedes exited.
	p.producers.Store(int32(len(readers) + 1))
	readersDone := make(chan struct{})
	var readersLeft atomic.Int32
	readersLeft.Store(int32(len(readers)))
	for i, g := range gs {
		p.m.wg.Add(1)
		go func() {
			defer p.m.wg.Done()
			p.pump(g, streams[i])
			// Done as a producer before readersDone: a reaper that sees
			// readersDone is then the last producer.
			p.producerDone()
			if readersLeft.Add(-1) == 0 {
				close(readersDone)
			}
		}()
	}
	p.m.wg.Add(1)
	go func() {
		defer p.m.wg.Done()
		p.exitDone(p.reap(pidfd, readersDone))
	}()
	if p.stdin != nil {
		p.m.wg.Add(1)
		go func() {
			defer p.m.wg.Done()
			p.stdin.run()
		}()
	}
	return nil
}

// pump reads one output stream until EOF and emits what it has at hand
// as one chunk at a time (see gatherer). When the delivery blocks (the
// client is not keeping up) the pump blocks too and the child's writes
// stall: back-pressure, not loss.
func (p *Proc) pump(g *gatherer, stream string) {
	if stream != protocol.StreamPTY {
		// A PTY master stays open until the child is reaped (see emit):
		// closing it hangs up the terminal, and a child that closed its
		// descriptors but has not yet exited would die of SIGHUP.
		defer g.close()
	}
	defer g.ended.Store(true) // first of the deferred calls: before the close
	size := p.m.opts.ReadSize
	buf := p.chunkBuf()
	defer func() { putChunkBuf(buf) }()
	for {
		if h := p.m.hooks.beforeRead; h != nil {
			h(p, stream)
		}
		n, err := g.read(buf)
		if n > 0 {
			if p.denial != nil {
				p.denial.Write(stream, buf[:n])
			}
			var data []byte
			whole := n >= size/2
			if whole {
				// Hand the buffer over; at most half of it is slack.
				data = buf[:n]
				buf = p.chunkBuf()
			} else {
				data = append([]byte(nil), buf[:n]...)
			}
			p.emit(rawEvent{kind: EventOutput, stream: stream, data: data, spare: whole})
		}
		if err != nil {
			// EOF on a pipe, EIO on a PTY whose other side is gone.
			return
		}
	}
}

// reap waits for the child to exit and reports its status. For a child
// that was PID 1 of its own PID namespace (a sandbox's init) it waits for
// every reader to reach EOF, which comes at once; otherwise it gives the
// readers a brief moment to drain what the child wrote before it exited,
// so output usually precedes the exit event, and late output is possible
// when a descendant keeps the stream open.
func (p *Proc) reap(pidfd int, readersDone <-chan struct{}) rawEvent {
	var status syscall.WaitStatus
	var err error
	if p.exitCh != nil {
		st, ok := <-p.exitCh
		if !ok {
			err = errors.New("the spawner died")
		}
		status = st
	} else {
		status, err = waitExit(p.pid, pidfd)
	}
	// Reaped (or gone with the spawner): the sandbox's traces on the host
	// can go.
	p.release()
	if err != nil {
		return rawEvent{kind: EventExited, exitCode: -1}
	}
	code := status.ExitStatus()
	if status.Signaled() {
		code = 128 + int(status.Signal())
	}
	p.mu.Lock()
	p.pid = -p.pid // reaped: never signal this pid again, it may be reused
	p.mu.Unlock()
	if p.ownPIDNamespace {
		p.awaitSandboxOutput(readersDone)
	} else {
		// A background child may keep a stream open for as long as it
		// likes, and the exit must not wait for it (closed does): give
		// the readers a brief moment, so that output usually precedes
		// exited. Nothing is judged from the output here (no sandbox).
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-readersDone:
		case <-t.C:
		}
		t.Stop()
	}
	return rawEvent{kind: EventExited, exitCode: code}
}

// drainPoll is how often a sandbox's reaper looks whether the readers have
// emitted everything the sandbox wrote, when a stream has not ended.
const drainPoll = 5 * time.Millisecond

// awaitSandboxOutput waits, once a sandbox's init is reaped, until the
// readers have emitted everything the sandbox wrote: sandboxDenied is
// judged from the whole output (see record), however slowly a loaded
// machine runs the readers. The init was PID 1 of its own PID namespace:
// the kernel killed every process in it, and they were gone, before the
// init could be reaped, so every byte the sandbox wrote is in a stream
// already. Usually every stream then ends as soon as its reader has read
// it. But a descriptor of a stream can live outside the sandbox (passed to
// a daemon over a unix socket, reopened by a host process through /proc):
// its EOF may never come, and exited must not wait for it. So the wait
// also ends when each reader has ended or waits for more with nothing in
// hand and its stream empty (gatherer.drained), looked at every drainPoll;
// what the outside holder writes later is late output, as for a
// background child without a sandbox. A holder that writes without pause
// (the stream never found empty) holds exited back while it does.
func (p *Proc) awaitSandboxOutput(readersDone <-chan struct{}) {
	select {
	case <-readersDone:
		return
	default:
	}
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		select {
		case <-readersDone:
			return
		case <-tick.C:
		}
		drained := true
		for _, g := range p.outputs {
			if !g.drained() {
				drained = false
				break
			}
		}
		if h := p.m.hooks.drainLook; h != nil {
			h(p, drained)
		}
		if drained {
			return
		}
	}
}

// exitDone emits the reaper's exited event and ends it as a producer.
// When every reader is done already, closed follows at once: both are
// delivered together to a BatchSink (one write instead of two; through a
// relay, one record instead of two).
func (p *Proc) exitDone(exited rawEvent) {
	bs, batch := p.m.sink.(BatchSink)
	if !batch || p.producers.Load() != 1 {
		p.emit(exited)
		p.producerDone()
		return
	}
	// Only readers decrement producers, and they are done: the reaper is
	// the last producer.
	p.producers.Store(0)
	p.finish()
	p.emitMu.Lock()
	defer p.emitMu.Unlock()
	ev := p.record(exited)
	bs.DeliverBatch([]Event{ev, p.recordClosed()})
}

// emit numbers an event, records it, and delivers it, in seq order (see
// emitMu).
func (p *Proc) emit(ev rawEvent) {
	p.emitMu.Lock()
	defer p.emitMu.Unlock()
	p.m.sink.Deliver(p.record(ev))
}

// record numbers an event and records it. Called with emitMu.
func (p *Proc) record(ev rawEvent) Event {
	p.mu.Lock()
	seq := p.nextSeq
	p.nextSeq++
	switch ev.kind {
	case EventOutput:
		p.win.append(chunk{seq: seq, stream: ev.stream, data: ev.data, spare: ev.spare})
	case EventExited:
		p.exited, p.exitSeq, p.exitCode = true, seq, ev.exitCode
		// Judged once, on what the readers have seen by now: for a
		// sandbox's init, every byte of its output (see reap).
		p.denied = p.denial != nil && p.denial.Denied(ev.exitCode)
		p.ext.exitedLocked()
	}
	denied, timedOut := p.denied, p.ext.timedOut
	p.broadcastLocked()
	p.mu.Unlock()
	return Event{Kind: ev.kind, ProcessID: p.id, Seq: seq, Stream: ev.stream, Data: ev.data, ExitCode: ev.exitCode, SandboxDenied: denied && ev.kind == EventExited, TimedOut: timedOut && ev.kind == EventExited}
}

// producerDone is called by each producer when it has emitted its last
// event. The last one emits closed, the last event.
func (p *Proc) producerDone() {
	if p.producers.Add(-1) > 0 {
		return
	}
	p.finish()
	p.emitMu.Lock()
	defer p.emitMu.Unlock()
	p.m.sink.Deliver(p.recordClosed())
}

// finish releases what the process held once every producer is done.
func (p *Proc) finish() {
	if p.stdin != nil {
		p.stdin.close()
	}
	if p.master != nil {
		// The child is reaped and every reader is done.
		_ = p.master.Close()
	}
	// No longer live before closed is delivered: a client that sees closed
	// may start another process at once, within --max-processes.
	p.m.closedProc(p)
}

// recordClosed numbers and records closed, the last event. Called with
// emitMu.
func (p *Proc) recordClosed() Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.nextSeq
	p.nextSeq++
	p.closed = true
	p.broadcastLocked()
	return Event{Kind: EventClosed, ProcessID: p.id, Seq: seq}
}

// pollable turns a PTY master into a non-blocking descriptor served by the
// netpoller, like a pipe. pty.Open leaves it in blocking mode (its ioctls
// go through Fd): every read would hold an OS thread, and a write could
// block its caller until the child reads.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// setSize sets a PTY's window size without (*os.File).Fd, which would put
// the master back in blocking mode (see pollable).
func setSize(master *os.File, rows, cols uint16) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ierr
}

func (p *Proc) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proc) read(ctx context.Context, rp protocol.ReadParams) (*protocol.ReadResult, error) {
	var after uint64
	if rp.AfterSeq != nil {
		after = *rp.AfterSeq
	}
	budget := -1
	if rp.MaxBytes != nil {
		budget = int(min(*rp.MaxBytes, 1<<40))
	}
	var timer *time.Timer
	if rp.WaitMs != nil && *rp.WaitMs > 0 {
		timer = time.NewTimer(time.Duration(min(*rp.WaitMs, 1<<40)) * time.Millisecond)
		defer timer.Stop()
	}
	for {
		p.mu.Lock()
		chunks := p.win.after(after, budget)
		ready := len(chunks) > 0 || p.closed || (p.exited && p.exitSeq > after)
		if ready || timer == nil {
			res := p.resultLocked(chunks, rp.MaxBytes != nil)
			p.mu.Unlock()
			return res, nil
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			timer = nil // one last look, then answer
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (p *Proc) resultLocked(chunks []chunk, budgeted bool) *protocol.ReadResult {
	res := &protocol.ReadResult{
		Chunks:  make([]protocol.Chunk, len(chunks)),
		NextSeq: p.nextSeq,
		Exited:  p.exited,
		Closed:  p.closed,
	}
	for i, c := range chunks {
		res.Chunks[i] = protocol.Chunk{Seq: c.seq, Stream: c.stream, Chunk: c.data}
	}
	if budgeted && len(chunks) > 0 {
		res.NextSeq = chunks[len(chunks)-1].seq + 1
	}
	if p.exited {
		code := p.exitCode
		res.ExitCode = &code
		res.SandboxDenied = p.denied
		res.TimedOut = p.ext.timedOut
	}
	return res
}

func (p *Proc) write(wp protocol.WriteParams) (*protocol.WriteResult, error) {
	if p.stdin == nil {
		return &protocol.WriteResult{Status: protocol.WriteStdinClosed}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if wp.WriteID != nil {
		if *wp.WriteID == "" {
			return nil, protocol.InvalidParams("writeId must not be empty")
		}
		if _, dup := p.writeIDs[*wp.WriteID]; dup {
			return &protocol.WriteResult{Status: protocol.WriteAccepted}, nil
		}
	}
	// An empty chunk writes nothing and is accepted even after exit, as
	// on the reference.
	if len(wp.Chunk) > 0 && (p.exited || p.closed) {
		return nil, protocol.Internal("failed to write to process stdin").WithKind(protocol.KindStdinClosed)
	}
	if err := p.stdin.enqueue(wp.Chunk); err != nil {
		return nil, err
	}
	if wp.WriteID != nil {
		p.rememberWriteID(*wp.WriteID)
	}
	return &protocol.WriteResult{Status: protocol.WriteAccepted}, nil
}

// rememberWriteID keeps the last 4096 write ids for idempotent retries.
func (p *Proc) rememberWriteID(id string) {
	if p.writeIDs == nil {
		p.writeIDs = make(map[string]struct{})
	}
	p.writeIDs[id] = struct{}{}
	p.writeFIFO = append(p.writeFIFO, id)
	if len(p.writeFIFO) > 4096 {
		delete(p.writeIDs, p.writeFIFO[0])
		p.writeFIFO = p.writeFIFO[1:]
	}
}

// signal sends sig to the process group; it reports whether the process had
// not been reaped yet.
func (p *Proc) signal(sig syscall.Signal) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid <= 0 {
		return false
	}
	if sig == syscall.SIGKILL && p.exitCh != nil {
		if sp := p.m.spawnerFor(); sp != nil {
			// Descendants that left the group are reachable only there.
			_ = sp.KillTree(p.pid)
		}
	}
	// The group id is the pid (Setsid). Fall back to the pid alone if the
	// group is gone but the process is not (it cannot leave its session).
	if err := syscall.Kill(-p.pid, sig); errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(p.pid, sig)
	}
	return !p.exited
}

// kill is used at session end: the whole group dies, including background
// children of a leader that has already exited, as long as the process is
// not closed. An open output stream means a member most likely still holds
// the group, so its id cannot have been reused; once closed, the group may
// be empty and its id another's, and killing it could hit a stranger (the
// reference kills it anyway).
func (p *Proc) kill() {
	<-p.ready
	if p.exitCh != nil {
		// Started by the session's spawner, which Close has closed: the
		// whole tree is dead and reaped, and its ids may be others' now.
		return
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if p.pgid > 0 && !closed {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	}
	p.signal(syscall.SIGKILL)
}

// closeOutputs stops reading the output streams, for a descendant that left
// the process group (setsid) and still holds them open after kill.
func (p *Proc) closeOutputs() {
	<-p.ready
	for _, g := range p.outputs {
		_ = g.close()
	}
}

func (p *Proc) stopRetention() {
	if p.retention != nil {
		p.retention.Stop()
	}
}

// waitExit reaps pid. With a pidfd it waits in the netpoller (the pidfd
// turns readable when the child exits), so thousands of live children do
// not cost thousands of blocked threads; without one it falls back to a
// blocking wait4.
func waitExit(pid, pidfd int) (syscall.WaitStatus, error) {
	var status syscall.WaitStatus
	reap := func(flags int) (bool, error) {
		for {
			wpid, err := syscall.Wait4(pid, &status, flags, nil)
			switch {
			case err == syscall.EINTR:
				continue
			case err != nil:
				return true, err
			}
			return wpid == pid, nil
		}
	}
	if pidfd >= 0 {
		if err := unix.SetNonblock(pidfd, true); err == nil {
			f := os.NewFile(uintptr(pidfd), "pidfd")
			defer f.Close()
			if rc, err := f.SyscallConn(); err == nil {
				var werr error
				rerr := rc.Read(func(uintptr) bool {
					done, err := reap(syscall.WNOHANG)
					werr = err
					return done
				})
				if rerr == nil {
					return status, werr
				}
			}
		} else {
			syscall.Close(pidfd)
		}
	}
	_, err := reap(0)
	return status, err
}

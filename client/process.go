package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sync"
	"time"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/protocol"
)

// ErrOutputLost is returned by a Process's output reader at the end of its
// output when part of the output could not be delivered: it was produced
// while the reader was not reading (or the client was disconnected) for
// longer than the server's retained window (1 MiB per process) covers, so
// the server had already discarded it. The bytes that were delivered are
// exactly the process's output minus the lost chunks, in order.
var ErrOutputLost = errors.New("exec-server client: process output lost (evicted from the server's retained window before it was read)")

// ErrStdinClosed is returned by writes to a process whose stdin is not
// writable (not started with StdinPipe, Stdin or TTY, or already closed).
var ErrStdinClosed = errors.New("exec-server client: process stdin is closed")

// DefaultBufferSize is the default bound on a process's unread output held
// by the client.
const DefaultBufferSize = 4 << 20

// unboundedBuffer is Output's buffer bound: none in practice, and small
// enough that sums of sizes and process/read's maxBytes stay exact.
const unboundedBuffer = 1 << 50

// Signal names a signal process/signal delivers. The reference server knows
// only Interrupt; this project's server knows them all (others answer the
// rest with a -32602 *Error).
type Signal string

// Signals by their wire names.
const (
	Interrupt Signal = "interrupt" // SIGINT
	Terminate Signal = "terminate" // SIGTERM
	Kill      Signal = "kill"      // SIGKILL (Process.Terminate also kills, on every server)
	Hangup    Signal = "hangup"    // SIGHUP
	Quit      Signal = "quit"      // SIGQUIT
	User1     Signal = "user1"     // SIGUSR1
	User2     Signal = "user2"     // SIGUSR2
)

// Cmd describes a process to start on the server.
type Cmd struct {
	// Argv is the program and its arguments; a bare argv[0] is looked up in
	// the child environment's PATH (or the server's when it has none).
	Argv []string
	// Cwd is an absolute path on the server; "" is the server's working
	// directory.
	Cwd string
	// Env is the child's environment. With InheritEnv "" it is the exact
	// environment (nothing is inherited from the server).
	Env map[string]string
	// InheritEnv, when "all" or "core", starts the environment from the
	// server's own ("core": HOME, PATH, USER, LANG, TERM and a few more),
	// minus variables whose names contain KEY, SECRET or TOKEN, and then
	// applies Env on top.
	InheritEnv string
	// TTY runs the process on a pseudo-terminal: its output is one stream
	// (Process.Output) and its input is always writable.
	TTY bool
	// Stdin, as exec.Cmd.Stdin, is the process's input: the client copies
	// it to the process (process/write) from a goroutine and, at its end
	// (io.EOF), closes the process's stdin (CloseStdin). Nil: the process
	// reads /dev/null (a TTY process's terminal stays writable with
	// Process.Write). Wait does not wait for the copy (a terminal may never
	// reach its end); it stops at its next read once the process's stdin is
	// closed. Copy errors are logged at debug level.
	Stdin io.Reader
	// StdinPipe keeps the stdin of a process started without Stdin
	// writable through Process.Stdin and Process.Write, as
	// exec.Cmd.StdinPipe: for input that is written as it comes.
	StdinPipe bool
	// Arg0, when set, is the argv[0] the program sees.
	Arg0 string
	// Rows and Cols set the initial terminal size of a TTY process on
	// servers that support sizing (the reference always uses 24x80).
	Rows, Cols int
	// ProcessID names the process on the wire; default a unique id.
	ProcessID string
	// Stdout and Stderr, when set, receive the process's output (for a TTY,
	// Stdout receives it all) from goroutines that Wait waits for, as with
	// os/exec. When nil, read it with Process.Stdout/Stderr/Output instead.
	Stdout, Stderr io.Writer
	// Timeout, when positive, has the server kill the process's tree once
	// it has run this long (process/start's timeoutMs, an extension of
	// this project's server; rounded up to a millisecond, at most 7 days);
	// Process.TimedOut then reports it. Start fails with
	// errors.ErrUnsupported on a server that does not advertise it.
	Timeout time.Duration
	// Sandbox, when set, has the server confine the process with its
	// kernel sandbox, as codex's commands in that mode (see Sandbox);
	// Process.SandboxType and SandboxDenied then tell what happened.
	Sandbox *Sandbox
	// BufferSize bounds the unread output the client holds for this process
	// (both streams together). Default DefaultBufferSize (Client.Output:
	// unbounded, as it keeps the whole output anyway). See Process.
	BufferSize int
}

// startParams adds this project's terminal size extension to process/start;
// other servers ignore the unknown fields.
type startParams struct {
	protocol.StartParams
	Rows int `json:"rows,omitempty"`
	Cols int `json:"cols,omitempty"`
}

type resizeParams struct {
	ProcessID string `json:"processId"`
	Rows      int    `json:"rows"`
	Cols      int    `json:"cols"`
}

type eventKind uint8

const (
	evOutput eventKind = iota + 1
	evExited
	evClosed
)

// event is a process/output, process/exited or process/closed notification.
type event struct {
	kind          eventKind
	ProcessID     string `json:"processId"`
	Seq           uint64 `json:"seq"`
	Stream        string `json:"stream"`
	Chunk         []byte `json:"chunk"`
	ExitCode      int    `json:"exitCode"`
	SandboxDenied *bool  `json:"sandboxDenied"`
	TimedOut      bool   `json:"timedOut"`
}

// Process is a process running on the server.
//
// Output is delivered from the server's pushed events, ordered by their
// sequence number; when the pushed stream is complete and in order, reading
// the output and Wait cost no request at all. When a sequence number is
// missing (the server dropped a push, or the connection was lost and
// resumed) the client fetches exactly the missing chunks with process/read;
// no byte is duplicated or reordered.
//
// Memory is bounded: the client holds at most Cmd.BufferSize bytes of
// unread output per process. When a reader falls behind and the buffer is
// full, the client stops taking that process's pushed output (it drops it
// on receipt) and, once the reader has drained half of the buffer, fetches
// the rest with process/read. The server retains the newest 1 MiB of each
// process's output; output older than that which was never read is lost,
// and the reader then ends with ErrOutputLost instead of io.EOF. Read the
// streams concurrently (or set Cmd.Stdout/Stderr): a stream nobody reads
// eventually stalls the other, as with operating-system pipes.
type Process struct {
	c           *Client
	id          string
	tty         bool
	limit       int
	sandboxType string
	pumps       sync.WaitGroup // Cmd.Stdout/Stderr copiers
	pumpMu      sync.Mutex
	pumpErr     error // the first copier's error: lost output, a failed writer or client

	mu           sync.Mutex
	cond         *sync.Cond // signalled on every change readers care about
	next         uint64     // seq of the next event to apply
	pending      map[uint64]*event
	pendingBytes int
	buffered     int // bytes in outs
	outs         [2]outQueue
	lagging      bool // output pushes are dropped until the reader drains
	recovering   bool // a recovery goroutine is running
	applied      bool // closed applied in order: every output chunk is in outs or lost
	lost         bool
	activity     uint64 // pushes received, for Wait's idle probe
	err          error

	exitKnown   bool
	exited      chan struct{} // closed when exitKnown is set
	exitCode    int
	exitSeq     uint64
	exitGuessed bool // exitSeq is a hole taken for the exit event, not yet confirmed by its push
	denied      *bool
	timedOut    bool
	closedKnown bool
	closedSeq   uint64
	done        chan struct{} // closed when the exit status is final, or on failure
	doneClosed  bool
	stopKill    func() bool // unregisters the kill on Start's ctx; nil when none

	stdinMu     sync.Mutex
	stdinClosed bool
}

type outQueue struct{ bufs [][]byte }

func (q *outQueue) read(b []byte) int {
	n := 0
	for n < len(b) && len(q.bufs) > 0 {
		c := copy(b[n:], q.bufs[0])
		n += c
		if c == len(q.bufs[0]) {
			q.bufs[0] = nil
			q.bufs = q.bufs[1:]
		} else {
			q.bufs[0] = q.bufs[0][c:]
		}
	}
	return n
}

// Start starts a process. Events are buffered from the moment the request
// is sent, so output pushed before the response is not missed. As with
// exec.CommandContext, ctx bounds the process too: when it ends before the
// process has, the process is terminated (Terminate). To start a process
// that outlives ctx, pass context.WithoutCancel(ctx). Otherwise the process
// lives until it exits, is terminated, or the Client is closed.
func (c *Client) Start(ctx context.Context, cmd Cmd) (*Process, error) {
	if len(cmd.Argv) == 0 {
		return nil, errors.New("exec-server client: Start: empty Argv")
	}
	var cwd string
	if cmd.Cwd == "" {
		cwd = c.Info().Cwd
	} else {
		if !path.IsAbs(cmd.Cwd) {
			return nil, fmt.Errorf("exec-server client: Start: Cwd %q is not an absolute path", cmd.Cwd)
		}
		cwd = fileuri.FromPath(cmd.Cwd)
	}
	env := cmd.Env
	if env == nil {
		env = map[string]string{}
	}
	params := startParams{StartParams: protocol.StartParams{
		ProcessID: cmd.ProcessID,
		Argv:      cmd.Argv,
		Cwd:       cwd,
		Env:       env,
		TTY:       cmd.TTY,
		PipeStdin: (cmd.Stdin != nil || cmd.StdinPipe) && !cmd.TTY,
	}}
	if cmd.Stdin != nil && cmd.StdinPipe {
		return nil, errors.New("exec-server client: Start: both Stdin and StdinPipe set")
	}
	if cmd.TTY {
		params.Rows, params.Cols = cmd.Rows, cmd.Cols
	}
	if cmd.Arg0 != "" {
		params.Arg0 = &cmd.Arg0
	}
	if cmd.Timeout > 0 {
		if !c.Info().Capabilities["processTimeout"] {
			return nil, fmt.Errorf("exec-server client: Start: Timeout: %w by this server", errors.ErrUnsupported)
		}
		ms := uint64((cmd.Timeout + time.Millisecond - 1) / time.Millisecond)
		if ms > protocol.MaxTimeoutMs {
			return nil, fmt.Errorf("exec-server client: Start: Timeout %v is longer than %v", cmd.Timeout, time.Duration(protocol.MaxTimeoutMs)*time.Millisecond)
		}
		params.TimeoutMs = &ms
	}
	if cmd.InheritEnv != "" {
		raw, err := json.Marshal(protocol.EnvPolicy{Inherit: cmd.InheritEnv, Exclude: []string{}, Set: map[string]string{}, IncludeOnly: []string{}})
		if err != nil {
			return nil, err
		}
		params.EnvPolicy = raw
	}
	if cmd.Sandbox != nil {
		raw, err := cmd.Sandbox.policy(cwd, "", false)
		if err != nil {
			return nil, err
		}
		params.Sandbox = raw
	}
	if params.ProcessID == "" {
		params.ProcessID = c.newProcessID()
	}
	limit := cmd.BufferSize
	if limit <= 0 {
		limit = DefaultBufferSize
	}
	p := &Process{c: c, id: params.ProcessID, tty: cmd.TTY, limit: limit, next: 1,
		pending: make(map[uint64]*event), done: make(chan struct{}), exited: make(chan struct{}), stdinClosed: !cmd.TTY && cmd.Stdin == nil && !cmd.StdinPipe}
	p.cond = sync.NewCond(&p.mu)

	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	if c.procs[p.id] != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("exec-server client: Start: process id %q is in use", p.id)
	}
	c.procs[p.id] = p
	c.mu.Unlock()

	var res protocol.StartResult
	if err := c.startCall(ctx, &params, &res); err != nil {
		c.forget(p)
		return nil, err
	}
	p.sandboxType = res.SandboxType
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, p.killOnCancel)
		p.mu.Lock()
		if p.doneClosed {
			stop()
		} else {
			p.stopKill = stop
		}
		p.mu.Unlock()
	}
	if cmd.Stdin != nil {
		go p.copyStdin(cmd.Stdin)
	}
	if cmd.Stdout != nil {
		p.pump(cmd.Stdout, p.Stdout())
	}
	if cmd.Stderr != nil && !cmd.TTY {
		p.pump(cmd.Stderr, p.Stderr())
	}
	return p, nil
}

// Output runs cmd to completion and returns its standard output and its
// exit code, as exec.Cmd.Output does locally; standard error goes to
// cmd.Stderr when set and is discarded otherwise. A non-zero exit is not an
// error. cmd.Stdout must be nil. When part of the output was lost the
// error wraps ErrOutputLost and the code is still the exit code; on any
// other error the code is -1. The output returned with an error is what
// had arrived by then, and it is never written to afterwards.
func (c *Client) Output(ctx context.Context, cmd Cmd) ([]byte, int, error) {
	if cmd.Stdout != nil {
		return nil, -1, errors.New("exec-server client: Output: Stdout already set")
	}
	out := &outputBuffer{}
	cmd.Stdout = out
	if cmd.BufferSize <= 0 {
		// Output holds the whole output in memory anyway; a bound on the
		// unread part would only make the client drop pushed chunks
		// whenever its copier is descheduled for 4 MiB of output, and a
		// fast process has overwritten the server's 1 MiB window before
		// they can be read back: the output would be lost, not bounded.
		cmd.BufferSize = unboundedBuffer
	}
	if cmd.Stderr == nil && !cmd.TTY {
		cmd.Stderr = io.Discard
	}
	p, err := c.Start(ctx, cmd)
	if err != nil {
		return nil, -1, err
	}
	code, err := p.Wait(ctx)
	// When Wait failed early the copier may still be running: sealing the
	// buffer makes its later writes fail instead of racing with the caller.
	return out.seal(), code, err
}

// errAbandoned stops the copier of an Output whose result was returned.
var errAbandoned = errors.New("exec-server client: output abandoned")

// outputBuffer is Output's Cmd.Stdout: a buffer that can be sealed while
// its copier goroutine is still running.
type outputBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	sealed bool
}

func (o *outputBuffer) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sealed {
		return 0, errAbandoned
	}
	return o.buf.Write(b)
}

// seal ends writing and returns the bytes written so far; no write
// touches them afterwards.
func (o *outputBuffer) seal() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sealed = true
	return o.buf.Bytes()
}

// startCall sends process/start, repeating it after a reconnect. A repeat
// answered "already exists" means the first attempt reached the server.
func (c *Client) startCall(ctx context.Context, params *startParams, res *protocol.StartResult) error {
	repeated := false
	for {
		rc, _, err := c.current(ctx)
		if err != nil {
			return err
		}
		err = rc.call(ctx, protocol.MethodProcessStart, params, res)
		if errors.Is(err, errConnLost) && c.dialer != nil {
			repeated = true
			continue
		}
		if errors.Is(err, errConnLost) {
			return fmt.Errorf("%w: %s: %v", ErrConnectionLost, protocol.MethodProcessStart, err)
		}
		if repeated && isProcessExists(err) {
			res.ProcessID = params.ProcessID
			return nil
		}
		return err
	}
}

func (c *Client) forget(p *Process) {
	c.mu.Lock()
	if c.procs[p.id] == p {
		delete(c.procs, p.id)
	}
	c.mu.Unlock()
}

// copyStdin copies Cmd.Stdin to the process and closes its stdin at the
// end of r (or when r fails: the process then sees end-of-file, as with
// os/exec). It is not one of the Client's tracked goroutines: r may block
// for ever (a terminal), and Close must not wait for it.
func (p *Process) copyStdin(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := p.Write(p.c.ctx, buf[:n]); werr != nil {
				// The process closed its input or ended (or the client
				// did): nothing more can be delivered.
				p.c.opts.Logger.Debug("exec-server client: copying Stdin stopped", "process", p.id, "err", werr)
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				p.c.opts.Logger.Debug("exec-server client: reading Stdin", "process", p.id, "err", err)
			}
			if cerr := p.CloseStdin(p.c.ctx); cerr != nil {
				p.c.opts.Logger.Debug("exec-server client: closing stdin at the end of Stdin", "process", p.id, "err", cerr)
			}
			return
		}
	}
}

func (p *Process) pump(w io.Writer, r io.Reader) {
	p.pumps.Add(1)
	go func() {
		defer p.pumps.Done()
		if _, err := io.Copy(w, r); err != nil {
			// The reader's error (ErrOutputLost, a lost connection) or the
			// writer's is reported by Wait, so that bytes missing from w
			// never pass for the whole output. After a failing writer the
			// rest of the output is drained so the process is not stalled.
			p.pumpFailed(err)
			if _, err := io.Copy(io.Discard, r); err != nil {
				p.pumpFailed(err)
			}
		}
	}()
}

// pumpFailed records a copier's error; the first one is Wait's.
func (p *Process) pumpFailed(err error) {
	p.pumpMu.Lock()
	defer p.pumpMu.Unlock()
	if p.pumpErr == nil {
		p.pumpErr = err
	}
}

// ID returns the process id used on the wire.
func (p *Process) ID() string { return p.id }

// SandboxType returns the sandbox the server applied ("none" without one).
func (p *Process) SandboxType() string { return p.sandboxType }

// Stdout returns the process's standard output (for a TTY process, all of
// its output). It is the same reader on every call; do not use it when
// Cmd.Stdout is set.
func (p *Process) Stdout() io.Reader { return outReader{p, 0} }

// Stderr returns the process's standard error (empty for a TTY process).
func (p *Process) Stderr() io.Reader { return outReader{p, 1} }

// Output returns the output of a TTY process (the same as Stdout).
func (p *Process) Output() io.Reader { return outReader{p, 0} }

type outReader struct {
	p   *Process
	idx int
}

// Read blocks until output is available, the output has ended (io.EOF, or
// ErrOutputLost if some was lost), or the client failed.
func (r outReader) Read(b []byte) (int, error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		q := &p.outs[r.idx]
		if len(q.bufs) > 0 {
			if len(b) == 0 {
				return 0, nil
			}
			n := q.read(b)
			p.buffered -= n
			if p.lagging && !p.recovering && p.buffered <= p.limit/2 {
				p.startRecovery()
			}
			return n, nil
		}
		if p.applied {
			if p.lost {
				return 0, ErrOutputLost
			}
			return 0, io.EOF
		}
		if p.err != nil {
			return 0, p.err
		}
		p.cond.Wait()
	}
}

// push takes one pushed event; it runs on the connection's read loop and
// never blocks on the network.
func (p *Process) push(ev *event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil || p.applied {
		return
	}
	p.activity++
	p.note(ev)
	switch {
	case ev.Seq < p.next:
		// Already delivered (from a read, or a repeated push).
	case ev.kind == evOutput && p.lagging:
		// The reader is behind: recovered later by process/read.
	case ev.kind == evOutput && p.buffered+p.pendingBytes > 0 && p.buffered+p.pendingBytes+len(ev.Chunk) > p.limit:
		p.lagging = true
	case ev.Seq == p.next:
		p.apply(ev)
		p.drain()
	default:
		if p.pending[ev.Seq] == nil {
			p.pending[ev.Seq] = ev
			p.pendingBytes += len(ev.Chunk)
		}
		if !p.recovering && !p.lagging {
			p.startRecovery() // a gap
		}
	}
	p.settle()
}

// note records what an event says about the process's end, whatever its
// order: the exit status is known as soon as any copy of it arrives.
func (p *Process) note(ev *event) {
	switch ev.kind {
	case evExited:
		if !p.exitKnown {
			p.setExit(ev.ExitCode)
		}
		if p.exitGuessed && ev.Seq != p.exitSeq {
			// The hole skip took for the exit event was output the
			// server no longer held.
			p.lost = true
		}
		p.exitGuessed = false
		p.exitSeq = ev.Seq
		if ev.SandboxDenied != nil {
			p.denied = ev.SandboxDenied
		}
		p.timedOut = p.timedOut || ev.TimedOut
	case evClosed:
		p.closedKnown, p.closedSeq = true, ev.Seq
	}
}

// setExit records the exit code, the first time it is learned. Called with
// p.mu held.
func (p *Process) setExit(code int) {
	p.exitKnown, p.exitCode = true, code
	close(p.exited)
}

// apply delivers the event whose seq is p.next.
func (p *Process) apply(ev *event) {
	switch ev.kind {
	case evOutput:
		if len(ev.Chunk) > 0 {
			i := 0
			if ev.Stream == protocol.StreamStderr {
				i = 1
			}
			p.outs[i].bufs = append(p.outs[i].bufs, ev.Chunk)
			p.buffered += len(ev.Chunk)
		}
	case evExited:
		p.note(ev)
	case evClosed:
		p.note(ev)
		p.applied = true
	}
	p.next = ev.Seq + 1
}

// drain applies pending events that have become contiguous and reports
// whether it applied any.
func (p *Process) drain() bool {
	applied := false
	for {
		ev := p.pending[p.next]
		if ev == nil {
			return applied
		}
		delete(p.pending, p.next)
		p.pendingBytes -= len(ev.Chunk)
		p.apply(ev)
		applied = true
	}
}

// skip passes over p.next when the server no longer holds it as output: it
// is a pending event, the exit or close event, or a lost chunk.
func (p *Process) skip() {
	seq := p.next
	if ev := p.pending[seq]; ev != nil {
		delete(p.pending, seq)
		p.pendingBytes -= len(ev.Chunk)
		p.apply(ev)
		return
	}
	switch {
	case p.exitKnown && p.exitSeq == seq:
	case p.closedKnown && p.closedSeq == seq:
		p.applied = true
	case p.exitKnown && p.exitSeq == 0:
		// The exit is known from a read but its push has not been seen
		// (missed, or still on its way): this hole is taken to be it
		// until the push says otherwise.
		p.exitSeq, p.exitGuessed = seq, true
	default:
		p.lost = true
	}
	p.next = seq + 1
}

// settle finishes the process when its status is final, starts the one
// compatibility read a server that omits sandboxDenied needs, and wakes
// readers.
func (p *Process) settle() {
	if !p.doneClosed && p.exitKnown && p.closedKnown && p.denied != nil {
		p.closeDone()
	}
	if p.exitKnown && p.closedKnown && p.denied == nil && !p.recovering {
		p.startRecovery()
	}
	if p.applied {
		for k := range p.pending {
			delete(p.pending, k)
		}
		p.pendingBytes = 0
		// No more pushes are needed; recovery, if any, reads by request.
		p.c.forget(p)
	}
	p.cond.Broadcast()
}

// startRecovery starts the goroutine that fetches missing events with
// process/read. Called with p.mu held.
func (p *Process) startRecovery() {
	if p.recovering || p.err != nil {
		return
	}
	p.recovering = true
	p.c.wg.Add(1)
	go func() {
		defer p.c.wg.Done()
		p.recover()
	}()
}

// recover reads what the pushed stream is missing until it has caught up
// with the pushes (or the output has ended), the buffer is full again, or
// the process failed.
func (p *Process) recover() {
	failures := 0
	for {
		p.mu.Lock()
		needStatus := p.exitKnown && p.closedKnown && p.denied == nil
		free := p.limit - p.buffered - p.pendingBytes
		if p.err != nil || (p.applied && !needStatus) {
			p.recovering = false
			p.mu.Unlock()
			return
		}
		if free <= 0 && !needStatus && p.buffered > 0 {
			// Full: the reader drains the buffer and restarts recovery.
			// (With nothing buffered, the held-back pushes wait for this
			// gap to be filled, so go on reading whatever the budget.)
			p.lagging = true
			p.recovering = false
			p.mu.Unlock()
			return
		}
		p.lagging = false
		after := p.next - 1
		p.mu.Unlock()

		maxBytes := uint64(max(free, 1))
		var res protocol.ReadResult
		p.c.reads.Add(1)
		err := p.c.call(p.c.ctx, protocol.MethodProcessRead, protocol.ReadParams{ProcessID: p.id, AfterSeq: &after, MaxBytes: &maxBytes}, &res, true)
		if err != nil {
			var pe *protocol.Error
			switch {
			case p.c.ctx.Err() != nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrSessionLost):
				p.fail(err)
				return
			case errors.As(err, &pe) && isUnknownProcess(err):
				p.forgotten(pe)
				return
			}
			failures++
			if failures > 5 {
				p.fail(fmt.Errorf("exec-server client: process %s: recovering output: %w", p.id, err))
				return
			}
			select {
			case <-p.c.ctx.Done():
			case <-time.After(time.Duration(failures) * 100 * time.Millisecond):
			}
			continue
		}
		failures = 0
		p.mu.Lock()
		p.c.opts.Logger.Debug("exec-server client: recovered", "process", p.id, "after", after, "chunks", len(res.Chunks), "nextSeq", res.NextSeq)
		caughtUp := p.merge(&res)
		p.settle()
		// Go on while a gap remains: pushes that arrived (or were dropped
		// because the buffer filled) while this read was in flight.
		if caughtUp && len(p.pending) == 0 && !p.lagging && !(p.exitKnown && p.closedKnown && p.denied == nil) {
			p.recovering = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// merge applies a process/read result and reports whether the client has
// caught up with the server (nothing newer retained, or the pushed events
// now continue where the read ended).
func (p *Process) merge(res *protocol.ReadResult) bool {
	if res.Exited {
		if !p.exitKnown {
			code := -1
			if res.ExitCode != nil {
				code = *res.ExitCode
			}
			p.setExit(code)
		}
		if p.denied == nil {
			d := res.SandboxDenied
			p.denied = &d
		}
		p.timedOut = p.timedOut || res.TimedOut
	}
	for i := range res.Chunks {
		ch := &res.Chunks[i]
		if ch.Seq < p.next {
			continue
		}
		for p.next < ch.Seq && !p.applied {
			p.skip()
		}
		if p.applied {
			break
		}
		if ev := p.pending[ch.Seq]; ev != nil {
			delete(p.pending, ch.Seq)
			p.pendingBytes -= len(ev.Chunk)
		}
		p.apply(&event{kind: evOutput, Seq: ch.Seq, Stream: ch.Stream, Chunk: ch.Chunk})
	}
	if len(res.Chunks) == 0 {
		// Nothing is retained after the cursor: every seq before nextSeq
		// is the exit event, the close event, or output that was evicted.
		if res.Closed && !p.closedKnown {
			p.closedKnown, p.closedSeq = true, res.NextSeq-1
		}
		for p.next < res.NextSeq && !p.applied {
			p.skip()
		}
	}
	drained := p.drain()
	return len(res.Chunks) == 0 || drained || p.applied
}

// forgotten handles a server that no longer knows the process (its
// retention after exit elapsed before the client read what it missed).
func (p *Process) forgotten(pe *protocol.Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recovering = false
	if p.exitKnown {
		if p.denied == nil {
			f := false
			p.denied = &f
		}
		p.closedKnown = true
		p.lost = true
		p.applied = true
		p.settle()
		return
	}
	p.failLocked(fmt.Errorf("exec-server client: process %s: %w", p.id, pe))
}

// resync is called after a reconnect: pushes sent while disconnected are
// lost, so read what came after the last delivered event.
func (p *Process) resync() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.applied && !p.lagging {
		p.startRecovery()
	}
}

func (p *Process) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recovering = false
	p.failLocked(err)
}

func (p *Process) failLocked(err error) {
	if p.err == nil && !p.applied {
		p.err = err
	}
	if !p.doneClosed {
		p.closeDone()
	}
	p.cond.Broadcast()
}

// closeDone makes the exit status final. Called with mu held.
func (p *Process) closeDone() {
	p.doneClosed = true
	close(p.done)
	if p.stopKill != nil {
		p.stopKill() // does not wait for a kill under way
		p.stopKill = nil
	}
}

// killTimeout bounds the process/terminate sent when Start's ctx ends.
const killTimeout = 5 * time.Second

// killOnCancel terminates the process when Start's ctx has ended first.
func (p *Process) killOnCancel() {
	if p.finished() {
		return
	}
	ctx, cancel := context.WithTimeout(p.c.ctx, killTimeout)
	defer cancel()
	if _, err := p.Terminate(ctx); err != nil {
		p.c.opts.Logger.Debug("exec-server client: terminating a process whose context ended", "process", p.id, "err", err)
	}
}

// finished reports whether the process is known to have ended.
func (p *Process) finished() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitKnown || p.err != nil
}

// Wait waits until the process has exited and its output streams have
// closed, and returns its exit code (128+N when killed by signal N). A
// non-zero exit is not an error; the error reports that the status could
// not be learned (ctx ended, the connection was lost for good), with code
// -1. Output not yet read stays readable after Wait returns; when
// Cmd.Stdout or Stderr is set, Wait also waits until all output was copied
// there, and when it could not all be copied (part of it was lost: the
// error wraps ErrOutputLost; the client failed; a writer failed) Wait
// returns the exit code with that error.
func (p *Process) Wait(ctx context.Context) (int, error) {
	var probe <-chan time.Time
	var timer *time.Timer
	if d := p.c.opts.IdleProbe; d > 0 {
		timer = time.NewTimer(d)
		defer timer.Stop()
		probe = timer.C
	}
	p.mu.Lock()
	seen := p.activity
	p.mu.Unlock()
	for {
		select {
		case <-p.done:
			p.mu.Lock()
			code, err := p.exitCode, p.err
			known := p.exitKnown && p.closedKnown
			p.mu.Unlock()
			if !known {
				return -1, err
			}
			p.pumps.Wait()
			p.pumpMu.Lock()
			err = p.pumpErr
			p.pumpMu.Unlock()
			if err != nil && !errors.Is(err, ErrOutputLost) {
				// A client failure or a failed writer: the code stands,
				// but what was written is not the whole output.
				err = fmt.Errorf("exec-server client: process %s: copying output: %w", p.id, err)
			}
			return code, err
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-probe:
			// Nothing heard for a while: if a final event was lost, only
			// asking reveals it.
			p.mu.Lock()
			if p.activity == seen && !p.recovering && !p.lagging {
				p.startRecovery()
			}
			seen = p.activity
			p.mu.Unlock()
			timer.Reset(p.c.opts.IdleProbe)
		}
	}
}

// ReadProcess sends one raw process/read: the retained output after
// params.AfterSeq and the process's state. Processes started with Start
// need not be read this way (their output arrives by itself); it serves
// tools that inspect a process by id, e.g. after a resume.
func (c *Client) ReadProcess(ctx context.Context, params protocol.ReadParams) (*protocol.ReadResult, error) {
	var res protocol.ReadResult
	if err := c.call(ctx, protocol.MethodProcessRead, params, &res, true); err != nil {
		return nil, err
	}
	return &res, nil
}

// Exited returns a channel that is closed as soon as the process's exit
// status is known (ExitCode then reports it), which may be before its
// output has ended: a background job can hold a terminal or a pipe open
// after the process itself exited. Wait waits for both. The channel is
// not closed when the status cannot be learned (Wait then fails).
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitCode returns the exit code and true once the process has exited.
func (p *Process) ExitCode() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitCode, p.exitKnown
}

// SandboxDenied reports whether the server judged the exit a sandbox
// denial; valid after Wait returned.
func (p *Process) SandboxDenied() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.denied != nil && *p.denied
}

// Signal delivers a signal (process/signal). It is not repeated after a
// connection loss (ErrConnectionLost then says it may not have arrived).
func (p *Process) Signal(ctx context.Context, sig Signal) error {
	return p.c.call(ctx, protocol.MethodProcessSignal, protocol.SignalParams{ProcessID: p.id, Signal: string(sig)}, nil, false)
}

// Terminate kills the process and its process group (process/terminate)
// and reports whether it was still running.
func (p *Process) Terminate(ctx context.Context) (bool, error) {
	var res protocol.TerminateResult
	if err := p.c.call(ctx, protocol.MethodProcessTerminate, protocol.TerminateParams{ProcessID: p.id}, &res, true); err != nil {
		return false, err
	}
	return res.Running, nil
}

// TerminateGrace asks the process to stop: SIGTERM to its process group
// now, and the kill of Terminate after grace if it still runs (rounded up
// to a millisecond, at most 5 minutes). It returns at once and reports
// whether the process was running. A server without process/terminate's
// graceMs (capability terminateGrace) would ignore it and kill at once, so
// there TerminateGrace fails with errors.ErrUnsupported and sends nothing
// (the reference's process/signal cannot send SIGTERM either): call
// Terminate instead.
func (p *Process) TerminateGrace(ctx context.Context, grace time.Duration) (bool, error) {
	grace = min(max(grace, 0), time.Duration(protocol.MaxGraceMs)*time.Millisecond)
	if !p.c.Info().Capabilities["terminateGrace"] {
		return false, fmt.Errorf("exec-server client: TerminateGrace: %w by this server", errors.ErrUnsupported)
	}
	ms := uint64((grace + time.Millisecond - 1) / time.Millisecond)
	var res protocol.TerminateResult
	if err := p.c.call(ctx, protocol.MethodProcessTerminate, protocol.TerminateParams{ProcessID: p.id, GraceMs: &ms}, &res, true); err != nil {
		return false, err
	}
	return res.Running, nil
}

// TimedOut reports whether the server killed the process because its
// Cmd.Timeout expired. It is final once Wait has returned.
func (p *Process) TimedOut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.timedOut
}

// Resize sets a TTY process's terminal size (process/resize, an extension
// of this project's server). Other servers make it fail with
// errors.ErrUnsupported.
func (p *Process) Resize(ctx context.Context, rows, cols int) error {
	return p.c.extension(ctx, protocol.MethodProcessResize, resizeParams{ProcessID: p.id, Rows: rows, Cols: cols}, nil, true)
}

// maxWriteChunk bounds one process/write: big writes are split so no
// message approaches the server's limit and each can be retried alone.
const maxWriteChunk = 256 << 10

// Write sends data to the process's stdin (process/write). Each request
// carries a unique writeId, kept when it is repeated after a reconnect, so
// a repeat never writes twice.
func (p *Process) Write(ctx context.Context, data []byte) error {
	p.stdinMu.Lock()
	closed := p.stdinClosed
	p.stdinMu.Unlock()
	if closed {
		return ErrStdinClosed
	}
	for len(data) > 0 {
		n := min(len(data), maxWriteChunk)
		if err := p.writeChunk(ctx, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func (p *Process) writeChunk(ctx context.Context, chunk []byte) error {
	wid := p.c.newWriteID()
	backoff := 5 * time.Millisecond
	for {
		var res protocol.WriteResult
		err := p.c.call(ctx, protocol.MethodProcessWrite, protocol.WriteParams{ProcessID: p.id, Chunk: chunk, WriteID: &wid}, &res, true)
		switch {
		case err == nil && res.Status == protocol.WriteAccepted:
			return nil
		case err == nil && res.Status == protocol.WriteStarting:
			// Still spawning: the write was not taken; try again.
		case err == nil && res.Status == protocol.WriteStdinClosed:
			return ErrStdinClosed
		case err == nil:
			return fmt.Errorf("exec-server client: process/write to %s: status %q", p.id, res.Status)
		case classifyWrite(err) == stdinRetry:
			// The process's stdin queue is full: the child is not reading
			// yet. Back off; the same writeId keeps the retry idempotent.
		case classifyWrite(err) == stdinBusy:
			return fmt.Errorf("%w: %v", ErrStdinBusy, err)
		case classifyWrite(err) == stdinClosed:
			return fmt.Errorf("%w: %v", ErrStdinClosed, err)
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// CloseStdin ends the process's input so it reads end-of-file. For a TTY
// process it sends ^D, which a terminal in canonical mode turns into
// end-of-file. For a pipe it calls process/closeStdin, an extension of this
// project's server; other servers cannot close a pipe's stdin (the error
// then wraps errors.ErrUnsupported).
func (p *Process) CloseStdin(ctx context.Context) error {
	p.stdinMu.Lock()
	if p.stdinClosed {
		p.stdinMu.Unlock()
		return nil
	}
	p.stdinMu.Unlock()
	var err error
	if p.tty {
		err = p.writeChunk(ctx, []byte{4})
	} else {
		err = p.c.extension(ctx, protocol.MethodProcessCloseStdin, protocol.CloseStdinParams{ProcessID: p.id}, nil, true)
	}
	if err == nil || errors.Is(err, errors.ErrUnsupported) {
		// Later writes fail locally either way: the caller said input
		// has ended.
		p.stdinMu.Lock()
		p.stdinClosed = true
		p.stdinMu.Unlock()
	}
	return err
}

// Stdin returns the process's stdin as an io.WriteCloser: Write is Write
// with no deadline and Close is CloseStdin.
func (p *Process) Stdin() io.WriteCloser { return stdinWriter{p} }

type stdinWriter struct{ p *Process }

func (w stdinWriter) Write(b []byte) (int, error) {
	if err := w.p.Write(w.p.c.ctx, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (w stdinWriter) Close() error { return w.p.CloseStdin(w.p.c.ctx) }

// SignalProcess sends sig to the session's process id (process/signal),
// one this Client did not start: a process of a resumed session
// (Options.ResumeSession).
func (c *Client) SignalProcess(ctx context.Context, id string, sig Signal) error {
	return c.call(ctx, protocol.MethodProcessSignal, protocol.SignalParams{ProcessID: id, Signal: string(sig)}, nil, false)
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/protocol"
)

// lockedWriter serialises writes: exec's stderr receives the remote
// stderr and exec's own messages from different goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// Fd lets isTerminal see through the lock.
func (l *lockedWriter) Fd() uintptr {
	if f, ok := l.w.(interface{ Fd() uintptr }); ok {
		return f.Fd()
	}
	return ^uintptr(0)
}

// execOptions are exec's parsed flags.
type execOptions struct {
	argv        []string
	env         map[string]string
	workdir     string
	inherit     string
	interactive bool
	tty         bool
	timeout     time.Duration
	detachSpec  string
	detachKeys  []byte
	sandbox     *client.Sandbox
	detach      bool
}

func (c *command) parseExec(args []string) (*execOptions, int, bool) {
	fs := c.flags("[flags] CMD [ARG...]   (flags end at CMD, or at --)")
	o := &execOptions{env: map[string]string{}}
	var envs, envFiles []string
	fs.BoolVarP(&o.interactive, "interactive", "i", false, "forward stdin")
	fs.BoolVarP(&o.tty, "tty", "t", false, "run CMD on a pseudo-terminal (-it: an interactive terminal session)")
	fs.BoolVarP(&o.detach, "detach", "d", false, "start CMD, print its process id and leave it running in its session (ps, attach, kill find it)")
	fs.StringArrayVarP(&envs, "env", "e", nil, "set environment variable `K=V` (repeatable; a bare K passes the local value)")
	fs.StringArrayVar(&envFiles, "env-file", nil, "read K=V lines from `FILE` (# comments; repeatable; -e wins)")
	fs.StringVarP(&o.workdir, "workdir", "w", "", "working `DIR` on the server (absolute; default the server's)")
	fs.StringVar(&o.workdir, "cwd", "", "same as --workdir")
	_ = fs.MarkHidden("cwd")
	fs.StringVar(&o.inherit, "env-inherit", "all", "how much of the server's environment to start from, `MODE` all, core or none")
	fs.DurationVar(&o.timeout, "timeout", 0, "kill the remote command (its whole tree) after `D`, on the server; exit 124 then")
	fs.StringVar(&o.detachSpec, "detach-keys", "ctrl-p,ctrl-q", "with -it on a terminal, the `KEYS` that detach (\"\" for none)")
	var sandboxMode string
	var writable []string
	var network bool
	fs.StringVar(&sandboxMode, "sandbox", "", "confine CMD with the server's kernel sandbox, `MODE` read-only or workspace-write (codex's policies)")
	fs.StringArrayVar(&writable, "writable", nil, "with --sandbox workspace-write, also make `DIR` writable (repeatable; the working directory always is)")
	fs.BoolVar(&network, "network", false, "with --sandbox, allow network access (default: none)")
	if code, ok := c.parse(fs, args, false); !ok {
		return nil, code, false
	}
	o.argv = fs.Args()
	if len(o.argv) == 0 {
		return nil, c.usageErr("no command given"), false
	}
	for _, f := range envFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, c.usageErr("--env-file: %v", err), false
		}
		if err := parseEnvFile(b, o.env, os.LookupEnv); err != nil {
			return nil, c.usageErr("--env-file %s: %v", f, err), false
		}
	}
	for _, e := range envs {
		if err := setEnv(o.env, e, os.LookupEnv); err != nil {
			return nil, c.usageErr("-e %q: %v", e, err), false
		}
	}
	switch o.inherit {
	case "all", "core", "none":
	default:
		return nil, c.usageErr("--env-inherit %q: want all, core or none", o.inherit), false
	}
	if o.workdir != "" && !strings.HasPrefix(o.workdir, "/") {
		return nil, c.usageErr("--workdir %q: want an absolute path on the server", o.workdir), false
	}
	if o.timeout < 0 {
		return nil, c.usageErr("--timeout %v: want a positive duration", o.timeout), false
	}
	switch sandboxMode {
	case "":
		if len(writable) > 0 || network {
			return nil, c.usageErr("--writable and --network need --sandbox"), false
		}
	case string(client.SandboxReadOnly), string(client.SandboxWorkspaceWrite):
		if sandboxMode == string(client.SandboxReadOnly) && len(writable) > 0 {
			return nil, c.usageErr("--writable needs --sandbox workspace-write"), false
		}
		for _, w := range writable {
			if !strings.HasPrefix(w, "/") {
				return nil, c.usageErr("--writable %q: want an absolute path on the server", w), false
			}
		}
		o.sandbox = &client.Sandbox{Mode: client.SandboxMode(sandboxMode), WritableRoots: writable, Network: network}
	default:
		return nil, c.usageErr("--sandbox %q: want read-only or workspace-write", sandboxMode), false
	}
	keys, err := parseDetachKeys(o.detachSpec)
	if err != nil {
		return nil, c.usageErr("--detach-keys: %v", err), false
	}
	o.detachKeys = keys
	return o, 0, true
}

// execSignals are the signals exec handles itself for as long as it runs.
// SIGPIPE is caught so that a closed stdout is an error to handle
// (terminate the remote command) rather than sudden death; SIGQUIT
// (Ctrl-\) is forwarded rather than dumping this program's stacks.
var execSignals = append([]os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE}, resizeSignals...)

func (c *command) exec(ctx context.Context, args []string) int {
	c.stderr = &lockedWriter{w: c.stderr}
	o, code, ok := c.parseExec(args)
	if !ok {
		return code
	}
	// From here on no signal takes the default action.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, execSignals...)
	defer signal.Stop(sigs)

	if o.tty && !isTerminal(c.stdin) {
		if o.interactive {
			c.notef("warning: -t given but stdin is not a terminal: input is forwarded as it comes (no raw mode, no detach keys)")
		} else {
			c.notef("warning: -t given but stdin is not a terminal")
		}
	}
	cmd := client.Cmd{Argv: o.argv, Cwd: o.workdir, Env: o.env, TTY: o.tty, StdinPipe: o.interactive, Timeout: o.timeout, Sandbox: o.sandbox}
	if o.inherit != "none" {
		cmd.InheritEnv = o.inherit
	}
	// The local terminal's size for the remote one.
	var sizeSrc any = c.stdout
	if !isTerminal(c.stdout) {
		sizeSrc = c.stdin
	}
	if o.tty {
		if term := os.Getenv("TERM"); term != "" && o.env["TERM"] == "" {
			cmd.Env["TERM"] = term
		}
		cmd.Rows, cmd.Cols, _ = winsize(sizeSrc)
	}

	// Connect and start while watching the signals: one that ends us
	// before the command runs ends the start too.
	type startResult struct {
		cl   *client.Client
		p    *client.Process
		code int
	}
	setupCtx, cancelSetup := context.WithCancelCause(ctx)
	defer cancelSetup(nil)
	started := make(chan startResult, 1)
	go func() {
		cl, code := c.dial(setupCtx)
		if cl == nil {
			started <- startResult{code: code}
			return
		}
		sctx := setupCtx
		if o.detach {
			// The process outlives this command.
			sctx = context.WithoutCancel(setupCtx)
		}
		p, err := cl.Start(sctx, cmd)
		switch {
		case errors.Is(err, errors.ErrUnsupported) && o.timeout > 0:
			code = c.fail(exitFailure, "--timeout: the server cannot time a command out (no processTimeout capability)")
		case err != nil && setupCtx.Err() == nil:
			code = c.startFailed(ctx, cl, cmd, err)
		}
		started <- startResult{cl, p, code}
	}()
	var st startResult
	var stopSig os.Signal
setup:
	for {
		select {
		case st = <-started:
			break setup
		case sig := <-sigs:
			if isResize(sig) {
				continue
			}
			stopSig = sig
			cancelSetup(fmt.Errorf("%v", sig))
		}
	}
	if st.p == nil {
		if st.cl != nil {
			st.cl.Close()
		}
		if s, ok := stopSig.(syscall.Signal); ok {
			return c.fail(128+int(s), "%v before the command started", stopSig)
		}
		return st.code
	}
	cl, p := st.cl, st.p
	if o.detach {
		c.rememberSession(cl.SessionID())
		fmt.Fprintln(c.stdout, p.ID())
		_ = cl.Detach()
		return 0
	}
	detached := false
	defer func() {
		if detached {
			// The session and its command live on for the server's
			// session TTL; only this connection ends.
			_ = cl.Detach()
		} else {
			cl.Close()
		}
	}()
	if o.tty && cmd.Rows > 0 {
		// Servers that take the size with process/start ignore this; ones
		// that know only process/resize need it; others refuse it, which
		// is fine: the remote terminal stays 24x80.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = p.Resize(rctx, cmd.Rows, cmd.Cols)
		cancel()
	}
	localTerm := o.tty && o.interactive && isTerminal(c.stdin)
	if localTerm {
		if err := c.term.makeRaw(c.stdin); err != nil {
			localTerm = false
			c.notef("warning: the local terminal cannot be put in raw mode (%v): keys are read line by line", err)
		}
		defer c.term.restore()
	}
	run := &execRun{c: c, o: o, cl: cl, p: p, sigs: sigs, sizeSrc: sizeSrc, localTerm: localTerm}
	if stopSig != nil {
		// It came as the command started: the command gets it.
		run.forward(ctx, stopSig)
	}
	code = run.loop(ctx)
	detached = run.detached
	return code
}

// execRun is one started exec: it forwards input and signals and copies
// output until the remote command is done.
type execRun struct {
	c         *command
	o         *execOptions
	cl        *client.Client
	p         *client.Process
	sigs      chan os.Signal
	sizeSrc   any
	localTerm bool // stdin is a local terminal in raw mode
	detached  bool
}

// exitNoticeAfter is how long the remote command may have exited with its
// output still open before exec says why it is still waiting (normally the
// output closes right after the exit).
const exitNoticeAfter = time.Second

func (r *execRun) loop(ctx context.Context) int {
	c, p := r.c, r.p
	// Output copiers: they end when the process's output ends. A local
	// write failure (stdout closed: `exec ... | head -1`) is reported on
	// writeFailed so the remote process is not left running.
	var copiers sync.WaitGroup
	var outErr, errErr error
	writeFailed := make(chan error, 2)
	copiers.Add(1)
	go func() {
		defer copiers.Done()
		outErr = copyOutput(c.stdout, p.Stdout(), writeFailed)
	}()
	if !r.o.tty {
		copiers.Add(1)
		go func() {
			defer copiers.Done()
			errErr = copyOutput(c.stderr, p.Stderr(), writeFailed)
		}()
	}

	waitCtx, cancelWait := context.WithCancel(ctx)
	defer cancelWait()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := p.Wait(waitCtx)
		done <- result{code, err}
	}()

	// Input. A local terminal is read here until the remote side is done,
	// even after the remote command has exited, so that nothing typed
	// meanwhile is left for the local shell; other input is copied as is.
	stop := make(chan struct{})
	defer close(stop)
	stdinNote := make(chan string, 1)
	var keys <-chan []byte
	var keysEOF <-chan struct{}
	var writes chan<- []byte
	switch {
	case r.localTerm:
		k, eof := readKeys(c.stdin, stop)
		keys, keysEOF = k, eof
		w := make(chan []byte, 256)
		writes = w
		defer close(w)
		go func() {
			// One writer keeps the keystrokes in order.
			for b := range w {
				_ = p.Write(waitCtx, b)
			}
		}()
	case r.o.interactive:
		go func() {
			if _, err := io.Copy(p.Stdin(), c.stdin); err != nil {
				return
			}
			if err := p.CloseStdin(ctx); errors.Is(err, errors.ErrUnsupported) {
				stdinNote <- "warning: end of input not forwarded: the server cannot close a process's stdin"
			}
		}()
	}
	matcher := &escapeMatcher{seq: r.o.detachKeys}
	// On a local terminal, a command that exited while its terminal stays
	// open (a background job) gets a notice after exitNoticeAfter.
	var exited <-chan struct{}
	if r.localTerm {
		exited = p.Exited()
	}
	var notice <-chan time.Time
	// The first Ctrl-C or Ctrl-\ is forwarded; a second one ends exec
	// (130, 131), whatever holds the remote output open. SIGTERM and
	// SIGHUP are forwarded and end exec (143, 129) once the command is
	// done, or after stopGrace.
	seen := map[os.Signal]bool{}
	var giveUp <-chan time.Time
	giveUpCode := 0

	var res result
wait:
	for {
		select {
		case res = <-done:
			if giveUpCode != 0 && res.err == nil {
				copiers.Wait()
				return giveUpCode
			}
			break wait
		case <-giveUp:
			c.notef("stopped waiting for the remote command (%s); it was sent the signal", syscall.Signal(giveUpCode-128))
			return giveUpCode
		case note := <-stdinNote:
			c.notef("%s", note)
		case b := <-keys:
			fwd, hit := matcher.feed(b)
			if hit {
				r.detached = true
				c.term.restore()
				c.rememberSession(r.cl.SessionID())
				c.notef("detached; the remote command goes on in session %s until the server's session TTL ends (exec-server ps --session %s lists it)", r.cl.SessionID(), r.cl.SessionID())
				return 0
			}
			if _, exited := p.ExitCode(); exited {
				// The command is gone: keys are swallowed, and Ctrl-C
				// stops waiting for whatever holds its terminal open.
				if strings.IndexByte(string(fwd), 3) >= 0 {
					code, _ := p.ExitCode()
					c.notef("stopped waiting for the remote terminal to close")
					return code
				}
				continue
			}
			if len(fwd) > 0 {
				writes <- fwd
			}
		case <-keysEOF:
			keysEOF, keys = nil, nil
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = p.CloseStdin(cctx)
			cancel()
		case <-exited:
			exited = nil
			t := time.NewTimer(exitNoticeAfter)
			defer t.Stop()
			notice = t.C
		case <-notice:
			code, _ := p.ExitCode()
			detach := ""
			if r.o.detachSpec != "" {
				detach = ", " + r.o.detachSpec + " detaches"
			}
			c.notef("the remote command exited with %d, but its terminal is still open (a background job?); waiting for it to close (Ctrl-C stops waiting%s)", code, detach)
		case err := <-writeFailed:
			// Like a local pipeline: the writer is gone, so is the
			// command.
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = p.Terminate(tctx)
			cancel()
			if errors.Is(err, syscall.EPIPE) {
				return 128 + int(syscall.SIGPIPE)
			}
			return c.fail(exitRemote, "writing output: %v", err)
		case sig := <-r.sigs:
			s, isSig := sig.(syscall.Signal)
			switch {
			case !isSig || isResize(sig):
			case (sig == syscall.SIGINT || sig == syscall.SIGQUIT) && seen[sig]:
				c.notef("%s again: stopped waiting; the remote command is terminated", describeSignal(sig))
				return 128 + int(s)
			case sig == syscall.SIGTERM || sig == syscall.SIGHUP:
				if giveUp == nil {
					t := time.NewTimer(stopGrace)
					defer t.Stop()
					giveUp, giveUpCode = t.C, 128+int(s)
				}
			}
			if (sig == syscall.SIGINT || sig == syscall.SIGQUIT) && !seen[sig] {
				// Either way the user learns that a second one stops
				// waiting: whether the exit is known yet here depends on
				// when its notification arrives, not on the command.
				if code, exited := p.ExitCode(); exited {
					c.notef("the remote command exited with %d, but its output is still open (a background job?); %s again stops waiting", code, describeSignal(sig))
				} else {
					c.notef("%s passed to the remote command; %s again stops waiting", describeSignal(sig), describeSignal(sig))
				}
			}
			seen[sig] = true
			r.forward(ctx, sig)
		}
	}
	if res.err != nil {
		switch {
		case ctx.Err() != nil:
			// Stopped from outside: Close (deferred) terminates the
			// remote process.
			return c.fail(exitRemote, "stopped (%v); terminating the remote process", context.Cause(ctx))
		case errors.Is(res.err, client.ErrSessionLost):
			return c.fail(exitRemote, "session lost: %s", describe(res.err))
		case errors.Is(res.err, client.ErrConnectionLost):
			return c.fail(exitRemote, "connection lost: %s", strings.TrimPrefix(strings.TrimPrefix(res.err.Error(), client.ErrConnectionLost.Error()), ": "))
		}
		return c.fail(exitRemote, "%s", describe(res.err))
	}
	copiers.Wait()
	for _, err := range []error{outErr, errErr} {
		if errors.Is(err, errWriteFailed) {
			continue // reported through writeFailed
		}
		if errors.Is(err, client.ErrOutputLost) {
			return c.fail(exitRemote, "part of the output was lost (the remote command exited with %d)", res.code)
		}
		if err != nil {
			return c.fail(exitRemote, "%s", describe(err))
		}
	}
	if p.SandboxDenied() {
		c.notef("the sandbox (%s) denied an operation of the remote command (exit %d)", r.o.sandbox.Mode, res.code)
	}
	return c.timedOut(p, r.o.timeout, res.code)
}

// stopGrace is how long exec waits, after forwarding SIGTERM or SIGHUP, for
// the remote command to finish its output before it ends anyway.
const stopGrace = 2 * time.Second

func describeSignal(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "Ctrl-C"
	case syscall.SIGQUIT:
		return "Ctrl-\\"
	}
	return sig.String()
}

// forward passes a signal exec received to the remote process.
func (r *execRun) forward(ctx context.Context, sig os.Signal) {
	p := r.p
	// Not derived from ctx: a signal that also ends ctx must still reach
	// the remote process.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	switch sig {
	case syscall.SIGINT:
		_ = p.Signal(sctx, client.Interrupt)
	case syscall.SIGQUIT:
		if err := p.Signal(sctx, client.Quit); err != nil {
			r.c.notef("SIGQUIT not forwarded: %s", describe(err))
		}
	case syscall.SIGTERM, syscall.SIGHUP:
		// Forward it; a server that knows only interrupt gets a kill
		// instead, so the remote command never outlives us.
		name := client.Terminate
		if sig == syscall.SIGHUP {
			name = client.Hangup
		}
		if p.Signal(sctx, name) != nil {
			_, _ = p.Terminate(sctx)
		}
	default:
		if isResize(sig) && r.o.tty {
			if rows, cols, ok := winsize(r.sizeSrc); ok {
				_ = p.Resize(sctx, rows, cols)
			}
		}
	}
}

// readKeys reads a terminal in a goroutine: each read is sent on keys
// (a fresh slice), and eof is closed when the input ends. The goroutine
// stops sending once stop is closed (a read in progress cannot be undone:
// its bytes are dropped, which is what exec wants once it is done).
func readKeys(r io.Reader, stop <-chan struct{}) (<-chan []byte, <-chan struct{}) {
	keys := make(chan []byte)
	eof := make(chan struct{})
	go func() {
		for {
			buf := make([]byte, 4096)
			n, err := r.Read(buf)
			if n > 0 {
				select {
				case keys <- buf[:n]:
				case <-stop:
					return
				}
			}
			if err != nil {
				close(eof)
				return
			}
		}
	}()
	return keys, eof
}

var errWriteFailed = errors.New("local write failed")

// copyOutput copies a process's output to w. A read error (lost output, a
// lost connection) is returned; a write error is sent to writeFailed and
// returned wrapped in errWriteFailed, and the rest of the output is
// drained so the process is not stalled meanwhile.
func copyOutput(w io.Writer, r io.Reader, writeFailed chan<- error) error {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				writeFailed <- werr
				_, _ = io.Copy(io.Discard, r)
				return fmt.Errorf("%w: %v", errWriteFailed, werr)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// startFailed reports a failed process/start, naming what is at fault:
// the working directory or the program, found out by asking the server
// about them (fs/getMetadata, and a PATH lookup) rather than by reading
// the error's text. The exit codes are the ones shells use: 127 for
// something missing, 126 for a program that cannot be run.
func (c *command) startFailed(ctx context.Context, cl *client.Client, cmd client.Cmd, err error) int {
	prog := cmd.Argv[0]
	var e *client.Error
	if !errors.As(err, &e) {
		return c.fail(exitRemote, "%s: %s", prog, describe(err))
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if cmd.Cwd != "" {
		fi, serr := cl.Stat(dctx, cmd.Cwd)
		switch {
		case isNotFound(serr):
			return c.fail(exitNoFound, "--workdir %s: no such directory on the server", cmd.Cwd)
		case serr == nil && !fi.IsDir():
			return c.fail(exitNoFound, "--workdir %s: not a directory", cmd.Cwd)
		}
	}
	if strings.Contains(prog, "/") {
		p := prog
		if !path.IsAbs(p) {
			base := cmd.Cwd
			if base == "" {
				base, _ = localPathOfURI(cl.Info().Cwd)
			}
			p = path.Join(base, p)
		}
		fi, serr := cl.Stat(dctx, p)
		switch {
		case isNotFound(serr):
			return c.fail(exitNoFound, "%s: no such file on the server", prog)
		case serr == nil && fi.IsDir():
			return c.fail(exitNoExec, "%s: is a directory", prog)
		case serr == nil:
			return c.fail(exitNoExec, "%s: cannot be executed: %s", prog, e.Message)
		}
	} else if found, ok := lookPath(dctx, cl, cmd); ok {
		if found == "" {
			return c.fail(exitNoFound, "%s: command not found on the server (not in its PATH)", prog)
		}
		return c.fail(exitNoExec, "%s (%s): cannot be executed: %s", prog, found, e.Message)
	}
	return c.fail(exitFailure, "%s: %s", prog, e.Message)
}

func isNotFound(err error) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Code == protocol.CodeNotFound
}

// lookPath asks the server's shell where cmd's program is, with cmd's
// environment and directory (so with the PATH the start used). ok is false
// when that could not be learned.
func lookPath(ctx context.Context, cl *client.Client, cmd client.Cmd) (found string, ok bool) {
	prog := cmd.Argv[0]
	if strings.HasPrefix(prog, "-") {
		return "", false
	}
	probe := client.Cmd{
		Argv:       []string{"/bin/sh", "-c", `command -v "$1"`, "sh", prog},
		Cwd:        cmd.Cwd,
		Env:        cmd.Env,
		InheritEnv: cmd.InheritEnv,
	}
	out, code, err := cl.Output(ctx, probe)
	switch {
	case err != nil:
		return "", false
	case code != 0:
		return "", true
	}
	return strings.TrimSpace(string(out)), true
}

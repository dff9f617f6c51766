package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/execgo/exec-server/client"
)

// envFlag collects repeated -e K=V flags.
type envFlag map[string]string

func (e envFlag) String() string { return "" }

func (e envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	e[k] = v
	return nil
}

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

func (c *command) exec(ctx context.Context, args []string) int {
	c.stderr = &lockedWriter{w: c.stderr}
	fs := c.flags("[flags] [--] CMD [ARG...]")
	env := envFlag{}
	fs.Var(env, "e", "set environment variable `K=V` (repeatable)")
	cwd := fs.String("cwd", "", "working `DIR` on the server (absolute; default the server's)")
	inherit := fs.String("env-inherit", "all", "start from the server's environment: all, core or none")
	interactive := fs.Bool("i", false, "forward stdin")
	tty := fs.Bool("t", false, "run on a pseudo-terminal")
	it := fs.Bool("it", false, "-i and -t: an interactive terminal session")
	ti := fs.Bool("ti", false, "same as -it")
	timeout := fs.Duration("timeout", 0, "kill the remote command (its whole tree) after `D`, on the server; exit 124 then")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return c.usageErr("no command given")
	}
	switch *inherit {
	case "all", "core", "none":
	default:
		return c.usageErr("--env-inherit %q: want all, core or none", *inherit)
	}
	if *cwd != "" && !strings.HasPrefix(*cwd, "/") {
		return c.usageErr("--cwd %q: want an absolute path on the server", *cwd)
	}
	if *timeout < 0 {
		return c.usageErr("--timeout %v: want a positive duration", *timeout)
	}
	if *it || *ti {
		*interactive, *tty = true, true
	}

	cl, code := c.dial(ctx)
	if cl == nil {
		return code
	}
	defer cl.Close()

	cmd := client.Cmd{Argv: argv, Cwd: *cwd, Env: map[string]string(env), TTY: *tty, Stdin: *interactive, Timeout: *timeout}
	if *inherit != "none" {
		cmd.InheritEnv = *inherit
	}
	// The local terminal: raw mode for an interactive terminal session and
	// its size for the remote one.
	localTerm := *tty && isTerminal(c.stdin)
	var sizeSrc any = c.stdout
	if !isTerminal(c.stdout) {
		sizeSrc = c.stdin
	}
	if *tty {
		if term := os.Getenv("TERM"); term != "" && env["TERM"] == "" {
			cmd.Env["TERM"] = term
		}
		cmd.Rows, cmd.Cols, _ = winsize(sizeSrc)
	}

	p, err := cl.Start(ctx, cmd)
	if errors.Is(err, errors.ErrUnsupported) && *timeout > 0 {
		return c.fail(exitFailure, "--timeout: the server cannot time a command out (no processTimeout capability)")
	}
	if err != nil {
		return c.startFailed(argv[0], err)
	}
	if *tty && cmd.Rows > 0 {
		// Servers that take the size with process/start ignore this; ones
		// that know only process/resize need it; others refuse it, which
		// is fine: the remote terminal stays 24x80.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = p.Resize(rctx, cmd.Rows, cmd.Cols)
		cancel()
	}
	if localTerm && *interactive {
		restore, err := makeRaw(c.stdin)
		if err == nil {
			defer restore()
		}
	}

	sigs := make(chan os.Signal, 4)
	// SIGPIPE is caught so that a closed stdout is an error to handle
	// (terminate the remote command) rather than sudden death.
	signal.Notify(sigs, append([]os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}, resizeSignals...)...)
	defer signal.Stop(sigs)

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
	if !*tty {
		copiers.Add(1)
		go func() {
			defer copiers.Done()
			errErr = copyOutput(c.stderr, p.Stderr(), writeFailed)
		}()
	}
	// The stdin forwarder ends at the end of local input (for a terminal,
	// when the program exits).
	// It reports through a channel, so that only this goroutine writes to
	// stderr.
	stdinNote := make(chan string, 1)
	if *interactive {
		go func() {
			if _, err := io.Copy(p.Stdin(), c.stdin); err != nil {
				return
			}
			if err := p.CloseStdin(ctx); errors.Is(err, errors.ErrUnsupported) {
				stdinNote <- "warning: end of input not forwarded: the server cannot close a process's stdin"
			}
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
	var res result
wait:
	for {
		select {
		case res = <-done:
			break wait
		case note := <-stdinNote:
			fmt.Fprintf(c.stderr, "exec-server exec: %s\n", note)
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
		case sig := <-sigs:
			// Not derived from ctx: a signal that also ends ctx must
			// still reach the remote process.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			switch sig {
			case syscall.SIGINT:
				_ = p.Signal(sctx, client.Interrupt)
			case syscall.SIGTERM, syscall.SIGHUP:
				// Forward it; a server that knows only interrupt gets a
				// kill instead, so the remote command never outlives us.
				name := client.Terminate
				if sig == syscall.SIGHUP {
					name = client.Hangup
				}
				if p.Signal(sctx, name) != nil {
					_, _ = p.Terminate(sctx)
				}
			default:
				if isResize(sig) && *tty {
					if rows, cols, ok := winsize(sizeSrc); ok {
						_ = p.Resize(sctx, rows, cols)
					}
				}
			}
			cancel()
		}
	}
	if res.err != nil {
		if ctx.Err() != nil {
			// Stopped from outside: Close (deferred) terminates the
			// remote process.
			return c.fail(exitRemote, "stopped (%v); terminating the remote process", context.Cause(ctx))
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
	return c.timedOut(p, *timeout, res.code)
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

// startFailed reports a failed process/start with the exit codes shells
// use for a missing or non-executable program.
func (c *command) startFailed(prog string, err error) int {
	msg := describe(err)
	code := exitRemote
	var e *client.Error
	if errors.As(err, &e) {
		code = exitFailure
		switch {
		case strings.Contains(e.Message, "(os error 2)"):
			code = exitNoFound
		case strings.Contains(e.Message, "(os error 13)"):
			code = exitNoExec
		}
	}
	return c.fail(code, "%s: %s", prog, msg)
}

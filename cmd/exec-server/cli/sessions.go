package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/protocol"
)

// The detached session: exec -d (and the -it detach keys) leave the command
// running in its session and remember the session id per server in
// $XDG_STATE_HOME/exec-server/ (else ~/.local/state), so that ps, attach
// and kill find it without --session (docker's container, here a session).

func sessionFile(url string) (string, error) {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".local", "state")
	}
	sum := sha256.Sum256([]byte(url))
	return filepath.Join(dir, "exec-server", "session-"+hex.EncodeToString(sum[:8])), nil
}

// rememberSession records the detached session of the server at c.url.
func (c *command) rememberSession(id string) {
	f, err := sessionFile(c.url)
	if err == nil {
		if err = os.MkdirAll(filepath.Dir(f), 0o700); err == nil {
			err = os.WriteFile(f, []byte(id+"\n"), 0o600)
		}
	}
	if err != nil {
		c.notef("warning: the session id could not be saved (%v): use --session %s", err, id)
	}
}

// defaultSession is --session's default: $EXEC_SERVER_SESSION, else the
// session remembered for the server.
func (c *command) defaultSession() string {
	if s := os.Getenv("EXEC_SERVER_SESSION"); s != "" {
		return s
	}
	if f, err := sessionFile(c.url); err == nil {
		if b, err := os.ReadFile(f); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// resumed dials the session named by --session or remembered.
func (c *command) resumed(ctx context.Context) (*client.Client, int) {
	if c.session == "" {
		c.session = c.defaultSession()
	}
	if c.session == "" {
		return nil, c.usageErr("no session: give --session ID (exec -d remembers the one it leaves)")
	}
	return c.dial(ctx)
}

// kill sends a signal to a process of the detached session.
func (c *command) kill(ctx context.Context, args []string) int {
	fs := c.flags("[-s SIGNAL] PROCESS...")
	sig := fs.StringP("signal", "s", "kill", "`SIGNAL`: interrupt, terminate, kill, hangup, quit, user1 or user2")
	fs.StringVar(&c.session, "session", "", "the detached session `ID` (default $EXEC_SERVER_SESSION, else the one exec -d left)")
	if code, ok := c.parse(fs, args, true); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return c.usageErr("no process given (exec-server ps lists them)")
	}
	cl, code := c.resumed(ctx)
	if cl == nil {
		return code
	}
	defer cl.Detach()
	code = 0
	for _, id := range fs.Args() {
		var err error
		if *sig == "kill" {
			_, err = terminate(ctx, cl, id)
		} else {
			err = cl.SignalProcess(ctx, id, client.Signal(*sig))
		}
		if err != nil {
			code = c.fail(exitFailure, "%s: %s", id, describe(err))
		}
	}
	return code
}

func terminate(ctx context.Context, cl *client.Client, id string) (bool, error) {
	res, err := cl.ReadProcess(ctx, protocol.ReadParams{ProcessID: id})
	if err != nil {
		return false, err
	}
	if res.Closed {
		return false, nil
	}
	return true, cl.SignalProcess(ctx, id, client.Kill)
}

// attach follows a process of the detached session: its retained output,
// then new output as it comes, until it closes; exit with its exit code.
// Ctrl-C stops following and leaves it running (the session is detached
// again).
func (c *command) attach(ctx context.Context, args []string) int {
	fs := c.flags("PROCESS")
	fs.StringVar(&c.session, "session", "", "the detached session `ID` (default $EXEC_SERVER_SESSION, else the one exec -d left)")
	if code, ok := c.parse(fs, args, true); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return c.usageErr("want one PROCESS (exec-server ps lists them)")
	}
	cl, code := c.resumed(ctx)
	if cl == nil {
		return code
	}
	defer cl.Detach()
	id := fs.Arg(0)
	after, wait, max := uint64(0), uint64(30000), uint64(1<<20)
	for {
		res, err := cl.ReadProcess(ctx, protocol.ReadParams{ProcessID: id, AfterSeq: &after, WaitMs: &wait, MaxBytes: &max})
		if ctx.Err() != nil {
			c.notef("detached from %s; it goes on in session %s", id, c.session)
			return 0
		}
		if err != nil {
			return c.fail(exitRemote, "%s: %s", id, describe(err))
		}
		for _, ch := range res.Chunks {
			var w io.Writer = c.stdout
			if ch.Stream == "stderr" {
				w = c.stderr
			}
			if _, err := w.Write(ch.Chunk); err != nil {
				return c.fail(exitFailure, "writing: %v", err)
			}
		}
		if res.NextSeq > 0 {
			after = res.NextSeq - 1
		}
		if res.Closed {
			if res.ExitCode != nil {
				return *res.ExitCode
			}
			return exitRemote
		}
		if len(res.Chunks) == 0 && !res.Exited {
			time.Sleep(10 * time.Millisecond) // a server that returns at once (no long poll)
		}
	}
}

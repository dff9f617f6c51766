package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/execgo/exec-server/client"
)

// ps lists a session's processes (process/list). Processes belong to the
// session that started them, so ps resumes that session: it must be
// detached (its connection gone, within the server's session TTL).
func (c *command) ps(ctx context.Context, args []string) int {
	fs := c.flags("[--session ID]")
	// Not a registered default: a session id resumes the session, so -h
	// must not print it.
	fs.StringVar(&c.session, "session", "", "the detached session `ID` to list (default $EXEC_SERVER_SESSION, else the one exec -d left)")
	if code, ok := c.parse(fs, args, true); !ok {
		return code
	}
	if !fs.Changed("session") {
		c.session = c.defaultSession()
	}
	if fs.NArg() > 0 {
		return c.usageErr("unexpected argument %q", fs.Arg(0))
	}
	if c.session == "" {
		return c.usageErr("no session: give --session ID (exec -d remembers the one it leaves): processes belong to the session that started them")
	}
	cl, code := c.dial(ctx)
	if cl == nil {
		return code
	}
	defer cl.Close()
	list, err := cl.ListProcesses(ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		return c.fail(exitFailure, "the server cannot list processes (no process/list)")
	}
	if err != nil {
		return c.fail(exitRemote, "%s", describe(err))
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tPID\tSTATE\tTTY\tSTARTED\tEXIT\tCOMMAND")
	for _, p := range list {
		exit := "-"
		if p.ExitCode != nil {
			exit = strconv.Itoa(*p.ExitCode)
			if p.TimedOut {
				exit += " (timed out)"
			}
		}
		tty := "-"
		if p.TTY {
			tty = "yes"
		}
		started := time.UnixMilli(p.StartedAtMs).UTC().Format("15:04:05")
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.ProcessID, p.Pid, p.State, tty, started, exit, strings.Join(p.Argv, " "))
	}
	if err := tw.Flush(); err != nil {
		return c.fail(exitFailure, "writing: %v", err)
	}
	return 0
}

// exitTimedOut is exec's exit code when --timeout killed the command, as
// timeout(1)'s.
const exitTimedOut = 124

// timedOut reports a command killed by --timeout.
func (c *command) timedOut(p *client.Process, d time.Duration, code int) int {
	if !p.TimedOut() {
		return code
	}
	return c.fail(exitTimedOut, "timed out after %v: the remote command was killed (exit %d)", d, code)
}

package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/execgo/exec-server/client"
)

// Exit codes shared by the subcommands.
const (
	exitFailure = 1
	exitUsage   = 2
	exitNoExec  = 126
	exitNoFound = 127
	exitRemote  = 255
)

// Main runs subcommand name (one of Subcommands) with its args and returns
// the process exit code.
func Main(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := &command{name: name, stdin: stdin, stdout: stdout, stderr: stderr}
	return cmd.run(ctx, args)
}

// subcommand is one row of subcommands.
type subcommand struct {
	name string
	run  func(cmd *command, ctx context.Context, args []string) int
}

// subcommands is the table Main, Subcommands and the "unknown subcommand"
// text read: a subcommand is added here, once. (Set in init: completion
// and man run subcommands themselves.)
var subcommands []subcommand

// Subcommands are the client subcommands Main runs, in the order of the
// table.
var Subcommands []string

func init() {
	subcommands = []subcommand{
		{"exec", (*command).exec},
		{"cp", (*command).cp},
		{"ls", (*command).ls},
		{"cat", (*command).cat},
		{"ps", (*command).ps},
		{"watch", (*command).watch},
		{"rm", (*command).rm},
		{"mkdir", (*command).mkdir},
		{"mv", (*command).mv},
		{"attach", (*command).attach},
		{"kill", (*command).kill},
		{"context", func(cmd *command, _ context.Context, args []string) int { return cmd.contextCmd(args) }},
		{"completion", func(cmd *command, _ context.Context, args []string) int { return cmd.completion(args) }},
		{"man", func(cmd *command, _ context.Context, args []string) int { return cmd.man(args) }},
	}
	for _, s := range subcommands {
		Subcommands = append(Subcommands, s.name)
	}
}

// run runs the subcommand c.name.
func (cmd *command) run(ctx context.Context, args []string) int {
	for _, s := range subcommands {
		if s.name == cmd.name {
			return s.run(cmd, ctx, args)
		}
	}
	fmt.Fprintf(cmd.stderr, "exec-server: unknown subcommand %q (want %s)\n", cmd.name, strings.Join(Subcommands, ", "))
	return exitUsage
}

// command is one subcommand's invocation: its streams and the connection
// flags every subcommand shares.
type command struct {
	name           string
	stdin          io.Reader
	stdout, stderr io.Writer

	url              string
	token            string
	tokenFile        string
	caFile           string
	connectTimeout   time.Duration
	reconnectTimeout time.Duration
	reconnectSet     bool   // --reconnect-timeout given: refused connections are retried for as long
	session          string // ps: the session to resume
	usage            string // the synopsis after "exec-server NAME"
	term             rawTerminal
	remote           remoteConn           // --remote (remote.go)
	contextName      string               // --context (contexts.go)
	capture          func(*pflag.FlagSet) // set: parse hands over the flags and stops (completion.go)
}

// flags returns a GNU-style flag set (as kubectl's) with the shared
// connection flags. Defaults taken from the environment are applied after
// parsing, never registered as flag defaults: -h would print them, and
// EXEC_SERVER_TOKEN is a secret.
func (c *command) flags(usage string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("exec-server "+c.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	// pflag calls Usage on every parse error; errors are one line here,
	// and the full usage is printed for -h only (by parse).
	fs.Usage = func() {}
	c.usage = usage
	return fs
}

// connFlags adds the connection flags, after the subcommand's own so that
// -h lists those first.
func (c *command) connFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.url, "url", "", "server `URL`, ws://HOST:PORT or wss://HOST:PORT (default $EXEC_SERVER_URL, else the context's)")
	fs.StringVar(&c.contextName, "context", "", "use the named context `NAME` (exec-server context ls; default $EXEC_SERVER_CONTEXT, else the current one)")
	fs.StringVar(&c.token, "token", "", "bearer `TOKEN` for the websocket upgrade (default $EXEC_SERVER_TOKEN)")
	fs.StringVar(&c.tokenFile, "token-file", "", "read the bearer token from `PATH`")
	fs.StringVar(&c.caFile, "ca-file", "", "trust the PEM certificates in `PATH` for wss:// (in addition to the system's)")
	fs.DurationVar(&c.connectTimeout, "connect-timeout", 10*time.Second, "how long to try to connect")
	fs.DurationVar(&c.reconnectTimeout, "reconnect-timeout", 60*time.Second, "how long to try to resume the session after the connection drops (when given, also while connections are refused; else 5s of refusals end it)")
	c.remoteFlags(fs)
}

// printUsage prints -h on stdout (asked-for help is output, as git's and
// kubectl's): pflag's own listing would write "[=true|false]" after every
// boolean flag.
func (c *command) printUsage(fs *pflag.FlagSet) {
	fmt.Fprintf(c.stdout, "usage: exec-server %s %s\n\nflags:\n", c.name, c.usage)
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 3, ' ', 0)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name := "    --" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + ", --" + f.Name
		}
		varname, usage := pflag.UnquoteUsage(f)
		if f.Value.Type() != "bool" {
			name += " " + varname
		}
		switch f.DefValue {
		case "", "false", "0", "0s", "[]":
		default:
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, usage)
	})
	tw.Flush()
}

// parse parses args; ok false means return code now (help, or a usage
// error already reported in one line). With interspersed false, parsing
// stops at the first argument that is not a flag (exec: the rest is the
// command, as docker's).
func (c *command) parse(fs *pflag.FlagSet, args []string, interspersed bool) (code int, ok bool) {
	c.connFlags(fs)
	if c.capture != nil {
		// completion.go: the flag set is wanted, not a run.
		c.capture(fs)
		return 0, false
	}
	fs.SetInterspersed(interspersed)
	if err := fs.Parse(oldSpellings(fs, args, interspersed)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			c.printUsage(fs)
			return 0, false
		}
		return c.usageErr("%v", err), false
	}
	c.reconnectSet = fs.Changed("reconnect-timeout")
	if !fs.Changed("url") {
		c.url = os.Getenv("EXEC_SERVER_URL")
	}
	if !fs.Changed("token") {
		c.token = os.Getenv("EXEC_SERVER_TOKEN")
	}
	c.remoteDefaults(fs)
	if err := c.applyContext(fs); err != nil {
		return c.usageErr("%v", err), false
	}
	return 0, true
}

// oldSpellings rewrites the single-dash long flags the stdlib flag package
// accepted (-url, -cwd, -timeout) to their double-dash form, so scripts
// written for the earlier CLI keep working. A single-dash word is rewritten
// only when it names a long flag exactly; anything else (-la, -it, -eK=V)
// is left to pflag as a cluster of short flags.
func oldSpellings(fs *pflag.FlagSet, args []string, interspersed bool) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(out, args[i:]...)
		case len(a) < 2 || a[0] != '-':
			if !interspersed {
				return append(out, args[i:]...)
			}
			out = append(out, a)
			continue
		case strings.HasPrefix(a, "--"):
			name, _, inline := strings.Cut(a[2:], "=")
			out = append(out, a)
			if f := fs.Lookup(name); f != nil && !inline && takesValue(f) && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			continue
		}
		name, _, inline := strings.Cut(a[1:], "=")
		if f := fs.Lookup(name); len(name) > 1 && f != nil {
			out = append(out, "-"+a)
			if !inline && takesValue(f) && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			continue
		}
		out = append(out, a)
		// A cluster of short flags: the first that takes a value takes
		// the rest of the word, or the next argument.
		for j := 1; j < len(a); j++ {
			f := fs.ShorthandLookup(a[j : j+1])
			if f == nil {
				break
			}
			if takesValue(f) {
				if j == len(a)-1 && i+1 < len(args) {
					i++
					out = append(out, args[i])
				}
				break
			}
		}
	}
	return out
}

func takesValue(f *pflag.Flag) bool { return f.NoOptDefVal == "" }

func (c *command) usageErr(format string, args ...any) int {
	c.term.restore()
	fmt.Fprintf(c.stderr, "exec-server %s: %s (see exec-server %s -h)\n", c.name, fmt.Sprintf(format, args...), c.name)
	return exitUsage
}

// fail reports an error that ends the subcommand; the local terminal is
// restored first, so the message and the shell after it are readable.
func (c *command) fail(code int, format string, args ...any) int {
	c.term.restore()
	fmt.Fprintf(c.stderr, "exec-server %s: %s\n", c.name, fmt.Sprintf(format, args...))
	return code
}

// notef prints a notice while the subcommand goes on; in raw mode the
// terminal needs the carriage return itself.
func (c *command) notef(format string, args ...any) {
	nl := "\n"
	if c.term.raw() {
		nl = "\r\n"
	}
	fmt.Fprintf(c.stderr, "exec-server %s: %s%s", c.name, fmt.Sprintf(format, args...), nl)
}

// dial connects with the shared flags. A failure is reported and returned
// as an exit code.
func (c *command) dial(ctx context.Context) (*client.Client, int) {
	if c.remote.registry != "" {
		return c.dialRemote(ctx)
	}
	if c.url == "" {
		return nil, c.usageErr("--url is required (or set EXEC_SERVER_URL, or a context: exec-server context add)")
	}
	if !strings.HasPrefix(c.url, "ws://") && !strings.HasPrefix(c.url, "wss://") {
		return nil, c.usageErr("--url %q: want ws://HOST:PORT or wss://HOST:PORT", c.url)
	}
	token := c.token
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, c.fail(exitRemote, "reading --token-file: %v", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return nil, c.fail(exitRemote, "--token-file %s is empty", c.tokenFile)
		}
	}
	opts := client.Options{
		ClientName:       "exec-server-cli",
		Token:            token,
		ResumeSession:    c.session,
		ReconnectTimeout: c.reconnectTimeout,
		OnStateChange:    c.reconnectNotice,
	}
	if !c.reconnectSet {
		// Nothing listening: the server is down, not restarting; a
		// restart (systemd's RestartSec=2s) answers well within this.
		opts.RefusedTimeout = refusedTimeout
	}
	if c.caFile != "" {
		hc, err := httpClientTrusting(c.caFile)
		if err != nil {
			return nil, c.fail(exitRemote, "--ca-file: %v", err)
		}
		opts.HTTPClient = hc
	}
	dctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	cl, err := client.Dial(dctx, c.url, opts)
	if err != nil {
		return nil, c.fail(exitRemote, "%s", describe(err))
	}
	return cl, 0
}

// refusedTimeout is how long refused reconnects go on unless
// --reconnect-timeout is given.
const refusedTimeout = 5 * time.Second

// reconnectNotice turns the SDK's connection states into one visible line
// each on stderr. Lost needs none: whatever fails next says why.
func (c *command) reconnectNotice(s client.State, err error) {
	switch s {
	case client.Reconnecting:
		why := ""
		if err != nil {
			why = " (" + err.Error() + ")"
		}
		c.notef("connection lost%s; reconnecting… (for up to %v)", why, c.reconnectTimeout)
	case client.Reconnected:
		if errors.Is(err, client.ErrFreshSession) {
			c.notef("reconnected to a new session (the server no longer knew the old one; it had no processes of ours)")
			return
		}
		c.notef("reconnected; the session resumed")
	}
}

// describe renders an error for one line of stderr: wire errors without
// the client's prefixes.
func describe(err error) string {
	if errors.Is(err, client.ErrSessionLost) {
		return "the server no longer knows this session (it restarted, or the session expired): its processes are gone"
	}
	var e *client.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return strings.TrimPrefix(err.Error(), "exec-server client: ")
}

// httpClientTrusting returns an HTTP client that also trusts the PEM
// certificates in file (a server's self-signed certificate or private CA).
func httpClientTrusting(file string) (*http.Client, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}, nil
}

package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

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

// Main runs subcommand name ("exec", "cp", "ls", "cat", "ps") with its args and
// returns the process exit code.
func Main(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := &command{name: name, stdin: stdin, stdout: stdout, stderr: stderr}
	switch name {
	case "exec":
		return cmd.exec(ctx, args)
	case "cp":
		return cmd.cp(ctx, args)
	case "ls":
		return cmd.ls(ctx, args)
	case "cat":
		return cmd.cat(ctx, args)
	case "ps":
		return cmd.ps(ctx, args)
	case "watch":
		return cmd.watch(ctx, args)
	}
	fmt.Fprintf(stderr, "exec-server: unknown subcommand %q (want exec, cp, ls, cat or ps)\n", name)
	return exitUsage
}

// command is one subcommand's invocation: its streams and the connection
// flags every subcommand shares.
type command struct {
	name           string
	stdin          io.Reader
	stdout, stderr io.Writer

	url            string
	token          string
	tokenFile      string
	caFile         string
	connectTimeout time.Duration
	session        string // ps: the session to resume
	usage          string // the synopsis after "exec-server NAME"
}

// flags returns a flag set with the shared connection flags.
func (c *command) flags(usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("exec-server "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.url, "url", os.Getenv("EXEC_SERVER_URL"), "server `URL`, ws://HOST:PORT or wss://HOST:PORT (default $EXEC_SERVER_URL)")
	fs.StringVar(&c.token, "token", os.Getenv("EXEC_SERVER_TOKEN"), "bearer `TOKEN` for the websocket upgrade (default $EXEC_SERVER_TOKEN)")
	fs.StringVar(&c.tokenFile, "token-file", "", "read the bearer token from `PATH`")
	fs.StringVar(&c.caFile, "ca-file", "", "trust the PEM certificates in `PATH` for wss:// (in addition to the system's)")
	fs.DurationVar(&c.connectTimeout, "connect-timeout", 10*time.Second, "how long to try to connect")
	// The flag package calls Usage on every parse error; errors are one
	// line here, and the full usage is printed for -h only (by parse).
	fs.Usage = func() {}
	c.usage = usage
	return fs
}

func (c *command) printUsage(fs *flag.FlagSet) {
	fmt.Fprintf(c.stderr, "usage: exec-server %s %s\n\nflags:\n", c.name, c.usage)
	fs.SetOutput(c.stderr)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parse parses args; ok false means return code now (help, or a usage
// error already reported in one line).
func (c *command) parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.printUsage(fs)
			return 0, false
		}
		return c.usageErr("%v", err), false
	}
	return 0, true
}

func (c *command) usageErr(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "exec-server %s: %s (see exec-server %s -h)\n", c.name, fmt.Sprintf(format, args...), c.name)
	return exitUsage
}

func (c *command) fail(code int, format string, args ...any) int {
	fmt.Fprintf(c.stderr, "exec-server %s: %s\n", c.name, fmt.Sprintf(format, args...))
	return code
}

// dial connects with the shared flags. A failure is reported and returned
// as an exit code.
func (c *command) dial(ctx context.Context) (*client.Client, int) {
	if c.url == "" {
		return nil, c.usageErr("--url is required (or set EXEC_SERVER_URL)")
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
	opts := client.Options{ClientName: "exec-server-cli", Token: token, ResumeSession: c.session}
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

// describe renders an error for one line of stderr: wire errors without
// the client's prefixes.
func describe(err error) string {
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

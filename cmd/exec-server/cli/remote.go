package cli

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/remote/harness"
)

// The variables codex's own harness reads for remote mode; the CLI takes
// the token and the environment from them too, so one shell setup drives
// both.
const (
	envRemoteToken = "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN"
	envRemoteEnvID = "CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID"
)

// remoteConn holds the remote-mode connection flags: with --remote the
// subcommand reaches an executor (`exec-server --remote`, ours or codex's)
// through its environment registry and rendezvous, end-to-end encrypted,
// instead of dialling --url.
type remoteConn struct {
	registry   string
	envID      string
	tokenStdin bool
	urlFlag    bool // --url was given too: a usage error
	tokenFlag  bool // --token or --token-file given
}

func (c *command) remoteFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.remote.registry, "remote", "", "reach an executor through the registry at `URL` (exec-relay or codex's), end-to-end encrypted; token from --token-stdin, --token, --token-file, $"+envRemoteToken+", $CODEX_API_KEY or a `codex login` sign-in")
	fs.StringVar(&c.remote.envID, "environment-id", "", "with --remote: the executor's environment `ID` (default $"+envRemoteEnvID+")")
	fs.BoolVar(&c.remote.tokenStdin, "token-stdin", false, "with --remote: read the registry token from the first line of standard input (the rest is the command's)")
}

// remoteDefaults applies the environment after parsing. In remote mode
// EXEC_SERVER_TOKEN (a websocket credential) is never sent to a registry.
func (c *command) remoteDefaults(fs *pflag.FlagSet) {
	if c.remote.registry == "" {
		return
	}
	c.remote.urlFlag = fs.Changed("url")
	c.remote.tokenFlag = fs.Changed("token") || fs.Changed("token-file")
	if !fs.Changed("token") {
		c.token = ""
	}
	if !fs.Changed("environment-id") {
		c.remote.envID = os.Getenv(envRemoteEnvID)
	}
}

// dialRemote is dial for --remote: client.DialRemote with the same
// session options as a websocket connection (resume, reconnect notices).
func (c *command) dialRemote(ctx context.Context) (*client.Client, int) {
	switch {
	case c.remote.urlFlag:
		return nil, c.usageErr("--remote conflicts with --url")
	case c.remote.envID == "":
		return nil, c.usageErr("--remote requires --environment-id (or set %s)", envRemoteEnvID)
	case !strings.HasPrefix(c.remote.registry, "http://") && !strings.HasPrefix(c.remote.registry, "https://"):
		return nil, c.usageErr("--remote %q: want http://HOST[:PORT] or https://HOST[:PORT]", c.remote.registry)
	}
	// The first of: --token-stdin, --token, --token-file, then where a
	// codex harness has one (CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN,
	// CODEX_API_KEY, $CODEX_HOME/auth.json). Never printed or logged.
	var cred client.CodexCredential
	switch {
	case c.remote.tokenStdin && c.remote.tokenFlag:
		return nil, c.usageErr("--token-stdin conflicts with --token and --token-file")
	case c.remote.tokenStdin:
		tok, err := readTokenLine(c.stdin)
		if err != nil {
			return nil, c.usageErr("--token-stdin: %v", err)
		}
		cred = client.CodexCredential{Token: tok, Source: "stdin"}
	case c.tokenFile != "":
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, c.fail(exitRemote, "reading --token-file: %v", err)
		}
		cred = client.CodexCredential{Token: strings.TrimSpace(string(b)), Source: "--token-file"}
	case c.token != "":
		cred = client.CodexCredential{Token: c.token, Source: "--token"}
	default:
		var err error
		cred, err = client.LoadCodexCredential()
		if errors.Is(err, harness.ErrNoCredential) {
			return nil, c.usageErr("--remote needs a registry token: --token, --token-file, --token-stdin, %s, CODEX_API_KEY or a `codex login` sign-in", envRemoteToken)
		}
		if err != nil {
			return nil, c.fail(exitRemote, "%v", err)
		}
	}
	if v := os.Getenv("CODEX_EXEC_SERVER_NOISE_CHATGPT_ACCOUNT_ID"); v != "" && cred.AccountID == "" {
		cred.AccountID = v
	}
	if cred.Token == "" {
		return nil, c.usageErr("--remote needs a registry token: --token, --token-file, --token-stdin, %s, CODEX_API_KEY or a `codex login` sign-in", envRemoteToken)
	}
	token := cred.Token
	opts := client.Options{
		ClientName:       "exec-server-cli",
		ResumeSession:    c.session,
		ReconnectTimeout: c.reconnectTimeout,
		OnStateChange:    c.reconnectNotice,
		ChatGPTAccountID: cred.AccountID,
	}
	if c.caFile != "" {
		hc, err := httpClientTrusting(c.caFile)
		if err != nil {
			return nil, c.fail(exitRemote, "--ca-file: %v", err)
		}
		// As DialRemote's default: a registry redirect is an error, so
		// the bearer token never follows it to another host.
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		opts.HTTPClient = hc
	}
	dctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	cl, err := client.DialRemote(dctx, c.remote.registry, c.remote.envID, token, opts)
	if err != nil {
		return nil, c.fail(exitRemote, "%s", describe(err))
	}
	return cl, 0
}

// readTokenLine reads one newline-terminated line of at most 16 KiB from
// r a byte at a time, so that nothing after it is consumed: the rest of
// stdin stays the command's.
func readTokenLine(r io.Reader) (string, error) {
	var line []byte
	b := make([]byte, 1)
	for len(line) <= 16<<10 {
		n, err := r.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				tok := strings.TrimSuffix(string(line), "\r")
				if tok == "" || strings.ContainsAny(tok, " \t") {
					return "", errors.New("expected one token on the first line")
				}
				return tok, nil
			}
			line = append(line, b[0])
			continue
		}
		if err != nil {
			break
		}
	}
	return "", errors.New("expected a newline-terminated token of at most 16 KiB on the first line")
}

package cli

import (
	"context"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/execgo/exec-server/client"
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
	registry string
	envID    string
	urlFlag  bool // --url was given too: a usage error
}

func (c *command) remoteFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.remote.registry, "remote", "", "reach an executor through the registry at `URL` (exec-relay or codex's), end-to-end encrypted; token from --token or $"+envRemoteToken)
	fs.StringVar(&c.remote.envID, "environment-id", "", "with --remote: the executor's environment `ID` (default $"+envRemoteEnvID+")")
}

// remoteDefaults applies the environment after parsing. In remote mode
// EXEC_SERVER_TOKEN (a websocket credential) is never sent to a registry.
func (c *command) remoteDefaults(fs *pflag.FlagSet) {
	if c.remote.registry == "" {
		return
	}
	c.remote.urlFlag = fs.Changed("url")
	if !fs.Changed("token") {
		c.token = os.Getenv(envRemoteToken)
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
	token := c.token
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, c.fail(exitRemote, "reading --token-file: %v", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return nil, c.usageErr("--remote needs a registry token: --token, --token-file or %s", envRemoteToken)
	}
	opts := client.Options{
		ClientName:       "exec-server-cli",
		ResumeSession:    c.session,
		ReconnectTimeout: c.reconnectTimeout,
		OnStateChange:    c.reconnectNotice,
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

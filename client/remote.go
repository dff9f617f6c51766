package client

import (
	"context"
	"fmt"
	"os"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/remote/harness"
)

// DialRemote connects to an executor in remote mode (`exec-server
// --remote` or codex's own) through its environment registry and
// rendezvous: POST {registryURL}/cloud/environment/{environmentID}/connect
// with token as the bearer, pin the executor key from the answer, dial the
// rendezvous websocket and run the Noise hybridIK handshake. The session
// is then the same as over a local connection. ctx bounds the dial and the
// initialize handshake.
//
// opts.HTTPClient, if set, makes the registry call and the websocket dial
// (the default follows no redirects, as codex); opts.Token and opts.Header
// are not used (token is the registry credential).
//
// A remote-specific auth failure (the registry refused token, or the
// executor's own registry credential was rejected) satisfies
// harness.IsAuth.
func DialRemote(ctx context.Context, registryURL, environmentID, token string, opts Options) (*Client, error) {
	d, err := harness.NewDialer(registryURL, environmentID, token, harness.Options{
		HTTPClient:       opts.HTTPClient,
		Logger:           opts.Logger,
		ChatGPTAccountID: opts.ChatGPTAccountID,
	})
	if err != nil {
		return nil, fmt.Errorf("exec-server client: %w", err)
	}
	// Each dial is a fresh /connect and handshake; a dropped stream is
	// redialled and the session resumed like a dropped websocket.
	c, err := NewClient(ctx, func(ctx context.Context) (jsonrpc.Stream, error) {
		st, err := d.Dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("exec-server client: %w", err)
		}
		return st, nil
	}, opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// CodexCredential is a registry credential and where it came from.
type CodexCredential = harness.CodexCredential

// LoadCodexCredential finds a registry credential where a codex harness
// has one: CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN, else CODEX_API_KEY, else
// $CODEX_HOME/auth.json (`codex login`: its API key, or its ChatGPT access
// token, whose account goes in Options.ChatGPTAccountID);
// CODEX_EXEC_SERVER_NOISE_CHATGPT_ACCOUNT_ID overrides the account. Pass
// its Token to DialRemote; never log it.
func LoadCodexCredential() (CodexCredential, error) {
	return harness.LoadCodexCredential(os.LookupEnv)
}

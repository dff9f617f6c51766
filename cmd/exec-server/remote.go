package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/execgo/exec-server/internal/secretenv"
	"github.com/execgo/exec-server/remote/awssig"
	"github.com/execgo/exec-server/remote/executor"
	"github.com/execgo/exec-server/server"
)

// remoteFlags are the remote-mode flags: with --remote the server does not
// listen; it registers with an environment registry and serves relay
// streams (package remote/executor). The registry credential comes, in the
// reference's order, from --registration-bearer-stdin or
// --chatgpt-token-stdin or --use-agent-identity-auth (CODEX_ACCESS_TOKEN),
// else CODEX_API_KEY, else $CODEX_HOME/auth.json
// (`codex login`: its API key or its ChatGPT sign-in).
type remoteFlags struct {
	fs                *flag.FlagSet
	remote, env, name *string
	exitOnStdinClose  *bool
	bearerStdin       *bool
	chatgptStdin      *bool
	chatgptAccount    *string

	// The reference's other remote flags: accepted by the parser so that
	// using one gives a clear refusal (unsupported) rather than "flag
	// provided but not defined".
	transport, awsProfile, awsRegion, awsService *string
	agentIdentity, credentialStdin, awsSigV4     *bool

	// agent is the verified Agent Identity (--use-agent-identity-auth),
	// set by credential.
	agent *executor.AgentIdentity
}

func addRemoteFlags(fs *flag.FlagSet) *remoteFlags {
	return &remoteFlags{
		fs:               fs,
		remote:           fs.String("remote", "", "environment registry `URL`: register there and serve through its rendezvous instead of listening (credential: --registration-bearer-stdin, --chatgpt-token-stdin, CODEX_API_KEY or $CODEX_HOME/auth.json; https, or http to a loopback host)"),
		env:              fs.String("environment-id", "", "environment `ID` to register as (required with --remote)"),
		name:             fs.String("name", "", "executor `NAME` (accepted for compatibility; not sent)"),
		exitOnStdinClose: fs.Bool("exit-on-stdin-close", false, "with --remote: exit (status 0) when standard input reaches end of file, e.g. when the parent that owns the pipe dies (also CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE=true|false)"),
		bearerStdin:      fs.Bool("registration-bearer-stdin", false, "with --remote: read the registry bearer from stdin, one newline-terminated line of at most 16 KiB"),
		chatgptStdin:     fs.Bool("chatgpt-token-stdin", false, "with --remote: read a ChatGPT access token (a JWT) from stdin, one newline-terminated line; the registry must be https"),
		chatgptAccount:   fs.String("chatgpt-account-id", "", "with --chatgpt-token-stdin: the ChatGPT account `ID` (default: the token's claim, which it must match)"),
		transport:        fs.String("remote-transport", "noise", "with --remote: `noise` (end-to-end encrypted relay streams) or direct (register at direct/register, dial the URL it gives and serve plain JSON-RPC there; needs --aws-sigv4)"),
		awsProfile:       fs.String("aws-profile", "", "with --aws-sigv4: the AWS `PROFILE` of the shared config files"),
		awsRegion:        fs.String("aws-region", "", "with --aws-sigv4: the signing `REGION` (default: the AWS SDK's region chain)"),
		awsService:       fs.String("aws-service", "execute-api", "with --aws-sigv4: the signing `SERVICE`"),
		agentIdentity:    fs.Bool("use-agent-identity-auth", false, "with --remote: authenticate with the Agent Identity JWT in CODEX_ACCESS_TOKEN (an Agent task is registered; each registry request carries an AgentAssertion)"),
		credentialStdin:  fs.Bool("executor-credential-stdin", false, "not supported yet: rotating executor credentials from stdin"),
		awsSigV4:         fs.Bool("aws-sigv4", false, "with --remote-transport direct: sign the registration and the websocket upgrade with AWS SigV4 (credentials from the AWS SDK's default chain)"),
	}
}

// usageError is a command-line error: exit status 2.
type usageError struct{ error }

// check applies the flag rules that need no I/O.
func (r *remoteFlags) check(lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	r.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if v, ok := lookup("CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE"); ok && !set["exit-on-stdin-close"] {
		// As the reference (clap's bool parser): true or false, nothing else.
		switch v {
		case "true":
			*r.exitOnStdinClose = true
		case "false":
		default:
			return usageError{fmt.Errorf("invalid value %q in CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE for --exit-on-stdin-close: expected true or false", v)}
		}
	}
	if set["executor-credential-stdin"] {
		return usageError{errors.New("--executor-credential-stdin is not supported yet by this executor: the reference's credential frame format could not be recovered (docs/remote.md)")}
	}
	if err := r.checkDirect(set); err != nil {
		return err
	}
	if *r.remote == "" {
		for _, f := range []string{"environment-id", "exit-on-stdin-close", "registration-bearer-stdin", "chatgpt-token-stdin", "chatgpt-account-id", "use-agent-identity-auth", "remote-transport", "aws-sigv4"} {
			if set[f] || f == "exit-on-stdin-close" && *r.exitOnStdinClose {
				return usageError{fmt.Errorf("--%s requires --remote", f)}
			}
		}
		return nil
	}
	if set["listen"] {
		return usageError{errors.New("--remote conflicts with --listen")}
	}
	if *r.env == "" {
		return usageError{errors.New("--remote requires --environment-id")}
	}
	if *r.bearerStdin && *r.chatgptStdin {
		return usageError{errors.New("--chatgpt-token-stdin cannot be used with --registration-bearer-stdin")}
	}
	if *r.agentIdentity && (*r.bearerStdin || *r.chatgptStdin) {
		// As the reference's argument groups: one credential source.
		return usageError{errors.New("--use-agent-identity-auth cannot be used with --registration-bearer-stdin or --chatgpt-token-stdin")}
	}
	if set["chatgpt-account-id"] && !*r.chatgptStdin {
		// The reference accepts and ignores it; refused here rather than
		// silently not sent.
		return usageError{errors.New("--chatgpt-account-id requires --chatgpt-token-stdin")}
	}
	if _, ok := secretenv.LookupEnv("CODEX_ACCESS_TOKEN"); ok && !*r.agentIdentity {
		// The reference then registers with another credential if it has
		// one (CODEX_API_KEY) and refuses otherwise; refused here in both
		// cases rather than silently not used.
		//lint:ignore ST1005 the reference's wording, which names a product
		return usageError{errors.New("Agent Identity auth requires --use-agent-identity-auth (CODEX_ACCESS_TOKEN is set); unset CODEX_ACCESS_TOKEN to use another credential")}
	}
	return nil
}

// checkDirect applies the reference's rules of --remote-transport and the
// SigV4 flags (its exit statuses: 2 for what its argument parser
// refuses, 1 for --aws-sigv4 without direct).
func (r *remoteFlags) checkDirect(set map[string]bool) error {
	switch *r.transport {
	case "noise", "direct":
	default:
		return usageError{fmt.Errorf("invalid value %q for --remote-transport: expected noise or direct", *r.transport)}
	}
	if !*r.awsSigV4 {
		for _, f := range []string{"aws-profile", "aws-region", "aws-service"} {
			if set[f] {
				return usageError{fmt.Errorf("--%s requires --aws-sigv4", f)}
			}
		}
		if *r.transport == "direct" {
			return usageError{errors.New("--remote-transport direct requires --aws-sigv4")}
		}
		return nil
	}
	for _, f := range []string{"registration-bearer-stdin", "chatgpt-token-stdin", "use-agent-identity-auth", "executor-credential-stdin"} {
		if set[f] {
			return usageError{fmt.Errorf("--aws-sigv4 cannot be used with --%s", f)}
		}
	}
	if *r.transport != "direct" {
		return errors.New("--aws-sigv4 requires --remote-transport direct")
	}
	return nil
}

// serveDirect runs the direct transport (--remote-transport direct
// --aws-sigv4): SigV4 credentials from the AWS SDK's chain, no registry
// bearer.
func (r *remoteFlags) serveDirect(ctx context.Context, server executor.StreamServer, logger *slog.Logger, stdin io.Reader, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		return 1
	}
	var err error
	lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	var signer *awssig.Signer
	withAWSSecrets(func() { signer, err = awssig.New(lctx, *r.awsProfile, *r.awsRegion, *r.awsService) })
	cancel()
	if err != nil {
		return fail(err)
	}
	pool, err := rootCAs()
	if err != nil {
		return fail(err)
	}
	ctx, stop := r.watchStdin(ctx, bufio.NewReader(stdin), logger)
	defer stop()
	cfg := executor.DirectConfig{
		RegistryURL:   *r.remote,
		EnvironmentID: *r.env,
		Sign:          signer.Sign,
		Server:        server,
		Logger:        logger,
	}
	if pool != nil {
		cfg.HTTPClient = executor.DefaultHTTPClient(pool)
	}
	logger.Info("registering with the environment registry", "transport", executor.DirectTransport, "region", signer.Region(), "service", signer.Service())
	if err := executor.RunDirect(ctx, cfg); err != nil {
		return fail(err)
	}
	return 0
}

// withAWSSecrets runs load with the AWS_* variables that secretenv moved
// out of the environment (AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
// AWS_WEB_IDENTITY_TOKEN_FILE, ...) set again, for the AWS SDK's chain to
// read once; they are removed again after. Nothing runs children then: the
// executor serves no stream before it has registered.
func withAWSSecrets(load func()) {
	var set []string
	for _, kv := range secretenv.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if _, inEnv := os.LookupEnv(name); strings.HasPrefix(name, "AWS_") && !inEnv {
			os.Setenv(name, value)
			set = append(set, name)
		}
	}
	defer func() {
		for _, n := range set {
			os.Unsetenv(n)
		}
	}()
	load()
}

// watchStdin, with --exit-on-stdin-close, returns a context that ends
// when stdin does: the parent owns the pipe, and its end (the parent died
// or closed it) stops the executor, which then exits 0 as on SIGTERM.
func (r *remoteFlags) watchStdin(ctx context.Context, in *bufio.Reader, logger *slog.Logger) (context.Context, context.CancelFunc) {
	if !*r.exitOnStdinClose {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, in)
		logger.Info("standard input closed; exiting (--exit-on-stdin-close)")
		cancel()
	}()
	return ctx, cancel
}

// credential resolves the registry credential (see remoteFlags), reading
// stdin for the stdin modes through in.
func (r *remoteFlags) credential(in *bufio.Reader, logger *slog.Logger) (tok, account string, mode executor.AuthMode, err error) {
	switch {
	case *r.agentIdentity:
		return r.agentCredential()
	case *r.bearerStdin:
		tok, err = executor.ReadCredentialLine(in, "registration bearer")
		if err == nil && !executor.ValidBearer(tok) {
			err = errors.New("invalid registration bearer")
		}
		return tok, "", executor.AuthRegistrationBearer, err
	case *r.chatgptStdin:
		tok, err = executor.ReadCredentialLine(in, "ChatGPT access token")
		if err != nil {
			return "", "", executor.AuthChatGPTToken, errors.New("expected a bounded, newline-terminated ChatGPT access token")
		}
		account, err = executor.ChatGPTTokenAccount(tok, *r.chatgptAccount)
		return tok, account, executor.AuthChatGPTToken, err
	}
	if v, _ := secretenv.LookupEnv("CODEX_API_KEY"); v != "" {
		return v, "", executor.AuthAPIKey, nil
	}
	af, ok, err := executor.LoadAuthFile(executor.CodexHome())
	switch {
	case err != nil:
		return "", "", executor.AuthChatGPT, err
	case !ok:
		return "", "", executor.AuthAPIKey, errors.New("CODEX_API_KEY is required for --remote (the registry bearer token), or a ChatGPT sign-in in $CODEX_HOME/auth.json (`codex login`), --registration-bearer-stdin or --chatgpt-token-stdin")
	case af.APIKey != "":
		return af.APIKey, "", executor.AuthAPIKey, nil
	case af.RefreshDue:
		// Refreshed first, as codex does. If that fails, a token not yet
		// expired is used (as there); an expired one is refused (the
		// reference sends it anyway, which only fails later).
		pool, err := rootCAs()
		if err != nil {
			return "", "", executor.AuthChatGPT, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Its name holds TOKEN: secretenv moved it out of os.Environ.
		endpoint, _ := secretenv.LookupEnv("CODEX_REFRESH_TOKEN_URL_OVERRIDE")
		fresh, err := executor.RefreshAuthFile(ctx, executor.DefaultHTTPClient(pool), executor.CodexHome(), endpoint)
		switch {
		case err == nil:
			af = fresh
		case af.Expired:
			return "", "", executor.AuthChatGPT, fmt.Errorf("the ChatGPT access token in $CODEX_HOME/auth.json has expired and %v; run `codex login` again", err)
		default:
			logger.Warn("could not refresh the ChatGPT sign-in; registering with the current access token, which expires soon", "err", err)
		}
	}
	return af.AccessToken, af.AccountID, executor.AuthChatGPT, nil
}

// agentCredential verifies CODEX_ACCESS_TOKEN and registers the
// process's Agent task (--use-agent-identity-auth; it wins over
// CODEX_API_KEY, as in the reference).
func (r *remoteFlags) agentCredential() (tok, account string, mode executor.AuthMode, err error) {
	mode = executor.AuthAgentIdentity
	token, _ := secretenv.LookupEnv("CODEX_ACCESS_TOKEN")
	if token == "" {
		return "", "", mode, errors.New("CODEX_ACCESS_TOKEN is required when --use-agent-identity-auth is set")
	}
	pool, err := rootCAs()
	if err != nil {
		return "", "", mode, err
	}
	client := executor.DefaultHTTPClient(pool)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jwks := os.Getenv("CODEX_AGENT_IDENTITY_JWKS_BASE_URL")
	authapi := os.Getenv("CODEX_AGENT_IDENTITY_AUTHAPI_BASE_URL")
	agent, err := executor.LoadAgentIdentity(ctx, client, token, jwks)
	if err != nil {
		return "", "", mode, err
	}
	if err := agent.RegisterTask(ctx, client, authapi); err != nil {
		// The reference's words for it.
		return "", "", mode, fmt.Errorf("%w: %v", executor.ErrAgentIdentityUnavailable, err)
	}
	r.agent = agent
	return "", agent.AccountID, mode, nil
}

// rootCAs is the system pool plus CODEX_CA_CERTIFICATE (a PEM file), as
// the reference trusts it; nil when the variable is unset (SSL_CERT_FILE
// is honoured by crypto/x509 itself).
func rootCAs() (*x509.CertPool, error) {
	path := os.Getenv("CODEX_CA_CERTIFICATE")
	if path == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CODEX_CA_CERTIFICATE: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CODEX_CA_CERTIFICATE: no PEM certificate in %s", path)
	}
	return pool, nil
}

// authorize is the per-request Authorization of the Agent Identity, nil
// for the bearer modes.
func (r *remoteFlags) authorize() func() string {
	if r.agent == nil {
		return nil
	}
	return r.agent.Authorization
}

// run serves remote mode when --remote was given; ok is false otherwise
// (or after a flag error, with its status).
func (r *remoteFlags) run(ctx context.Context, srv *server.Server, logger *slog.Logger, stdin io.Reader, stderr io.Writer) (code int, ok bool) {
	if err := r.check(os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		if errors.As(err, new(usageError)) {
			return 2, true
		}
		return 1, true
	}
	if *r.remote == "" {
		return 0, false
	}
	defer srv.Close()
	return r.serve(ctx, srv, logger, stdin, stderr)
}

// serve runs the executor with server serving its streams.
func (r *remoteFlags) serve(ctx context.Context, server executor.StreamServer, logger *slog.Logger, stdin io.Reader, stderr io.Writer) (code int, ok bool) {
	if *r.transport == "direct" {
		return r.serveDirect(ctx, server, logger, stdin, stderr), true
	}
	in := bufio.NewReaderSize(stdin, executor.MaxStdinCredential)
	tok, account, mode, err := r.credential(in, logger)
	if err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		return 1, true
	}
	pool, err := rootCAs()
	if err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		return 1, true
	}
	ctx, stop := r.watchStdin(ctx, in, logger)
	defer stop()
	cfg := executor.Config{
		RegistryURL:   *r.remote,
		EnvironmentID: *r.env,
		Name:          *r.name,
		Token:         tok,
		Auth:          mode,
		AccountID:     account,
		Server:        server,
		Authorize:     r.authorize(),
		Logger:        logger,
	}
	if pool != nil {
		cfg.HTTPClient = executor.DefaultHTTPClient(pool)
	}
	logger.Info("registering with the environment registry", "auth", mode.String())
	if err := executor.Run(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		return 1, true
	}
	return 0, true
}

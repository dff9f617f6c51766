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
	"time"

	"github.com/execgo/exec-server/internal/secretenv"
	"github.com/execgo/exec-server/remote/executor"
	"github.com/execgo/exec-server/server"
)

// remoteFlags are the remote-mode flags: with --remote the server does not
// listen; it registers with an environment registry and serves relay
// streams (package remote/executor). The registry credential comes, in the
// reference's order, from --registration-bearer-stdin or
// --chatgpt-token-stdin, else CODEX_API_KEY, else $CODEX_HOME/auth.json
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
		transport:        fs.String("remote-transport", "", "not supported yet (noise only): the reference's direct transport"),
		awsProfile:       fs.String("aws-profile", "", "not supported yet: SigV4 for the direct transport"),
		awsRegion:        fs.String("aws-region", "", "not supported yet: SigV4 for the direct transport"),
		awsService:       fs.String("aws-service", "", "not supported yet: SigV4 for the direct transport"),
		agentIdentity:    fs.Bool("use-agent-identity-auth", false, "not supported yet: Agent Identity auth from CODEX_ACCESS_TOKEN"),
		credentialStdin:  fs.Bool("executor-credential-stdin", false, "not supported yet: rotating executor credentials from stdin"),
		awsSigV4:         fs.Bool("aws-sigv4", false, "not supported yet: SigV4 for the direct transport"),
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
	for _, f := range []string{"remote-transport", "aws-profile", "aws-region", "aws-service", "aws-sigv4", "use-agent-identity-auth", "executor-credential-stdin"} {
		if set[f] {
			return usageError{fmt.Errorf("--%s is not supported yet by this executor (only the noise transport, CODEX_API_KEY, $CODEX_HOME/auth.json, --registration-bearer-stdin and --chatgpt-token-stdin are)", f)}
		}
	}
	if *r.remote == "" {
		for _, f := range []string{"environment-id", "exit-on-stdin-close", "registration-bearer-stdin", "chatgpt-token-stdin", "chatgpt-account-id"} {
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
	if set["chatgpt-account-id"] && !*r.chatgptStdin {
		// The reference accepts and ignores it; refused here rather than
		// silently not sent.
		return usageError{errors.New("--chatgpt-account-id requires --chatgpt-token-stdin")}
	}
	if _, ok := secretenv.LookupEnv("CODEX_ACCESS_TOKEN"); ok {
		// The reference refuses CODEX_ACCESS_TOKEN without
		// --use-agent-identity-auth, which is not built here.
		return usageError{errors.New("the Agent Identity auth of CODEX_ACCESS_TOKEN is not supported yet by this executor; unset CODEX_ACCESS_TOKEN to use another credential")}
	}
	return nil
}

// credential resolves the registry credential (see remoteFlags), reading
// stdin for the stdin modes through in.
func (r *remoteFlags) credential(in *bufio.Reader, logger *slog.Logger) (tok, account string, mode executor.AuthMode, err error) {
	switch {
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

// run serves remote mode when --remote was given; ok is false otherwise
// (or after a flag error, with its status).
func (r *remoteFlags) run(ctx context.Context, srv *server.Server, logger *slog.Logger, stdin io.Reader, stderr io.Writer) (code int, ok bool) {
	if err := r.check(os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		return 2, true
	}
	if *r.remote == "" {
		return 0, false
	}
	defer srv.Close()
	return r.serve(ctx, srv, logger, stdin, stderr)
}

// serve runs the executor with server serving its streams.
func (r *remoteFlags) serve(ctx context.Context, server executor.StreamServer, logger *slog.Logger, stdin io.Reader, stderr io.Writer) (code int, ok bool) {
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
	if *r.exitOnStdinClose {
		// The parent owns the pipe: its end (the parent died or closed
		// it) stops the executor, which then exits 0 as on SIGTERM.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			_, _ = io.Copy(io.Discard, in)
			logger.Info("standard input closed; exiting (--exit-on-stdin-close)")
			cancel()
		}()
	}
	cfg := executor.Config{
		RegistryURL:   *r.remote,
		EnvironmentID: *r.env,
		Name:          *r.name,
		Token:         tok,
		Auth:          mode,
		AccountID:     account,
		Server:        server,
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

package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/execgo/exec-server/remote/internal/envreg"
	"github.com/execgo/exec-server/transport"
)

// The direct transport (`--remote-transport direct --aws-sigv4`): no
// Noise, no relay frames. The executor registers at
// …/cloud/environment/{id}/direct/register, dials the websocket URL it is
// given and serves one plain exec-server JSON-RPC connection over it, one
// message per websocket message, as a local --listen ws:// server does;
// when the socket ends it dials the same URL again. Requests are signed
// (DirectConfig.Sign). The rules below are codex 0.171's, recorded
// against a registry double (TestRemoteDirect in cmd/exec-server).

// DirectTransport is the transport id of the direct registration.
const DirectTransport = envreg.DirectTransport

// DirectConfig configures RunDirect.
type DirectConfig struct {
	RegistryURL   string // --remote: https, or http to a loopback host
	EnvironmentID string
	// Sign signs a request for body (SigV4: awssig.Signer.Sign). It is
	// called before the headers that are not to be signed are added.
	Sign       func(ctx context.Context, req *http.Request, body []byte) error
	Server     StreamServer
	Logger     *slog.Logger
	HTTPClient *http.Client // default DefaultHTTPClient(nil)

	DialTimeout     time.Duration // 10 s
	MaxMessageBytes int64         // transport.DefaultMaxMessageBytes
	// Delay is the wait before the next dial after attempt n (0-based)
	// failed or a connection ended (n = 0); default registerDelay.
	Delay func(n int) time.Duration
}

type directRegistration = envreg.DirectRegistration

// directTerminal are the upgrade refusals that end the executor, as in
// the reference; 409 means the registration is stale (register again);
// anything else (408, 429, 5xx, no answer) is retried.
func directTerminal(status int) bool {
	switch status {
	case 400, 401, 403, 404, 405, 410:
		return true
	}
	return false
}

// RunDirect registers and serves the direct transport until ctx ends
// (nil) or a fatal error: the registration is refused (other than the
// two retried answers of the Noise transport), its answer is wrong, or
// the upgrade is refused for good.
func RunDirect(ctx context.Context, cfg DirectConfig) error {
	if cfg.Server == nil || cfg.Sign == nil {
		return errors.New("executor: the direct transport needs a Server and a signer")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = DefaultHTTPClient(nil)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Delay == nil {
		cfg.Delay = registerDelay
	}
	base, err := checkDirectURL(cfg.RegistryURL)
	if err != nil {
		return err
	}
	log := cfg.Logger.With("environment_id", cfg.EnvironmentID, "transport", DirectTransport)
	register := func() (directRegistration, error) {
		for n := 0; ; n++ {
			reg, err := directRegister(ctx, cfg, base)
			var re *RegistryError
			if err == nil || !errors.As(err, &re) || !re.retryable() {
				return reg, err
			}
			if err := sleep(ctx, cfg.Delay(n)); err != nil {
				return reg, err
			}
		}
	}
	reg, err := register()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	log.Info("registered with the environment registry", "registration", reg.RegistrationID)
	for n := 0; ; {
		if ctx.Err() != nil {
			return nil
		}
		ws, status, err := directDial(ctx, cfg, reg.URL)
		switch {
		case err == nil:
			log.Info("connected to the direct endpoint")
			cfg.Server.ServeStream(ctx, ws)
			log.Info("direct connection ended; dialling again")
			n = 0
		case ctx.Err() != nil:
			return nil
		case directTerminal(status):
			return fmt.Errorf("direct websocket upgrade refused: %w", err)
		case status == http.StatusConflict:
			log.Warn("direct endpoint refused the registration (409); registering again", "err", err)
			if reg, err = register(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("re-registration: %w", err)
			}
			n++
		default:
			log.Warn("direct connection failed; retrying", "status", status, "err", err)
			n++
		}
		if sleep(ctx, cfg.Delay(max(n-1, 0))) != nil {
			return nil
		}
	}
}

// checkDirectURL: https, or http to a loopback host (the reference's
// "remote transport requires https for non-loopback endpoints").
func checkDirectURL(raw string) (string, error) {
	base, u, err := parseRemoteURL(raw)
	if err != nil {
		return "", err
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && isLoopback(u.Hostname()):
	case u.Scheme == "http":
		return "", errors.New("remote transport requires https for non-loopback endpoints")
	default:
		return "", fmt.Errorf("--remote URL %q must be http(s)://", raw)
	}
	return base, nil
}

// directRegister posts {"transport":"direct_jsonrpc_v1"}, signed over
// content-type, host and x-amz-date (Accept is added after signing, as
// the reference's request has it unsigned), and checks the answer.
func directRegister(ctx context.Context, cfg DirectConfig, base string) (directRegistration, error) {
	var out directRegistration
	body, err := json.Marshal(envreg.DirectRegisterRequest{Transport: DirectTransport})
	if err != nil {
		return out, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	u := base + "/cloud/environment/" + url.PathEscape(cfg.EnvironmentID) + "/direct/register"
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/json")
	if err := cfg.Sign(rctx, req, body); err != nil {
		return out, fmt.Errorf("signing the direct registration: %w", err)
	}
	req.Header.Set("Accept", "*/*")
	resp, err := cfg.HTTPClient.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return out, err
	}
	if resp.StatusCode/100 != 2 {
		re := &RegistryError{Verb: "direct/register", Status: resp.StatusCode}
		re.Code, re.Message = envreg.ParseError(data)
		return out, re
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return out, fmt.Errorf("environment registry direct/register: bad answer: %w", err)
	}
	switch {
	case out.EnvironmentID != cfg.EnvironmentID:
		return out, errors.New("environment registry returned a different environment id")
	case out.Transport != DirectTransport:
		return out, fmt.Errorf("environment registry returned transport %q", out.Transport)
	case strings.TrimSpace(out.RegistrationID) == "" || strings.TrimSpace(out.URL) == "":
		return out, errors.New("environment registry returned a blank url or registration id")
	}
	wu, err := url.Parse(out.URL)
	switch {
	case err != nil || wu.Host == "":
		return out, fmt.Errorf("environment registry returned an invalid direct URL %q", out.URL)
	case wu.Scheme == "wss":
	case wu.Scheme == "ws" && isLoopback(wu.Hostname()):
	default:
		return out, errors.New("environment registry returned a direct URL that is not wss:// (ws:// only to a loopback host)")
	}
	return out, nil
}

// directDial opens the direct websocket with a signed upgrade (host and
// x-amz-date; the URL's query is kept and signed as part of the URL).
// status is the refusal's HTTP status, 0 when there was none.
func directDial(ctx context.Context, cfg DirectConfig, wsURL string) (*transport.WebSocket, int, error) {
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	// Signed as an http(s) request to the same host, path and query.
	su, err := url.Parse(wsURL)
	if err != nil {
		return nil, 0, err
	}
	su.Scheme = map[string]string{"ws": "http", "wss": "https"}[su.Scheme]
	signURL := su.String()
	sreq, err := http.NewRequestWithContext(dctx, http.MethodGet, signURL, nil)
	if err != nil {
		return nil, 0, err
	}
	if err := cfg.Sign(dctx, sreq, nil); err != nil {
		return nil, 0, fmt.Errorf("signing the direct upgrade: %w", err)
	}
	hdr := http.Header{}
	for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
		if v := sreq.Header.Get(h); v != "" {
			hdr.Set(h, v)
		}
	}
	ws, err := transport.DialWebSocket(dctx, wsURL, transport.DialOptions{HTTPClient: cfg.HTTPClient, Header: hdr, MaxMessageBytes: cfg.MaxMessageBytes})
	if err != nil {
		var de *transport.DialError
		if errors.As(err, &de) {
			return nil, de.StatusCode, err
		}
		return nil, 0, err
	}
	return ws, 0, nil
}

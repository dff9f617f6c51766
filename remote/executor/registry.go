package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/execgo/exec-server/remote/internal/envreg"
	"github.com/execgo/exec-server/remote/noise"
)

// SecurityProfile is the registration profile of the Noise transport.
const SecurityProfile = envreg.SecurityProfile

// registry talks to the environment registry (remote/internal/envreg).
type registry struct {
	base    string // trimmed, without a trailing slash; a path prefix is kept
	env     string
	token   string
	account string // ChatGPT-Account-ID, sent when not empty
	client  *http.Client
	// authorize, when not nil, gives the Authorization header of each
	// request instead of "Bearer token" (Agent Identity: a fresh
	// AgentAssertion each time).
	authorize func() string
}

// checkRegistryURL trims base and refuses to send a bearer token anywhere
// but https or a loopback host (docs/remote.md).
func checkRegistryURL(raw string) (string, error) {
	base, u, err := parseRemoteURL(raw)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopback(u.Hostname()) {
			return "", fmt.Errorf("--remote URL %q: the API key is sent only over https or to a loopback host", raw)
		}
	default:
		return "", fmt.Errorf("--remote URL %q must be http(s)://", raw)
	}
	return base, nil
}

// parseRemoteURL trims raw and parses it as a --remote URL: a host, and no
// userinfo, query or fragment. The caller checks the scheme, whose rules
// differ between the relay and the direct transport.
func parseRemoteURL(raw string) (string, *url.URL, error) {
	base := strings.TrimRight(strings.TrimSpace(raw), "/")
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return "", nil, fmt.Errorf("invalid --remote URL %q", raw)
	}
	if u.User != nil || u.Fragment != "" || u.RawQuery != "" {
		return "", nil, fmt.Errorf("--remote URL %q must not carry userinfo, a query or a fragment", raw)
	}
	return base, u, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RegistryError is a non-2xx registry answer.
type RegistryError struct {
	Verb    string
	Status  int
	Code    string
	Message string
}

func (e *RegistryError) Error() string {
	s := fmt.Sprintf("environment registry %s: HTTP %d", e.Verb, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// retryable reports the registration failures retried (registerDelay
// apart, until the context ends): the two the reference retries, and two
// transient answers of this project's relay it does not know: 503
// store_unavailable (a fleet's KV bucket without a leader while JetStream
// elects one: seconds) and 429 (too many requests for now). Any other
// refusal, 4xx or 5xx, ends a first registration as it ends the
// reference's.
func (e *RegistryError) retryable() bool {
	return e.Status == 503 && e.Code == envreg.CodeRegistrationConflict ||
		e.Status == 502 && e.Code == envreg.CodeAuthenticationServiceUnavailable ||
		e.Status == 503 && e.Code == envreg.CodeStoreUnavailable ||
		e.Status == http.StatusTooManyRequests
}

func (r *registry) post(ctx context.Context, verb string, body any, hdr http.Header, out any) error {
	if r.account != "" || r.authorize != nil {
		h := http.Header{}
		if r.account != "" {
			h.Set("Chatgpt-Account-Id", r.account)
		}
		if r.authorize != nil {
			h.Set("Authorization", r.authorize())
		}
		for k, v := range hdr {
			h[k] = v
		}
		hdr = h
	}
	status, data, err := envreg.Post(ctx, r.client, r.base, r.env, verb, r.token, hdr, body, 1<<20)
	if err != nil {
		return err
	}
	if status/100 != 2 {
		re := &RegistryError{Verb: verb, Status: status}
		re.Code, re.Message = envreg.ParseError(data)
		return re
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("environment registry %s: bad answer: %w", verb, err)
	}
	return nil
}

type registration = envreg.Registration

// register posts the executor key once and checks the answer.
func (r *registry) registerOnce(ctx context.Context, key noise.PublicKey) (registration, error) {
	var out registration
	err := r.post(ctx, "register", envreg.RegisterRequest{ExecutorPublicKey: &key, SecurityProfile: SecurityProfile}, nil, &out)
	if err != nil {
		return out, err
	}
	switch {
	case out.EnvironmentID != r.env:
		return out, &fatalError{errors.New("environment registry returned a different environment id")}
	case out.SecurityProfile != SecurityProfile:
		return out, &fatalError{fmt.Errorf("environment registry returned security profile %q", out.SecurityProfile)}
	case strings.TrimSpace(out.URL) == "" || strings.TrimSpace(out.ExecutorRegistrationID) == "":
		return out, &fatalError{errors.New("environment registry returned a blank url or registration id")}
	}
	return out, nil
}

// fatalError ends the executor.
type fatalError struct{ error }

func (e *fatalError) Unwrap() error { return e.error }

// registerDelay is the reference's registration retry delay for attempt n
// (0-based): min(500 ms·2^min(n,4), 5 s) plus up to half of it again.
func registerDelay(n int) time.Duration {
	base := min(500*time.Millisecond<<min(n, 4), 5*time.Second)
	return base + rand.N(base/2+1)
}

// register retries the transient failures (RegistryError.retryable) and
// returns any other error.
func (r *registry) register(ctx context.Context, key noise.PublicKey, sleep func(context.Context, time.Duration) error) (registration, error) {
	for n := 0; ; n++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		reg, err := r.registerOnce(rctx, key)
		cancel()
		var re *RegistryError
		if err == nil || !errors.As(err, &re) || !re.retryable() {
			return reg, err
		}
		if err := sleep(ctx, registerDelay(n)); err != nil {
			return reg, err
		}
	}
}

// validation is /validate's outcome.
type validation int

const (
	valid validation = iota
	rejected
	executorUnauthorized // 401: the executor's own credential was refused
)

func (r *registry) validate(ctx context.Context, regID, streamID string, harness noise.PublicKey, authz string) (validation, error) {
	var out envreg.ValidateResponse
	err := r.post(ctx, "validate", envreg.ValidateRequest{
		ExecutorRegistrationID:  regID,
		HarnessKeyAuthorization: authz,
		HarnessPublicKey:        &harness,
	}, http.Header{envreg.StreamIDHeader: {streamID}}, &out)
	var re *RegistryError
	switch {
	case errors.As(err, &re) && re.Status == http.StatusUnauthorized:
		return executorUnauthorized, err
	case err != nil:
		return rejected, err
	case !out.Valid:
		return rejected, errors.New("registry: harness authorization is not valid")
	}
	return valid, nil
}

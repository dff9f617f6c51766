package executor

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Agent Identity auth (--use-agent-identity-auth with CODEX_ACCESS_TOKEN):
// the token is a JWT, RS256-signed by a key of the Agent Identity JWKS,
// carrying an agent runtime id and its Ed25519 private key. The executor
// verifies it, registers one Agent task for the process, and authorizes
// each registry request with a fresh AgentAssertion signed by that key.
// Every request shape here was recorded from codex 0.171 against a
// registry double (TestRemoteAuthModes in cmd/exec-server); the envelope
// and the signed strings are those of codex-rs/agent-identity/src/lib.rs.

// Agent Identity JWT rules (codex-rs/agent-identity/src/lib.rs).
const (
	agentIdentityAudience = "codex-app-server"
	agentIdentityIssuer   = "https://chatgpt.com/codex-backend/agent-identity"
)

// Default bases of the JWKS and the Agent task registration;
// CODEX_AGENT_IDENTITY_JWKS_BASE_URL and
// CODEX_AGENT_IDENTITY_AUTHAPI_BASE_URL replace them (as in the
// reference, which appends /agent-identities/jwks and
// /v1/agent/{runtime}/task/register to them).
const (
	DefaultAgentIdentityJWKSBase    = "https://chatgpt.com/backend-api/wham"
	DefaultAgentIdentityAuthAPIBase = "https://auth.api.openai.org/api/accounts"
)

// ErrAgentIdentityUnavailable is the reference's refusal of a
// CODEX_ACCESS_TOKEN that does not verify (or whose JWKS cannot be had).
//
//lint:ignore ST1005 the reference's wording, which names a product
var ErrAgentIdentityUnavailable = errors.New("Agent Identity authentication is unavailable")

// AgentIdentity is a verified Agent Identity: the runtime id, its signing
// key and the ChatGPT account it acts for.
type AgentIdentity struct {
	RuntimeID string
	AccountID string
	key       ed25519.PrivateKey
	taskID    string
	now       func() time.Time
}

type agentClaims struct {
	jwt.RegisteredClaims
	AgentRuntimeID  string  `json:"agent_runtime_id"`
	AgentPrivateKey string  `json:"agent_private_key"`
	AccountID       string  `json:"account_id"`
	ChatGPTUserID   *string `json:"chatgpt_user_id"`
	Email           *string `json:"email"`
	PlanType        any     `json:"plan_type"`
	FedRAMP         *bool   `json:"chatgpt_account_is_fedramp"`
}

type jwks struct {
	Keys []struct {
		Kty string `json:"kty"`
		Kid string `json:"kid"`
		N   string `json:"n"`
		E   string `json:"e"`
	} `json:"keys"`
}

// agentGet/agentPost send the reference's headers: Accept and Originator
// (no credential: the JWKS is public, the task registration is signed).
func agentRequest(ctx context.Context, client *http.Client, method, u string, body []byte, limit int64) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "*/*")
	req.Header.Set("Originator", "codex_cli_rs")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	return resp.StatusCode, data, err
}

// agentBase trims base and allows it only over https or to a loopback
// host, as a registry URL.
func agentBase(raw, what string) (string, error) {
	base := strings.TrimRight(strings.TrimSpace(raw), "/")
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("invalid %s %q", what, raw)
	}
	if u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname())) {
		return "", fmt.Errorf("%s %q: https is required for non-loopback endpoints", what, raw)
	}
	return base, nil
}

// LoadAgentIdentity verifies token (CODEX_ACCESS_TOKEN) against the JWKS
// at jwksBase/agent-identities/jwks: RS256 with a kid of that set, the
// Agent Identity audience and issuer, not expired (60 s leeway, as the
// reference's jsonwebtoken default), and the claims the reference
// requires. Any failure is ErrAgentIdentityUnavailable, wrapped with the
// cause for the log.
func LoadAgentIdentity(ctx context.Context, client *http.Client, token, jwksBase string) (*AgentIdentity, error) {
	if jwksBase == "" {
		jwksBase = DefaultAgentIdentityJWKSBase
	}
	base, err := agentBase(jwksBase, "Agent Identity JWKS URL")
	if err != nil {
		return nil, err
	}
	unavailable := func(why error) error { return fmt.Errorf("%w: %v", ErrAgentIdentityUnavailable, why) }
	// The reference fetches the JWKS before looking at the token.
	jctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	status, data, err := agentRequest(jctx, client, http.MethodGet, base+"/agent-identities/jwks", nil, 1<<20)
	cancel()
	if err != nil {
		return nil, unavailable(fmt.Errorf("fetching the JWKS: %w", err))
	}
	if status/100 != 2 {
		return nil, unavailable(fmt.Errorf("fetching the JWKS: HTTP %d", status))
	}
	a, err := parseAgentIdentity(token, data)
	if err != nil {
		return nil, unavailable(err)
	}
	return a, nil
}

// parseAgentIdentity verifies token against the JWKS document jwksData
// (the rules of LoadAgentIdentity) and returns the identity it carries.
func parseAgentIdentity(token string, data []byte) (*AgentIdentity, error) {
	var set jwks
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("decoding the JWKS: %w", err)
	}
	var claims agentClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errors.New("the JWT header has no kid")
		}
		for _, k := range set.Keys {
			if k.Kid == kid && k.Kty == "RSA" {
				return rsaKey(k.N, k.E)
			}
		}
		return nil, fmt.Errorf("JWT kid %q is not trusted", kid)
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience(agentIdentityAudience), jwt.WithIssuer(agentIdentityIssuer),
		jwt.WithExpirationRequired(), jwt.WithLeeway(60*time.Second))
	if err != nil {
		return nil, err
	}
	switch {
	// As the reference's claims type: every field present (iat too,
	// though not checked against the clock).
	case claims.AgentRuntimeID == "", claims.AccountID == "", claims.IssuedAt == nil, claims.ChatGPTUserID == nil,
		claims.Email == nil, claims.FedRAMP == nil, claims.PlanType == nil:
		return nil, errors.New("the JWT lacks a required claim")
	}
	der, err := base64.StdEncoding.DecodeString(claims.AgentPrivateKey)
	if err != nil {
		return nil, errors.New("the agent private key is not valid base64")
	}
	pk, err := x509.ParsePKCS8PrivateKey(der)
	key, ok := pk.(ed25519.PrivateKey)
	if err != nil || !ok {
		return nil, errors.New("the agent private key is not an Ed25519 PKCS#8 key")
	}
	return &AgentIdentity{RuntimeID: claims.AgentRuntimeID, AccountID: claims.AccountID, key: key, now: time.Now}, nil
}

func rsaKey(n, e string) (*rsa.PublicKey, error) {
	nb, err1 := base64.RawURLEncoding.DecodeString(n)
	eb, err2 := base64.RawURLEncoding.DecodeString(e)
	if err1 != nil || err2 != nil || len(eb) == 0 || len(eb) > 4 {
		return nil, errors.New("malformed RSA key in the JWKS")
	}
	return &rsa.PublicKey{N: new(big.Int).SetBytes(nb), E: int(new(big.Int).SetBytes(eb).Int64())}, nil
}

// timestamp is the reference's: RFC 3339 in UTC to the second, with Z.
func (a *AgentIdentity) timestamp() string {
	return a.now().UTC().Format("2006-01-02T15:04:05Z")
}

func (a *AgentIdentity) sign(msg string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(a.key, []byte(msg)))
}

// RegisterTask registers the process's Agent task at authAPIBase
// (POST …/v1/agent/{runtime}/task/register with {timestamp, signature of
// "runtime:timestamp"}) and keeps its id for Authorization.
func (a *AgentIdentity) RegisterTask(ctx context.Context, client *http.Client, authAPIBase string) error {
	if authAPIBase == "" {
		authAPIBase = DefaultAgentIdentityAuthAPIBase
	}
	base, err := agentBase(authAPIBase, "Agent Identity auth API URL")
	if err != nil {
		return err
	}
	// A failed attempt (no answer, or a 5xx) is retried, as the
	// reference does, with the registration delay: three attempts.
	var data []byte
	for n := 0; ; n++ {
		ts := a.timestamp()
		// Field order as the reference sends it.
		body, _ := json.Marshal(struct {
			Timestamp string `json:"timestamp"`
			Signature string `json:"signature"`
		}{ts, a.sign(a.RuntimeID + ":" + ts)})
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var status int
		status, data, err = agentRequest(rctx, client, http.MethodPost, base+"/v1/agent/"+url.PathEscape(a.RuntimeID)+"/task/register", body, 1<<20)
		cancel()
		switch {
		case err == nil && status/100 == 2:
		case (err != nil || status >= 500) && n < 2:
			if sleep(ctx, registerDelay(n)) != nil {
				return ctx.Err()
			}
			continue
		case err != nil:
			return fmt.Errorf("failed to register agent task: %w", err)
		default:
			return fmt.Errorf("failed to register agent task with status %d", status)
		}
		break
	}
	var out struct {
		TaskID      string `json:"task_id"`
		TaskIDCamel string `json:"taskId"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return errors.New("failed to decode agent task registration response")
	}
	// An encrypted_task_id answer (sealed to the agent key) is not
	// supported: refused rather than guessed.
	switch {
	case out.TaskID != "":
		a.taskID = out.TaskID
	case out.TaskIDCamel != "":
		a.taskID = out.TaskIDCamel
	default:
		return errors.New("agent task registration response omitted task id")
	}
	return nil
}

// TaskID is the registered task's id ("" before RegisterTask).
func (a *AgentIdentity) TaskID() string { return a.taskID }

// Authorization is a fresh Authorization header value: "AgentAssertion "
// and the unpadded base64url of {agent_runtime_id, signature, task_id,
// timestamp} (keys sorted, as the reference), the signature over
// "runtime:task:timestamp".
func (a *AgentIdentity) Authorization() string {
	ts := a.timestamp()
	env, _ := json.Marshal(map[string]string{
		"agent_runtime_id": a.RuntimeID,
		"signature":        a.sign(a.RuntimeID + ":" + a.taskID + ":" + ts),
		"task_id":          a.taskID,
		"timestamp":        ts,
	})
	return "AgentAssertion " + base64.RawURLEncoding.EncodeToString(env)
}

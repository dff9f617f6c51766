package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// AuthMode is how the executor authenticates to the registry: which
// credential it holds and, with it, which registry URLs it accepts
// (codex 0.171's rules, observed with a recording registry double).
type AuthMode int

const (
	// AuthAPIKey: CODEX_API_KEY (or OPENAI_API_KEY in auth.json) as a
	// bearer; https or a loopback host.
	AuthAPIKey AuthMode = iota
	// AuthChatGPT: the ChatGPT sign-in state of $CODEX_HOME/auth.json:
	// its access token as a bearer and ChatGPT-Account-ID; https or a
	// loopback host.
	AuthChatGPT
	// AuthChatGPTToken: --chatgpt-token-stdin: a ChatGPT access token
	// read from stdin and ChatGPT-Account-ID; https only.
	AuthChatGPTToken
	// AuthRegistrationBearer: --registration-bearer-stdin: an opaque
	// bearer read from stdin; https or a loopback host.
	AuthRegistrationBearer
	// AuthAgentIdentity: --use-agent-identity-auth: CODEX_ACCESS_TOKEN,
	// an Agent Identity JWT, giving an AgentAssertion per request and
	// ChatGPT-Account-ID; https or a loopback host.
	AuthAgentIdentity
)

func (m AuthMode) String() string {
	switch m {
	case AuthAPIKey:
		return "api-key"
	case AuthChatGPT:
		return "chatgpt"
	case AuthChatGPTToken:
		return "chatgpt-token-stdin"
	case AuthRegistrationBearer:
		return "registration-bearer-stdin"
	case AuthAgentIdentity:
		return "agent-identity"
	}
	return fmt.Sprintf("AuthMode(%d)", int(m))
}

// MaxStdinCredential bounds a credential line read from stdin, newline
// included: the reference takes a 16383-byte bearer and its newline and
// refuses one byte more.
const MaxStdinCredential = 16 << 10

// ReadCredentialLine reads one newline-terminated line of at most
// MaxStdinCredential bytes (newline included) from r, without the newline
// or a \r before it. Nothing after the newline is consumed from r, which
// should be a *bufio.Reader of at least that size so that the rest of
// stdin stays readable (--exit-on-stdin-close watches it).
func ReadCredentialLine(r *bufio.Reader, what string) (string, error) {
	line, err := r.ReadSlice('\n')
	if err != nil || len(line) > MaxStdinCredential {
		return "", fmt.Errorf("expected a newline-terminated %s of at most 16 KiB", what)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r")
	return s, nil
}

// ValidBearer reports whether s can be sent as a bearer: not empty, no
// space or control byte (the reference refuses those as "invalid
// registration bearer"; bytes from 0x80 up pass, as there).
func ValidBearer(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// jwtClaims decodes the payload of a compact JWT (three base64url parts,
// a JSON object in the middle) without verifying it: the registry does
// that; the executor only reads the account id from it, as the
// reference does.
func jwtClaims(tok string) (map[string]any, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return nil, false
	}
	for _, p := range []string{parts[0], parts[2]} {
		if _, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(p, "=")); err != nil {
			return nil, false
		}
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return nil, false
	}
	var claims map[string]any
	if json.Unmarshal(payload, &claims) != nil || claims == nil {
		return nil, false
	}
	return claims, true
}

// authClaim is the namespace of OpenAI's claims in a ChatGPT token.
const authClaim = "https://api.openai.com/auth"

// ChatGPTTokenAccount checks a --chatgpt-token-stdin token and returns the
// ChatGPT-Account-ID to send with it: flagAccount (--chatgpt-account-id)
// when given, which must then equal the token's chatgpt_account_id claim
// if it has one; else that claim. The token's expiry is not checked (the
// reference registers with an expired one and lets the registry refuse).
func ChatGPTTokenAccount(token, flagAccount string) (string, error) {
	claims, ok := jwtClaims(token)
	if !ok || !ValidBearer(token) {
		return "", errors.New("invalid ChatGPT access token")
	}
	var claim string
	if auth, ok := claims[authClaim].(map[string]any); ok {
		claim, _ = auth["chatgpt_account_id"].(string)
	}
	switch {
	case flagAccount != "" && claim != "" && flagAccount != claim:
		return "", errors.New("--chatgpt-account-id does not match the token")
	case flagAccount != "":
		return flagAccount, nil
	case claim == "":
		return "", errors.New("token has no ChatGPT account ID; supply --chatgpt-account-id")
	}
	return claim, nil
}

// AuthFile is what the executor takes from $CODEX_HOME/auth.json (as
// `codex login` writes it).
type AuthFile struct {
	APIKey      string // OPENAI_API_KEY: API-key mode
	AccessToken string
	AccountID   string // tokens.account_id; empty: no ChatGPT-Account-ID
	Expired     bool   // the access token's exp has passed
	RefreshDue  bool   // it has passed or comes within RefreshMargin
}

// RefreshMargin: an access token this close to its expiry is refreshed
// before registering. The reference 0.171 refreshes one expiring in 240 s
// and not one expiring in 330 s: 5 minutes, measured to that resolution.
const RefreshMargin = 5 * time.Minute

type authJSON struct {
	APIKey *string `json:"OPENAI_API_KEY"`
	Tokens *struct {
		IDToken      string `json:"id_token"`
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		AccountID    string `json:"account_id"`
	} `json:"tokens"`
	LastRefresh *string `json:"last_refresh"`
}

// ErrNoSignIn is the reference's refusal when neither a ChatGPT sign-in
// nor an API key is available.
var ErrNoSignIn = errors.New("remote exec-server registration requires ChatGPT authentication or API key authentication; run `codex login` or set CODEX_API_KEY")

// errNoBearer is the reference's refusal of an auth.json without a
// usable credential.
var errNoBearer = errors.New("executor credential has no usable bearer")

// LoadAuthFile reads codexHome/auth.json. ok is false when the file does
// not exist. Its refusals are the reference's: a tokens object without a
// refresh token or whose id_token is not a JWT is no ChatGPT sign-in
// (ErrNoSignIn); a sign-in without last_refresh, or a file with neither
// tokens nor a key, has no usable bearer.
func LoadAuthFile(codexHome string) (af AuthFile, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(codexHome, "auth.json"))
	if errors.Is(err, os.ErrNotExist) {
		return af, false, nil
	}
	if err != nil {
		return af, true, fmt.Errorf("reading the ChatGPT sign-in state: %w", err)
	}
	var aj authJSON
	if err := json.Unmarshal(data, &aj); err != nil {
		return af, true, fmt.Errorf("%s: %w", filepath.Join(codexHome, "auth.json"), err)
	}
	if aj.APIKey != nil && *aj.APIKey != "" {
		af.APIKey = *aj.APIKey
		return af, true, nil
	}
	t := aj.Tokens
	if t == nil {
		return af, true, errNoBearer
	}
	if _, isJWT := jwtClaims(t.IDToken); !isJWT || t.RefreshToken == "" {
		return af, true, ErrNoSignIn
	}
	if aj.LastRefresh == nil || t.AccessToken == "" {
		return af, true, errNoBearer
	}
	if !ValidBearer(t.AccessToken) {
		return af, true, errNoBearer
	}
	af.AccessToken, af.AccountID = t.AccessToken, t.AccountID
	if claims, isJWT := jwtClaims(t.AccessToken); isJWT {
		if exp, ok := claims["exp"].(float64); ok {
			at := time.Unix(int64(exp), 0)
			af.Expired = at.Before(time.Now())
			af.RefreshDue = at.Before(time.Now().Add(RefreshMargin))
		}
	}
	return af, true, nil
}

// CodexHome is $CODEX_HOME, or ~/.codex.
func CodexHome() string {
	if d := os.Getenv("CODEX_HOME"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".codex")
}

// checkAuthURL trims raw and applies mode's URL rule. No credential goes
// over plain http to a host other than loopback, and none with userinfo,
// a query or a fragment in the URL.
func checkAuthURL(raw string, mode AuthMode) (string, error) {
	if mode == AuthAPIKey {
		return checkRegistryURL(raw)
	}
	base := strings.TrimRight(strings.TrimSpace(raw), "/")
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("invalid --remote URL %q", raw)
	}
	if mode == AuthChatGPTToken {
		if u.Scheme != "https" || u.User != nil || u.Fragment != "" || strings.Contains(base, "#") {
			return "", errors.New("ChatGPT token registry URLs must use HTTPS without userinfo or fragments")
		}
	}
	if u.User != nil || u.Fragment != "" || u.RawQuery != "" {
		return "", fmt.Errorf("--remote URL %q must not carry userinfo, a query or a fragment", raw)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopback(u.Hostname()) {
			return "", errors.New("remote transport requires https for non-loopback endpoints")
		}
	default:
		return "", fmt.Errorf("--remote URL %q must be http(s)://", raw)
	}
	return base, nil
}

// RefreshURL is where an expired ChatGPT sign-in is refreshed, as codex
// does it (CODEX_REFRESH_TOKEN_URL_OVERRIDE replaces it there).
const RefreshURL = "https://auth.openai.com/oauth/token"

// refreshClientID is codex's public OAuth client id, which the refresh
// request names.
const refreshClientID = "app_EMoamEEZ73f0CkXaXp7hrann"

// RefreshAuthFile refreshes the expired sign-in of codexHome/auth.json as
// codex does: POST {client_id, grant_type: refresh_token, refresh_reason:
// proactive_expiry, refresh_token} to the token endpoint, then rewrite
// auth.json (atomically, mode 0600) with the tokens of the answer and a new
// last_refresh, keeping every other field. Any failure is returned: the
// caller refuses to register rather than send the expired token.
// endpoint "" is RefreshURL.
func RefreshAuthFile(ctx context.Context, client *http.Client, codexHome, endpoint string) (AuthFile, error) {
	path := filepath.Join(codexHome, "auth.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return AuthFile{}, err
	}
	var file map[string]json.RawMessage
	var tokens map[string]any
	if err := json.Unmarshal(data, &file); err != nil {
		return AuthFile{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := json.Unmarshal(file["tokens"], &tokens); err != nil || tokens == nil {
		return AuthFile{}, fmt.Errorf("%s: no tokens to refresh", path)
	}
	refresh, _ := tokens["refresh_token"].(string)
	body, _ := json.Marshal(map[string]string{
		"client_id":      refreshClientID,
		"grant_type":     "refresh_token",
		"refresh_reason": "proactive_expiry",
		"refresh_token":  refresh,
	})
	if endpoint == "" {
		endpoint = RefreshURL
	}
	// The refresh token goes only where a registry credential may.
	if _, err := checkAuthURL(endpoint, AuthChatGPT); err != nil {
		return AuthFile{}, fmt.Errorf("token refresh URL %q: %w", endpoint, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return AuthFile{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "*/*")
	req.Header.Set("Originator", "codex_cli_rs")
	resp, err := client.Do(req)
	if err != nil {
		return AuthFile{}, fmt.Errorf("refreshing the ChatGPT sign-in: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return AuthFile{}, fmt.Errorf("refreshing the ChatGPT sign-in: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return AuthFile{}, fmt.Errorf("refreshing the ChatGPT sign-in: HTTP %d", resp.StatusCode)
	}
	var fresh struct {
		IDToken      string `json:"id_token"`
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(answer, &fresh); err != nil || fresh.AccessToken == "" {
		return AuthFile{}, errors.New("refreshing the ChatGPT sign-in: the answer has no access_token")
	}
	tokens["access_token"] = fresh.AccessToken
	if fresh.IDToken != "" {
		tokens["id_token"] = fresh.IDToken
	}
	if fresh.RefreshToken != "" {
		tokens["refresh_token"] = fresh.RefreshToken
	}
	tb, _ := json.Marshal(tokens)
	file["tokens"] = tb
	lr, _ := json.Marshal(time.Now().UTC().Format(time.RFC3339Nano))
	file["last_refresh"] = lr
	out, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		return AuthFile{}, err
	}
	tmp, err := os.CreateTemp(codexHome, ".auth.json.*")
	if err != nil {
		return AuthFile{}, err
	}
	_, werr := tmp.Write(out)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return AuthFile{}, fmt.Errorf("rewriting %s: %w", path, werr)
	}
	af, _, err := LoadAuthFile(codexHome)
	if err == nil && af.RefreshDue {
		err = errors.New("refreshing the ChatGPT sign-in: the new access token expires within 5 minutes too")
	}
	return af, err
}

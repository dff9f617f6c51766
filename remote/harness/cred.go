package harness

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CodexCredential is a registry credential found where a codex harness
// has one: CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN (codex's own harness
// variable), else CODEX_API_KEY, else $CODEX_HOME/auth.json (`codex
// login`: its API key, or its ChatGPT access token with the account id).
// CODEX_EXEC_SERVER_NOISE_CHATGPT_ACCOUNT_ID, when set, is the account id
// whatever the source (codex's harness sends it with its token).
type CodexCredential struct {
	Token     string
	AccountID string // ChatGPT-Account-ID; "" sends none
	Source    string // which of the above, for messages (never the token)
}

// ErrNoCredential: none of the sources has a credential.
var ErrNoCredential = errors.New("no registry credential: set CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN or CODEX_API_KEY, or run `codex login`")

// LoadCodexCredential finds the credential (see CodexCredential); lookup
// reads the environment (os.LookupEnv). An expired ChatGPT sign-in is
// refused naming `codex login`: the harness does not refresh it (the
// executor does, see remote/executor).
func LoadCodexCredential(lookup func(string) (string, bool)) (CodexCredential, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	account := get("CODEX_EXEC_SERVER_NOISE_CHATGPT_ACCOUNT_ID")
	withAccount := func(c CodexCredential) (CodexCredential, error) {
		if account != "" {
			c.AccountID = account
		}
		return c, nil
	}
	if v := get("CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN"); v != "" {
		return withAccount(CodexCredential{Token: v, Source: "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN"})
	}
	if v := get("CODEX_API_KEY"); v != "" {
		return withAccount(CodexCredential{Token: v, Source: "CODEX_API_KEY"})
	}
	home := get("CODEX_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return CodexCredential{}, ErrNoCredential
		}
		home = filepath.Join(h, ".codex")
	}
	path := filepath.Join(home, "auth.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return CodexCredential{}, ErrNoCredential
	}
	if err != nil {
		return CodexCredential{}, fmt.Errorf("reading the codex sign-in: %w", err)
	}
	var aj struct {
		APIKey string `json:"OPENAI_API_KEY"`
		Tokens *struct {
			AccessToken string `json:"access_token"`
			AccountID   string `json:"account_id"`
		} `json:"tokens"`
	}
	if err := json.Unmarshal(data, &aj); err != nil {
		return CodexCredential{}, fmt.Errorf("%s: not JSON", path)
	}
	if aj.APIKey != "" {
		return withAccount(CodexCredential{Token: aj.APIKey, Source: "auth.json API key"})
	}
	if aj.Tokens == nil || aj.Tokens.AccessToken == "" {
		return CodexCredential{}, fmt.Errorf("%s has no usable credential; run `codex login`", path)
	}
	if exp, ok := jwtExpiry(aj.Tokens.AccessToken); ok && exp.Before(time.Now()) {
		return CodexCredential{}, errors.New("the ChatGPT sign-in in auth.json has expired; run `codex login` (or any codex command, which refreshes it) again")
	}
	return withAccount(CodexCredential{Token: aj.Tokens.AccessToken, AccountID: aj.Tokens.AccountID, Source: "auth.json ChatGPT sign-in"})
}

// jwtExpiry is the exp claim of a compact JWT, unverified.
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var c struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(payload, &c) != nil || c.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(int64(*c.Exp), 0), true
}

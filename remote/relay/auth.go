package relay

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Tokens is a set of bearer tokens, each valid for every environment or
// for a list of them. Lookups hash the candidate and compare against every
// entry in constant time, so neither the match position nor a common
// prefix shows in the timing.
type Tokens struct{ entries []tokenEntry }

type tokenEntry struct {
	sum  [32]byte
	envs map[string]bool // nil: any environment
}

// NewTokens builds a set of tokens valid for every environment; blank
// entries are ignored.
func NewTokens(tokens ...string) *Tokens {
	t := &Tokens{}
	for _, s := range tokens {
		if s = strings.TrimSpace(s); s != "" {
			t.entries = append(t.entries, tokenEntry{sum: sha256.Sum256([]byte(s))})
		}
	}
	return t
}

// LoadTokens reads one token per line, optionally followed by the
// environment ids it is limited to ("TOKEN env-a env-b"; none: every
// environment). Blank lines and lines starting with '#' are skipped. A
// file without any token is an error.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t := &Tokens{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		e := tokenEntry{sum: sha256.Sum256([]byte(fields[0]))}
		if len(fields) > 1 {
			e.envs = make(map[string]bool, len(fields)-1)
			for _, env := range fields[1:] {
				e.envs[env] = true
			}
		}
		t.entries = append(t.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("%s: no token in file", path)
	}
	return t, nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Match reports whether tok is in the set, for any environment.
func (t *Tokens) Match(tok string) bool { return t.match(tok, "", true) }

// MatchEnv reports whether tok is in the set and valid for env.
func (t *Tokens) MatchEnv(tok, env string) bool { return t.match(tok, env, false) }

func (t *Tokens) match(tok, env string, anyEnv bool) bool {
	if t == nil || tok == "" {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	found := 0
	for i := range t.entries {
		e := &t.entries[i]
		ok := 0
		if anyEnv || e.envs == nil || e.envs[env] {
			ok = 1
		}
		found |= subtle.ConstantTimeCompare(sum[:], e.sum[:]) & ok
	}
	return found == 1
}

// bearer returns the token of an "Authorization: Bearer X" header.
func bearer(h string) string {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Rendezvous URLs carry their own credential: role, registration and
// expiry signed with the node's secret (the executor leg sends no
// Authorization header). The parameter names follow the
// reference's rejection reasons.
const urlVersion = "1"

type urlClaims struct {
	role, env, reg string
	expiry         time.Time
}

func sign(secret []byte, c urlClaims) string {
	mac := hmac.New(sha256.New, secret)
	fmt.Fprintf(mac, "codex-relay-url/%s\n%s\n%s\n%s\n%d", urlVersion, c.role, c.env, c.reg, c.expiry.Unix())
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func signedQuery(secret []byte, c urlClaims) string {
	q := url.Values{}
	q.Set("role", c.role)
	q.Set("version", urlVersion)
	q.Set("executor_registration_id", c.reg)
	q.Set("expiry", strconv.FormatInt(c.expiry.Unix(), 10))
	q.Set("sig", sign(secret, c))
	return q.Encode()
}

// rejection is a refused upgrade: the status and the reason header value.
type rejection struct {
	status int
	reason string
}

func (r *rejection) Error() string { return r.reason }

// checkURL verifies a rendezvous query for role and env. The reason names
// are the reference's allow-listed ones (docs/remote.md, "Endpoints").
func checkURL(secret []byte, rawQuery, role, env string, now time.Time) (reg string, err error) {
	q, perr := url.ParseQuery(rawQuery)
	if perr != nil {
		return "", &rejection{400, "malformed_query"}
	}
	for k, v := range q {
		switch k {
		case "role", "version", "executor_registration_id", "expiry", "sig":
			if len(v) != 1 {
				return "", &rejection{400, "malformed_query"}
			}
		default:
			return "", &rejection{400, "extra_query_param"}
		}
	}
	for _, k := range []struct{ name, reason string }{
		{"role", "missing_role"}, {"expiry", "missing_expiry"}, {"sig", "missing_signature"},
		{"version", "missing_version"}, {"executor_registration_id", "missing_executor_registration_id"},
	} {
		if q.Get(k.name) == "" {
			return "", &rejection{400, k.reason}
		}
	}
	if q.Get("role") != role {
		return "", &rejection{400, "invalid_role"}
	}
	if q.Get("version") != urlVersion {
		return "", &rejection{400, "malformed_query"}
	}
	exp, perr := strconv.ParseInt(q.Get("expiry"), 10, 64)
	if perr != nil || exp <= 0 {
		return "", &rejection{400, "invalid_expiry"}
	}
	c := urlClaims{role: role, env: env, reg: q.Get("executor_registration_id"), expiry: time.Unix(exp, 0)}
	want := sign(secret, c)
	if subtle.ConstantTimeCompare([]byte(want), []byte(q.Get("sig"))) != 1 {
		return "", &rejection{403, "invalid_signature"}
	}
	// Expiry is checked after the signature so that a forged expiry is
	// reported as what it is.
	if !now.Before(c.expiry) {
		return "", &rejection{403, "expired"}
	}
	return c.reg, nil
}

var errNoSecret = errors.New("relay: URL secret must be at least 32 bytes")

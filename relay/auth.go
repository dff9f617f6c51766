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

// Tokens is a set of bearer tokens. Lookups hash the candidate and compare
// against every entry in constant time, so neither the match position nor
// a common prefix shows in the timing.
type Tokens struct{ sums [][32]byte }

// NewTokens builds a set from tokens; blank entries are ignored.
func NewTokens(tokens ...string) *Tokens {
	t := &Tokens{}
	for _, s := range tokens {
		if s = strings.TrimSpace(s); s != "" {
			t.sums = append(t.sums, sha256.Sum256([]byte(s)))
		}
	}
	return t
}

// LoadTokens reads one token per line; blank lines and lines starting with
// '#' are skipped. A file without any token is an error.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var list []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		list = append(list, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%s: no token in file", path)
	}
	return NewTokens(list...), nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.sums)
}

// Match reports whether tok is in the set.
func (t *Tokens) Match(tok string) bool {
	if t == nil || tok == "" {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	found := 0
	for i := range t.sums {
		found |= subtle.ConstantTimeCompare(sum[:], t.sums[i][:])
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
// Authorization header, spec §4.1). The parameter names follow the
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
// are the reference's allow-listed ones (spec §4.1).
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

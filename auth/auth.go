// Package auth checks websocket upgrade requests the way the reference
// exec-server does (--ws-auth capability-token | signed-bearer-token).
//
// The server spawns processes for whoever reaches it, so the check is the
// only thing between the network and remote code execution. Two rules shape
// this package:
//   - secrets stay in memory only as what the check needs (the SHA-256 of a
//     capability token, the HMAC key of signed tokens), and no error text,
//     at startup or on a refused upgrade, ever contains a secret or the
//     presented token;
//   - refusals carry the reference's exact plain-text messages, which the
//     transport sends as the 401 body.
package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// Modes of --ws-auth.
const (
	ModeNone              = ""
	ModeCapabilityToken   = "capability-token"
	ModeSignedBearerToken = "signed-bearer-token"
)

// DefaultMaxClockSkew is the leeway on exp and nbf when Config.MaxClockSkew
// is zero (the reference's default of --ws-max-clock-skew-seconds).
const DefaultMaxClockSkew = 30 * time.Second

// MinSharedSecretBytes is the shortest HS256 secret accepted.
const MinSharedSecretBytes = 32

// maxSecretFileBytes bounds a secret file: a mistaken path such as a device
// or a huge log must fail at startup rather than hang or eat memory.
const maxSecretFileBytes = 1 << 20

// Config mirrors the reference's flags.
type Config struct {
	// Mode is "", "capability-token" or "signed-bearer-token".
	Mode string
	// TokenFile holds the capability token (surrounding whitespace
	// trimmed). Exclusive with TokenSHA256.
	TokenFile string
	// TokenFiles are further capability-token files, each accepted as
	// TokenFile is (several tokens at once: rotation). A token's name, for
	// Identify, is its file's base name.
	TokenFiles []string
	// TokenSHA256 is the hex SHA-256 digest of the capability token.
	TokenSHA256 string
	// SharedSecretFile holds the HS256 key of signed tokens (trimmed, at
	// least 32 bytes).
	SharedSecretFile string
	// Issuer, when set, must equal the token's iss.
	Issuer string
	// Audience, when non-empty, must share a member with the token's aud
	// (a string or an array of strings).
	Audience []string
	// MaxClockSkew is the leeway on exp and nbf. Zero means
	// DefaultMaxClockSkew; a negative value means no leeway.
	MaxClockSkew time.Duration
	// Now returns the current time (tests); default time.Now.
	Now func() time.Time
}

// The reference's refusal texts, sent as the 401 body.
var (
	ErrMissingToken     = errors.New("missing websocket bearer token")
	ErrInvalidHeader    = errors.New("invalid authorization header")
	ErrInvalidToken     = errors.New("invalid websocket bearer token")
	ErrInvalidJWT       = errors.New("invalid websocket jwt")
	ErrExpiredJWT       = errors.New("expired websocket jwt")
	ErrNotYetValidJWT   = errors.New("websocket jwt is not valid yet")
	ErrIssuerMismatch   = errors.New("websocket jwt issuer mismatch")
	ErrAudienceMismatch = errors.New("websocket jwt audience mismatch")
)

// New validates the config (reference startup error texts) and returns the
// upgrade check (nil func when Mode == "").
func New(cfg Config) (func(*http.Request) error, error) {
	chk, err := newChecker(cfg)
	if chk == nil || err != nil {
		return nil, err
	}
	return func(r *http.Request) error {
		_, err := chk(r)
		return err
	}, nil
}

// checker checks an upgrade request and names the caller: the token's
// name (capability token) or the JWT's subject.
type checker func(*http.Request) (identity string, err error)

func newChecker(cfg Config) (checker, error) {
	capabilityFlags := cfg.TokenFile != "" || len(cfg.TokenFiles) > 0 || cfg.TokenSHA256 != ""
	signedFlags := cfg.SharedSecretFile != "" || cfg.Issuer != "" || len(cfg.Audience) > 0 || cfg.MaxClockSkew != 0
	switch cfg.Mode {
	case ModeNone:
		if capabilityFlags || signedFlags {
			return nil, errors.New("websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`")
		}
		return nil, nil
	case ModeCapabilityToken:
		if signedFlags {
			return nil, errors.New("`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, and `--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer-token`")
		}
		return newCapability(cfg)
	case ModeSignedBearerToken:
		if capabilityFlags {
			return nil, errors.New("`--ws-token-file` and `--ws-token-sha256` require `--ws-auth capability-token`, not `signed-bearer-token`")
		}
		return newSigned(cfg)
	}
	return nil, fmt.Errorf("invalid value '%s' for '--ws-auth <MODE>': expected capability-token or signed-bearer-token", cfg.Mode)
}

// namedDigest is one accepted capability token: its SHA-256 and its name.
type namedDigest struct {
	name   string
	digest []byte
}

func newCapability(cfg Config) (checker, error) {
	var tokens []namedDigest
	files := cfg.TokenFiles
	if cfg.TokenFile != "" {
		files = append([]string{cfg.TokenFile}, files...)
	}
	switch {
	case len(files) > 0 && cfg.TokenSHA256 != "":
		return nil, errors.New("`--ws-token-file` and `--ws-token-sha256` are mutually exclusive")
	case len(files) > 0:
		for _, f := range files {
			secret, err := readSecret(f)
			if err != nil {
				return nil, err
			}
			sum := sha256.Sum256(secret)
			clear(secret)
			tokens = append(tokens, namedDigest{filepath.Base(f), sum[:]})
		}
	case cfg.TokenSHA256 != "":
		d, err := hex.DecodeString(cfg.TokenSHA256)
		if err != nil || len(d) != sha256.Size {
			return nil, errors.New("--ws-token-sha256 must be a 64-character hex SHA-256 digest")
		}
		tokens = []namedDigest{{"sha256:" + cfg.TokenSHA256[:8], d}}
	default:
		return nil, errors.New("`--ws-token-file` or `--ws-token-sha256` is required when `--ws-auth capability-token` is set")
	}
	return func(r *http.Request) (string, error) {
		token, err := bearer(r)
		if err != nil {
			return "", err
		}
		// Comparing digests of equal length in constant time, with every
		// accepted token, leaks neither the token's length nor how much of
		// a guess matched, nor which token came close.
		sum := sha256.Sum256([]byte(token))
		name := ""
		for _, t := range tokens {
			if subtle.ConstantTimeCompare(sum[:], t.digest) == 1 {
				name = t.name
			}
		}
		if name == "" {
			return "", ErrInvalidToken
		}
		return "token:" + name, nil
	}, nil
}

func newSigned(cfg Config) (checker, error) {
	if cfg.SharedSecretFile == "" {
		return nil, errors.New("`--ws-shared-secret-file` is required when `--ws-auth signed-bearer-token` is set")
	}
	key, err := readSecret(cfg.SharedSecretFile)
	if err != nil {
		return nil, err
	}
	if len(key) < MinSharedSecretBytes {
		clear(key)
		return nil, fmt.Errorf("signed websocket bearer secret %s must be at least %d bytes", absPath(cfg.SharedSecretFile), MinSharedSecretBytes)
	}
	v := &verifier{
		key:      key,
		issuer:   cfg.Issuer,
		audience: append([]string(nil), cfg.Audience...),
		now:      cfg.Now,
		parser:   jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithoutClaimsValidation()),
	}
	switch {
	case cfg.MaxClockSkew == 0:
		v.skew = int64(DefaultMaxClockSkew / time.Second)
	case cfg.MaxClockSkew > 0:
		v.skew = int64(cfg.MaxClockSkew / time.Second)
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v.check, nil
}

// readSecret reads a secret file and trims surrounding whitespace, with the
// reference's error texts. The path is named in errors; the content never is.
func readSecret(path string) ([]byte, error) {
	abs := absPath(path)
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("failed to read websocket auth secret %s: %s", abs, osText(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read websocket auth secret %s: %s", abs, osText(err))
	}
	if len(data) > maxSecretFileBytes {
		clear(data)
		return nil, fmt.Errorf("websocket auth secret %s must be at most %d bytes", abs, maxSecretFileBytes)
	}
	if !utf8.Valid(data) {
		clear(data)
		return nil, fmt.Errorf("failed to read websocket auth secret %s: stream did not contain valid UTF-8", abs)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("websocket auth secret %s must not be empty", abs)
	}
	out := bytes.Clone(trimmed)
	clear(data)
	return out, nil
}

// absPath names a relative path as the reference does: from the working
// directory.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// osText renders an OS error as Rust's io::Error Display ("No such file or
// directory (os error 2)"), as the reference prints it.
func osText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s := errno.Error()
		if s != "" {
			s = strings.ToUpper(s[:1]) + s[1:]
		}
		return fmt.Sprintf("%s (os error %d)", s, int(errno))
	}
	return err.Error()
}

// bearer extracts the token of "Authorization: Bearer <token>" as the
// reference does: the first Authorization header; it must be visible ASCII;
// the scheme (case-insensitive) and the token are split at the first space;
// the token is trimmed and must not be empty.
func bearer(r *http.Request) (string, error) {
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return "", ErrMissingToken
	}
	h := values[0]
	for i := 0; i < len(h); i++ {
		if c := h[i]; c != '\t' && (c < 0x20 || c > 0x7e) {
			return "", ErrInvalidHeader
		}
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", ErrInvalidHeader
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", ErrInvalidHeader
	}
	return token, nil
}

// verifier checks HS256 JWTs.
type verifier struct {
	key      []byte
	issuer   string
	audience []string
	skew     int64 // seconds
	now      func() time.Time
	parser   *jwt.Parser
}

// check runs the reference's order: structure, algorithm and signature
// (invalid), then exp (expired), nbf (not valid yet), iss, aud. The
// identity is the token's sub ("jwt:" alone without one).
func (v *verifier) check(r *http.Request) (string, error) {
	token, err := bearer(r)
	if err != nil {
		return "", err
	}
	var c claims
	_, err = v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.key, nil })
	if err != nil || c.Exp == nil {
		return "", ErrInvalidJWT
	}
	now := v.now().Unix()
	if *c.Exp < now-v.skew {
		return "", ErrExpiredJWT
	}
	if c.Nbf != nil && *c.Nbf > now+v.skew {
		return "", ErrNotYetValidJWT
	}
	if v.issuer != "" && (c.Iss == nil || *c.Iss != v.issuer) {
		return "", ErrIssuerMismatch
	}
	if len(v.audience) > 0 && !c.hasAudience(v.audience) {
		return "", ErrAudienceMismatch
	}
	return "jwt:" + c.Sub, nil
}

// claims are the registered claims the check reads, typed as strictly as
// the reference: exp and nbf are integers fitting in int64 (a float, a
// string or an overflow makes the token invalid), iss is a string, aud a
// string or an array of strings; null counts as absent; a repeated
// registered claim makes the token invalid; other claims are ignored.
type claims struct {
	Exp, Nbf *int64
	Iss      *string
	Aud      []string
	Sub      string // for logs only: a sub that is not a string is ignored, as the reference ignores sub
}

// UnmarshalJSON decodes the claims object strictly (see claims).
func (c *claims) UnmarshalJSON(data []byte) error {
	var members map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return errors.New("jwt claims: expected an object")
	}
	members = map[string]json.RawMessage{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		switch key {
		case "sub":
			_ = json.Unmarshal(raw, &c.Sub)
		case "exp", "nbf", "iss", "aud":
			if _, dup := members[key]; dup {
				return fmt.Errorf("jwt claims: duplicate field `%s`", key)
			}
			members[key] = raw
		}
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	for key, raw := range members {
		if bytes.Equal(raw, []byte("null")) {
			continue
		}
		switch key {
		case "exp", "nbf":
			var n int64
			if err := json.Unmarshal(raw, &n); err != nil {
				return fmt.Errorf("jwt claims: `%s` must be an integer", key)
			}
			if key == "exp" {
				c.Exp = &n
			} else {
				c.Nbf = &n
			}
		case "iss":
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return errors.New("jwt claims: `iss` must be a string")
			}
			c.Iss = &s
		case "aud":
			var s string
			if err := json.Unmarshal(raw, &s); err == nil {
				c.Aud = []string{s}
				continue
			}
			var list []string
			if err := json.Unmarshal(raw, &list); err != nil {
				return errors.New("jwt claims: `aud` must be a string or an array of strings")
			}
			c.Aud = list
		}
	}
	return nil
}

func (c *claims) hasAudience(want []string) bool {
	for _, a := range c.Aud {
		for _, w := range want {
			if a == w {
				return true
			}
		}
	}
	return false
}

// The jwt.Claims interface; validation is done by verifier.check, so these
// only report what was decoded.

func (c *claims) GetExpirationTime() (*jwt.NumericDate, error) { return unixDate(c.Exp), nil }
func (c *claims) GetIssuedAt() (*jwt.NumericDate, error)       { return nil, nil }
func (c *claims) GetNotBefore() (*jwt.NumericDate, error)      { return unixDate(c.Nbf), nil }
func (c *claims) GetIssuer() (string, error) {
	if c.Iss == nil {
		return "", nil
	}
	return *c.Iss, nil
}
func (c *claims) GetSubject() (string, error)            { return c.Sub, nil }
func (c *claims) GetAudience() (jwt.ClaimStrings, error) { return jwt.ClaimStrings(c.Aud), nil }

func unixDate(p *int64) *jwt.NumericDate {
	if p == nil {
		return nil
	}
	return jwt.NewNumericDate(time.Unix(*p, 0))
}

package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func request(authz ...string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	for _, a := range authz {
		r.Header.Add("Authorization", a)
	}
	return r
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestNewStartupErrors(t *testing.T) {
	dir := t.TempDir()
	tok := writeFile(t, "tok", "  tok\n")
	empty := writeFile(t, "empty", " \n\t ")
	short := writeFile(t, "short", "0123456789012345678901234567890\n") // 31 bytes once trimmed
	secret := writeFile(t, "secret", "0123456789abcdef0123456789abcdef\n")
	binary := writeFile(t, "binary", "\xff\xfe0123456789abcdef0123456789abcdef")
	missing := filepath.Join(dir, "missing")
	sum := sha256.Sum256([]byte("tok"))
	digest := hex.EncodeToString(sum[:])

	tests := []struct {
		name string
		cfg  Config
		want string // "" means success
	}{
		{"no auth", Config{}, ""},
		{"token file without mode", Config{TokenFile: tok}, "websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`"},
		{"issuer without mode", Config{Issuer: "x"}, "websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`"},
		{"capability without token", Config{Mode: ModeCapabilityToken}, "`--ws-token-file` or `--ws-token-sha256` is required when `--ws-auth capability-token` is set"},
		{"capability both", Config{Mode: ModeCapabilityToken, TokenFile: tok, TokenSHA256: digest}, "`--ws-token-file` and `--ws-token-sha256` are mutually exclusive"},
		{"capability file ok", Config{Mode: ModeCapabilityToken, TokenFile: tok}, ""},
		{"capability digest ok", Config{Mode: ModeCapabilityToken, TokenSHA256: digest}, ""},
		{"capability digest upper", Config{Mode: ModeCapabilityToken, TokenSHA256: strings.ToUpper(digest)}, ""},
		{"capability digest short", Config{Mode: ModeCapabilityToken, TokenSHA256: "abc"}, "--ws-token-sha256 must be a 64-character hex SHA-256 digest"},
		{"capability digest not hex", Config{Mode: ModeCapabilityToken, TokenSHA256: strings.Repeat("z", 64)}, "--ws-token-sha256 must be a 64-character hex SHA-256 digest"},
		{"capability empty file", Config{Mode: ModeCapabilityToken, TokenFile: empty}, "websocket auth secret " + empty + " must not be empty"},
		{"capability missing file", Config{Mode: ModeCapabilityToken, TokenFile: missing}, "failed to read websocket auth secret " + missing + ": No such file or directory (os error 2)"},
		{"capability directory", Config{Mode: ModeCapabilityToken, TokenFile: dir}, "failed to read websocket auth secret " + dir + ": Is a directory (os error 21)"},
		{"capability not utf8", Config{Mode: ModeCapabilityToken, TokenFile: binary}, "failed to read websocket auth secret " + binary + ": stream did not contain valid UTF-8"},
		{"capability with issuer", Config{Mode: ModeCapabilityToken, TokenFile: tok, Issuer: "x"}, "`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, and `--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer-token`"},
		{"capability with skew", Config{Mode: ModeCapabilityToken, TokenFile: tok, MaxClockSkew: time.Second}, "`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, and `--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer-token`"},
		{"signed without secret", Config{Mode: ModeSignedBearerToken}, "`--ws-shared-secret-file` is required when `--ws-auth signed-bearer-token` is set"},
		{"signed with token file", Config{Mode: ModeSignedBearerToken, SharedSecretFile: secret, TokenFile: tok}, "`--ws-token-file` and `--ws-token-sha256` require `--ws-auth capability-token`, not `signed-bearer-token`"},
		{"signed short secret", Config{Mode: ModeSignedBearerToken, SharedSecretFile: short}, "signed websocket bearer secret " + short + " must be at least 32 bytes"},
		{"signed empty secret", Config{Mode: ModeSignedBearerToken, SharedSecretFile: empty}, "websocket auth secret " + empty + " must not be empty"},
		{"signed ok", Config{Mode: ModeSignedBearerToken, SharedSecretFile: secret, Issuer: "i", Audience: []string{"a"}}, ""},
		{"bad mode", Config{Mode: "bogus"}, "invalid value 'bogus' for '--ws-auth <MODE>': expected capability-token or signed-bearer-token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check, err := New(tc.cfg)
			if got := errText(err); got != tc.want {
				t.Fatalf("New error = %q, want %q", got, tc.want)
			}
			if tc.want == "" && (check == nil) != (tc.cfg.Mode == "") {
				t.Fatalf("check is nil = %v for mode %q", check == nil, tc.cfg.Mode)
			}
		})
	}
}

func TestRelativePathNamedAbsolute(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	_, err := New(Config{Mode: ModeCapabilityToken, TokenFile: "nope"})
	want := "failed to read websocket auth secret " + filepath.Join(dir, "nope") + ": No such file or directory (os error 2)"
	if errText(err) != want {
		t.Fatalf("got %q, want %q", errText(err), want)
	}
}

func TestSecretsNeverInErrors(t *testing.T) {
	const secretText = "super-secret-value-that-must-not-leak"
	short := writeFile(t, "short", secretText[:20])
	_, err := New(Config{Mode: ModeSignedBearerToken, SharedSecretFile: short})
	if err == nil || strings.Contains(err.Error(), secretText[:20]) {
		t.Fatalf("startup error %v leaks the secret or is missing", err)
	}
	tok := writeFile(t, "tok", secretText)
	check, err := New(Config{Mode: ModeCapabilityToken, TokenFile: tok})
	if err != nil {
		t.Fatal(err)
	}
	for _, presented := range []string{secretText + "x", secretText[:10], "Basic " + secretText} {
		err := check(request("Bearer " + presented))
		if err == nil || strings.Contains(err.Error(), secretText[:10]) {
			t.Fatalf("refusal %v leaks the token", err)
		}
	}
}

func TestCapabilityToken(t *testing.T) {
	tok := writeFile(t, "tok", "  tok\n")
	fromFile, err := New(Config{Mode: ModeCapabilityToken, TokenFile: tok})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("tok"))
	fromDigest, err := New(Config{Mode: ModeCapabilityToken, TokenSHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		header []string
		want   error
	}{
		{"no header", nil, ErrMissingToken},
		{"bearer", []string{"Bearer tok"}, nil},
		{"lower scheme", []string{"bearer tok"}, nil},
		{"upper scheme padded", []string{"BEARER   tok  "}, nil},
		{"basic", []string{"Basic dG9r"}, ErrInvalidHeader},
		{"wrong", []string{"Bearer tok2"}, ErrInvalidToken},
		{"prefix", []string{"Bearer to"}, ErrInvalidToken},
		{"empty token", []string{"Bearer "}, ErrInvalidHeader},
		{"empty header", []string{""}, ErrInvalidHeader},
		{"scheme only", []string{"Bearer"}, ErrInvalidHeader},
		{"tab separator", []string{"Bearer\ttok"}, ErrInvalidHeader},
		{"token with space", []string{"Bearer tok extra"}, ErrInvalidToken},
		{"not ascii", []string{"Bearer \xff\xfe"}, ErrInvalidHeader},
		{"first header wins (bad)", []string{"Bearer nope", "Bearer tok"}, ErrInvalidToken},
		{"first header wins (good)", []string{"Bearer tok", "Bearer nope"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, check := range []func(*http.Request) error{fromFile, fromDigest} {
				if err := check(request(tc.header...)); err != tc.want {
					t.Fatalf("check(%q) = %v, want %v", tc.header, err, tc.want)
				}
			}
		})
	}
}

// mint builds a compact JWS by hand, so tests can produce the malformed and
// oddly typed tokens that a JWT library refuses to create.
func mint(header, claims string, h func() hash.Hash, key []byte) string {
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	mac := hmac.New(h, key)
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}

func TestSignedBearerToken(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	secret := writeFile(t, "secret", "\n"+string(key)+"  \n")
	now := time.Unix(1_800_000_000, 0)
	n := now.Unix()
	check, err := New(Config{
		Mode: ModeSignedBearerToken, SharedSecretFile: secret,
		Issuer: "iss1", Audience: []string{"aud1"}, Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	const hs256 = `{"alg":"HS256","typ":"JWT"}`
	ok := func(claims string) string { return mint(hs256, claims, sha256.New, key) }
	c := func(format string, args ...any) string { return ok(fmt.Sprintf(format, args...)) }

	tests := []struct {
		name  string
		token string
		want  error
	}{
		{"valid", c(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n+60), nil},
		{"no exp", ok(`{"iss":"iss1","aud":"aud1"}`), ErrInvalidJWT},
		{"null exp", ok(`{"exp":null,"iss":"iss1","aud":"aud1"}`), ErrInvalidJWT},
		{"exp within skew", c(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n-20), nil},
		{"exp at skew edge", c(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n-30), nil},
		{"exp past skew", c(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n-31), ErrExpiredJWT},
		{"exp long ago", c(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n-100), ErrExpiredJWT},
		{"exp negative", ok(`{"exp":-5,"iss":"iss1","aud":"aud1"}`), ErrExpiredJWT},
		{"exp float", c(`{"exp":%d.5,"iss":"iss1","aud":"aud1"}`, n+60), ErrInvalidJWT},
		{"exp integral float", c(`{"exp":%d.0,"iss":"iss1","aud":"aud1"}`, n+60), ErrInvalidJWT},
		{"exp exponent", ok(`{"exp":2e9,"iss":"iss1","aud":"aud1"}`), ErrInvalidJWT},
		{"exp string", c(`{"exp":"%d","iss":"iss1","aud":"aud1"}`, n+60), ErrInvalidJWT},
		{"exp int64 max", ok(`{"exp":9223372036854775807,"iss":"iss1","aud":"aud1"}`), nil},
		{"exp overflow", ok(`{"exp":9223372036854775808,"iss":"iss1","aud":"aud1"}`), ErrInvalidJWT},
		{"exp duplicate", c(`{"exp":%d,"exp":%d,"iss":"iss1","aud":"aud1"}`, n-1000, n+60), ErrInvalidJWT},
		{"nbf within skew", c(`{"exp":%d,"nbf":%d,"iss":"iss1","aud":"aud1"}`, n+60, n+20), nil},
		{"nbf ahead", c(`{"exp":%d,"nbf":%d,"iss":"iss1","aud":"aud1"}`, n+600, n+100), ErrNotYetValidJWT},
		{"nbf float", c(`{"exp":%d,"nbf":%d.5,"iss":"iss1","aud":"aud1"}`, n+60, n-5), ErrInvalidJWT},
		{"nbf null", c(`{"exp":%d,"nbf":null,"iss":"iss1","aud":"aud1"}`, n+60), nil},
		{"iat ahead ignored", c(`{"exp":%d,"iat":%d,"iss":"iss1","aud":"aud1"}`, n+600, n+100), nil},
		{"issuer missing", c(`{"exp":%d,"aud":"aud1"}`, n+60), ErrIssuerMismatch},
		{"issuer wrong", c(`{"exp":%d,"iss":"x","aud":"aud1"}`, n+60), ErrIssuerMismatch},
		{"issuer not a string", c(`{"exp":%d,"iss":5,"aud":"aud1"}`, n+60), ErrInvalidJWT},
		{"audience missing", c(`{"exp":%d,"iss":"iss1"}`, n+60), ErrAudienceMismatch},
		{"audience wrong", c(`{"exp":%d,"iss":"iss1","aud":"x"}`, n+60), ErrAudienceMismatch},
		{"audience array", c(`{"exp":%d,"iss":"iss1","aud":["x","aud1"]}`, n+60), nil},
		{"audience array wrong", c(`{"exp":%d,"iss":"iss1","aud":["x"]}`, n+60), ErrAudienceMismatch},
		{"audience number", c(`{"exp":%d,"iss":"iss1","aud":5}`, n+60), ErrInvalidJWT},
		{"other claims any type", c(`{"exp":%d,"iss":"iss1","aud":"aud1","sub":5,"x":{"y":[1]}}`, n+60), nil},
		{"expired before issuer", c(`{"exp":%d,"iss":"x","aud":"x"}`, n-100), ErrExpiredJWT},
		{"expired before nbf", c(`{"exp":%d,"nbf":%d,"iss":"iss1","aud":"aud1"}`, n-100, n+100), ErrExpiredJWT},
		{"nbf before issuer", c(`{"exp":%d,"nbf":%d,"iss":"x"}`, n+600, n+100), ErrNotYetValidJWT},
		{"issuer before audience", c(`{"exp":%d,"iss":"x","aud":"x"}`, n+60), ErrIssuerMismatch},
		{"claims array", ok(`[1]`), ErrInvalidJWT},
		{"no typ", mint(`{"alg":"HS256"}`, fmt.Sprintf(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n+60), sha256.New, key), nil},
		{"other typ and kid", mint(`{"alg":"HS256","typ":"foo","kid":"k"}`, fmt.Sprintf(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n+60), sha256.New, key), nil},
		{"HS384", mint(`{"alg":"HS384"}`, fmt.Sprintf(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n+60), sha512.New384, key), ErrInvalidJWT},
		{"HS256 label, HS384 signature", mint(hs256, fmt.Sprintf(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n+60), sha512.New384, key), ErrInvalidJWT},
		{"alg none", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"exp":%d,"iss":"iss1","aud":"aud1"}`, n+60)) + ".", ErrInvalidJWT},
		{"wrong key", mint(hs256, fmt.Sprintf(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n+60), sha256.New, []byte(strings.Repeat("x", 40))), ErrInvalidJWT},
		{"untrimmed key", mint(hs256, fmt.Sprintf(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n+60), sha256.New, []byte("\n"+string(key)+"  \n")), ErrInvalidJWT},
		{"garbage", "abc", ErrInvalidJWT},
		{"legacy codexv1", "codexv1.abc.def", ErrInvalidJWT},
		{"padded base64", strings.Replace(c(`{"exp":%d,"iss":"iss1","aud":"aud1"}`, n+60), ".", "=.", 1), ErrInvalidJWT},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := check(request("Bearer " + tc.token)); err != tc.want {
				t.Fatalf("check = %v, want %v", err, tc.want)
			}
		})
	}
	if err := check(request()); err != ErrMissingToken {
		t.Fatalf("no header: %v", err)
	}
	if err := check(request("Basic x")); err != ErrInvalidHeader {
		t.Fatalf("basic: %v", err)
	}
}

func TestSignedSkewAndAudiences(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	secret := writeFile(t, "secret", string(key))
	now := time.Unix(1_800_000_000, 0)
	n := now.Unix()
	tok := func(claims string) *http.Request {
		return request("Bearer " + mint(`{"alg":"HS256"}`, claims, sha256.New, key))
	}
	noSkew, err := New(Config{Mode: ModeSignedBearerToken, SharedSecretFile: secret, MaxClockSkew: -1, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := noSkew(tok(fmt.Sprintf(`{"exp":%d}`, n-1))); err != ErrExpiredJWT {
		t.Fatalf("no leeway, exp 1s ago: %v", err)
	}
	if err := noSkew(tok(fmt.Sprintf(`{"exp":%d}`, n))); err != nil {
		t.Fatalf("no leeway, exp now: %v", err)
	}
	// Without --ws-issuer / --ws-audience, iss and aud are not compared
	// (but must still be well typed).
	if err := noSkew(tok(fmt.Sprintf(`{"exp":%d,"iss":"any","aud":["z"]}`, n+5))); err != nil {
		t.Fatalf("unchecked iss/aud: %v", err)
	}
	multi, err := New(Config{Mode: ModeSignedBearerToken, SharedSecretFile: secret, Audience: []string{"a", "b"}, MaxClockSkew: 2 * time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := multi(tok(fmt.Sprintf(`{"exp":%d,"aud":"b"}`, n-100))); err != nil {
		t.Fatalf("second audience, exp within 2m leeway: %v", err)
	}
	if err := multi(tok(fmt.Sprintf(`{"exp":%d,"aud":["c"]}`, n+5))); err != ErrAudienceMismatch {
		t.Fatalf("no shared audience: %v", err)
	}
}

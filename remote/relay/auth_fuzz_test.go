package relay

import (
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// FuzzCheckURL: no query makes checkURL panic, and only a query carrying
// the signature of exactly its claims is accepted.
func FuzzCheckURL(f *testing.F) {
	secret := make([]byte, 32)
	now := time.Unix(1_800_000_000, 0)
	good := signedQuery(secret, urlClaims{role: roleEnvironment, env: "E", reg: "reg_1", expiry: now.Add(time.Hour)})
	f.Add(good, "environment", "E")
	f.Add("role=harness&version=1&executor_registration_id=r&expiry=1&sig=x", "harness", "E")
	f.Add("%zz", "environment", "E")
	f.Add("role=environment&role=environment", "environment", "E")
	f.Fuzz(func(t *testing.T, query, role, env string) {
		reg, err := checkURL(secret, query, role, env, now)
		if err != nil {
			if _, ok := err.(*rejection); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		q, perr := url.ParseQuery(query)
		if perr != nil {
			t.Fatalf("accepted an unparsable query %q", query)
		}
		want := signedQuery(secret, urlClaims{role: role, env: env, reg: reg, expiry: mustUnix(q.Get("expiry"))})
		if wq, _ := url.ParseQuery(want); wq.Get("sig") != q.Get("sig") {
			t.Fatalf("accepted %q with a signature not over its claims", query)
		}
	})
}

func mustUnix(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(n, 0)
}

// FuzzLoadTokens: any file either fails to load or yields tokens that
// match exactly their own lines' first fields.
func FuzzLoadTokens(f *testing.F) {
	f.Add("tok\n")
	f.Add("# c\n\n  a b c\n")
	f.Add("\x00\xff\n")
	f.Fuzz(func(t *testing.T, content string) {
		p := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		tk, err := LoadTokens(p)
		if err != nil {
			return
		}
		if tk.Len() == 0 {
			t.Fatal("loaded without tokens")
		}
		if tk.Match("") {
			t.Fatal("the empty token matches")
		}
	})
}

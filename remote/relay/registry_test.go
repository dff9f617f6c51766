package relay

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestNewRequiresAuth(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without tokens nor InsecureNoAuth succeeded")
	}
	if _, err := New(Options{ExecutorTokens: NewTokens("a")}); err == nil {
		t.Fatal("New without harness tokens succeeded")
	}
	if _, err := New(Options{InsecureNoAuth: true, URLSecret: []byte("short")}); err == nil {
		t.Fatal("New with a short URL secret succeeded")
	}
	s, err := New(Options{InsecureNoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestTokens(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokens")
	os.WriteFile(p, []byte("# comment\nalpha\n\n  beta  \n"), 0o600)
	tk, err := LoadTokens(p)
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]bool{"alpha": true, "beta": true, "": false, "alph": false, "alphaa": false, "# comment": false, "gamma": false} {
		if got := tk.Match(tok); got != want {
			t.Errorf("Match(%q) = %v, want %v", tok, got, want)
		}
	}
	// Scoped tokens.
	os.WriteFile(p, []byte("all-envs\nonly-ab env-a env-b\n"), 0o600)
	tk, err = LoadTokens(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tok, env string
		want     bool
	}{
		{"all-envs", "env-z", true}, {"only-ab", "env-a", true}, {"only-ab", "env-b", true},
		{"only-ab", "env-c", false}, {"only-ab env-a", "env-a", false}, {"env-a", "env-a", false},
	} {
		if got := tk.MatchEnv(c.tok, c.env); got != c.want {
			t.Errorf("MatchEnv(%q, %q) = %v, want %v", c.tok, c.env, got, c.want)
		}
	}
	os.WriteFile(p, []byte("\n# only a comment\n"), 0o600)
	if _, err := LoadTokens(p); err == nil {
		t.Fatal("LoadTokens of a file without tokens succeeded")
	}
	if _, err := LoadTokens(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("LoadTokens of a missing file succeeded")
	}
	var none *Tokens
	if none.Match("x") {
		t.Fatal("nil Tokens matched")
	}
}

func TestRegistryAuth(t *testing.T) {
	r := startRelay(t, Options{})
	key := randomKey()
	reg := map[string]any{"security_profile": SecurityProfile, "executor_public_key": key}
	cases := []struct {
		name, verb, token string
		body              any
	}{
		{"register no token", "register", "", reg},
		{"register harness token", "register", harnessToken, reg},
		{"register wrong token", "register", "exec-token-2", reg},
		{"connect no token", "connect", "", map[string]any{"harness_public_key": key}},
		{"connect executor token", "connect", execToken, map[string]any{"harness_public_key": key}},
		{"validate harness token", "validate", harnessToken, map[string]any{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, m := post(t, r.env("E")+"/"+c.verb, c.token, c.body)
			if st != http.StatusUnauthorized || errCode(m) != "unauthorized" {
				t.Fatalf("%d %v, want 401 unauthorized", st, m)
			}
		})
	}
	// A non-Bearer scheme is not a token.
	req, _ := http.NewRequest("POST", r.env("E")+"/register", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Basic "+execToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("Basic scheme: %d", resp.StatusCode)
	}
	r.register(t, "E", key)
}

// A token limited to some environments works for those only, on every
// endpoint.
func TestScopedTokens(t *testing.T) {
	dir := t.TempDir()
	ef, hf := filepath.Join(dir, "e"), filepath.Join(dir, "h")
	os.WriteFile(ef, []byte("exec-a A\n"), 0o600)
	os.WriteFile(hf, []byte("harness-a A\n"), 0o600)
	et, _ := LoadTokens(ef)
	ht, _ := LoadTokens(hf)
	r := startRelay(t, Options{ExecutorTokens: et, HarnessTokens: ht})
	body := map[string]any{"security_profile": SecurityProfile, "executor_public_key": randomKey()}
	if st, m := post(t, r.env("B")+"/register", "exec-a", body); st != 401 {
		t.Fatalf("register B with A's token: %d %v", st, m)
	}
	if st, m := post(t, r.env("A")+"/register", "exec-a", body); st != 200 {
		t.Fatalf("register A: %d %v", st, m)
	}
	if st, m := post(t, r.env("B")+"/connect", "harness-a", map[string]any{"harness_public_key": randomKey()}); st != 401 {
		t.Fatalf("connect B with A's token: %d %v", st, m)
	}
	if st, m := post(t, r.env("B")+"/validate", "exec-a", map[string]any{}); st != 401 {
		t.Fatalf("validate B with A's token: %d %v", st, m)
	}
}

func TestRegisterRejectsBadBodies(t *testing.T) {
	r := startRelay(t, Options{})
	b64 := base64.StdEncoding.EncodeToString
	x, m := b64(make([]byte, 32)), b64(make([]byte, 1184))
	key := func(extra string) string {
		return `{"suite":"` + Suite + `","x25519_public_key":"` + x + `","mlkem768_public_key":"` + m + `"` + extra + `}`
	}
	cases := map[string]string{
		"not json":        `{`,
		"no key":          `{"security_profile":"noise_hybrid_ik_v1"}`,
		"wrong profile":   `{"security_profile":"noise_hybrid_ik_v2","executor_public_key":` + key("") + `}`,
		"unknown key fld": `{"security_profile":"noise_hybrid_ik_v1","executor_public_key":` + key(`,"extra":1`) + `}`,
		"wrong suite":     `{"security_profile":"noise_hybrid_ik_v1","executor_public_key":{"suite":"Noise_IK","x25519_public_key":"` + x + `","mlkem768_public_key":"` + m + `"}}`,
		"short x25519":    `{"security_profile":"noise_hybrid_ik_v1","executor_public_key":{"suite":"` + Suite + `","x25519_public_key":"` + b64(make([]byte, 31)) + `","mlkem768_public_key":"` + m + `"}}`,
		"short mlkem":     `{"security_profile":"noise_hybrid_ik_v1","executor_public_key":{"suite":"` + Suite + `","x25519_public_key":"` + x + `","mlkem768_public_key":"` + b64(make([]byte, 1183)) + `"}}`,
		"unpadded":        `{"security_profile":"noise_hybrid_ik_v1","executor_public_key":{"suite":"` + Suite + `","x25519_public_key":"` + strings.TrimRight(x, "=") + `","mlkem768_public_key":"` + m + `"}}`,
		"too large":       `{"security_profile":"` + strings.Repeat("a", maxBody) + `"}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			st, resp := post(t, r.env("E")+"/register", execToken, body)
			if st != 400 || errCode(resp) == "" {
				t.Fatalf("%d %v, want 400 with an error code", st, resp)
			}
		})
	}
	st, resp := post(t, r.env("bad%2Fenv")+"/register", execToken, `{"security_profile":"noise_hybrid_ik_v1","executor_public_key":`+key("")+`}`)
	if st != 400 || errCode(resp) != "invalid_environment_id" {
		t.Fatalf("env with a slash: %d %v", st, resp)
	}
	// The good body, and an unknown top-level field is tolerated.
	st, resp = post(t, r.env("E")+"/register", execToken, `{"security_profile":"noise_hybrid_ik_v1","executor_public_key":`+key("")+`,"future":true}`)
	if st != 200 {
		t.Fatalf("good body: %d %v", st, resp)
	}
	for _, f := range []string{"environment_id", "url", "security_profile", "executor_registration_id"} {
		if s, _ := resp[f].(string); s == "" {
			t.Errorf("register answer lacks %s: %v", f, resp)
		}
	}
	if !strings.HasPrefix(resp["url"].(string), "ws://127.0.0.1:") || !strings.Contains(resp["url"].(string), "role=environment") {
		t.Errorf("url = %v", resp["url"])
	}
}

func TestConnectNeedsAttachedExecutor(t *testing.T) {
	r := startRelay(t, Options{})
	hk := randomKey()
	st, m := post(t, r.env("E")+"/connect", harnessToken, map[string]any{"harness_public_key": hk})
	if st != http.StatusConflict || errCode(m) != "environment_offline" {
		t.Fatalf("unregistered: %d %v", st, m)
	}
	ek := randomKey()
	reg := r.register(t, "E", ek)
	st, m = post(t, r.env("E")+"/connect", harnessToken, map[string]any{"harness_public_key": hk})
	if st != http.StatusConflict || errCode(m) != "environment_offline" {
		t.Fatalf("registered, no socket: %d %v", st, m)
	}
	c := dial(t, reg["url"].(string))
	r.rec.wait(t, 0, 5*time.Second, func(e Event) bool { return e.Kind == "attach" })
	b := r.connect(t, "E", hk)
	if b["executor_registration_id"] != reg["executor_registration_id"] || b["environment_id"] != "E" || b["security_profile"] != SecurityProfile {
		t.Fatalf("bundle %v", b)
	}
	pk, _ := b["executor_public_key"].(map[string]any)
	if pk["x25519_public_key"] != base64.StdEncoding.EncodeToString(ek.X25519) || pk["suite"] != Suite {
		t.Fatalf("executor key %v", pk)
	}
	if a, _ := b["harness_key_authorization"].(string); a == "" || len(a) > 4096 {
		t.Fatalf("authorization %q", a)
	}
	if u, _ := b["url"].(string); !strings.Contains(u, "/rendezvous/harness/E?") || !strings.Contains(u, "role=harness") {
		t.Fatalf("harness url %q", u)
	}
	c.CloseNow()
	r.rec.wait(t, 0, 5*time.Second, func(e Event) bool { return e.Kind == "detach" })
	st, m = post(t, r.env("E")+"/connect", harnessToken, map[string]any{"harness_public_key": hk})
	if st != http.StatusConflict || errCode(m) != "environment_offline" {
		t.Fatalf("socket gone: %d %v", st, m)
	}
}

// attach registers env and holds its executor socket.
func (r *testRelay) attach(t *testing.T, env string) (reg map[string]any, c interface{ CloseNow() error }) {
	t.Helper()
	reg = r.register(t, env, randomKey())
	n := len(r.rec.all())
	conn := dial(t, reg["url"].(string))
	r.rec.wait(t, n, 5*time.Second, func(e Event) bool { return e.Kind == "attach" && e.Env == env })
	return reg, conn
}

func TestValidate(t *testing.T) {
	r := startRelay(t, Options{AuthorizationTTL: 1500 * time.Millisecond})
	reg, _ := r.attach(t, "E")
	regID := reg["executor_registration_id"].(string)
	_, _ = r.attach(t, "F")
	hk := randomKey()
	fresh := func() string { return r.connect(t, "E", hk)["harness_key_authorization"].(string) }

	a := fresh()
	if !r.validate(t, "E", regID, hk, a) {
		t.Fatal("valid authorization refused")
	}
	if r.validate(t, "E", regID, hk, a) {
		t.Fatal("authorization accepted twice")
	}
	cases := []struct {
		name     string
		run      func(a string) bool
		consumes bool
	}{
		{"other key", func(a string) bool { return r.validate(t, "E", regID, randomKey(), a) }, true},
		{"other registration", func(a string) bool { return r.validate(t, "E", "reg_other", hk, a) }, true},
		{"other environment", func(a string) bool { return r.validate(t, "F", regID, hk, a) }, true},
		{"unknown authorization", func(string) bool { return r.validate(t, "E", regID, hk, "hka_made_up") }, false},
		{"oversized authorization", func(string) bool { return r.validate(t, "E", regID, hk, strings.Repeat("a", 4097)) }, false},
		{"expired", func(a string) bool { time.Sleep(1600 * time.Millisecond); return r.validate(t, "E", regID, hk, a) }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := fresh()
			if c.run(a) {
				t.Fatal("accepted")
			}
			if !c.consumes && !r.validate(t, "E", regID, hk, a) {
				t.Fatal("an unrelated failed try consumed the authorization")
			}
			// A failed try consumes it too.
			if c.consumes && r.validate(t, "E", regID, hk, a) {
				t.Fatal("authorization usable after a failed validate")
			}
		})
	}
	// A new registration invalidates what was issued for the old one.
	a = fresh()
	r.register(t, "E", randomKey())
	if r.validate(t, "E", regID, hk, a) {
		t.Fatal("authorization for a replaced registration accepted")
	}
	e, _ := r.rec.wait(t, 0, time.Second, func(e Event) bool { return e.Kind == "validate" })
	if e.Stream != "s-1" {
		t.Fatalf("validate event stream id %q, want the X-Codex-Noise-Stream-Id header", e.Stream)
	}
	st, m := post(t, r.env("E")+"/validate", execToken, `{"executor_registration_id":"x"}`)
	if st != 400 || errCode(m) != "invalid_request" {
		t.Fatalf("incomplete validate body: %d %v", st, m)
	}
}

func TestPendingAuthorizationsBound(t *testing.T) {
	store := NewMemStore(8, 2)
	var shift atomic.Int64 // the store's clock runs ahead by this much
	store.now = func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	r := startRelay(t, Options{Store: store, AuthorizationTTL: time.Minute})
	r.attach(t, "E")
	hk := randomKey()
	r.connect(t, "E", hk)
	r.connect(t, "E", hk)
	st, m := post(t, r.env("E")+"/connect", harnessToken, map[string]any{"harness_public_key": hk})
	if st != http.StatusTooManyRequests || errCode(m) != "too_many_pending_authorizations" {
		t.Fatalf("third pending authorization: %d %v", st, m)
	}
	shift.Store(int64(2 * time.Minute))
	r.connect(t, "E", hk) // expired ones are swept
	if n := store.pendingAuthorizations(); n != 1 {
		t.Fatalf("pending = %d, want 1", n)
	}
}

func TestRegistryFaults(t *testing.T) {
	r := startRelay(t, Options{})
	body := map[string]any{"security_profile": SecurityProfile, "executor_public_key": randomKey()}
	r.ForTest().SetFaults(Faults{Register: Failure{Status: 503, Code: "registration_conflict", Times: 2}})
	for i := range 2 {
		st, m := post(t, r.env("E")+"/register", execToken, body)
		if st != 503 || errCode(m) != "registration_conflict" {
			t.Fatalf("attempt %d: %d %v", i, st, m)
		}
	}
	if st, m := post(t, r.env("E")+"/register", execToken, body); st != 200 {
		t.Fatalf("after the armed failures: %d %v", st, m)
	}
	r.ForTest().SetFaults(Faults{WrongEnvironmentID: true, WrongSecurityProfile: true})
	_, m := post(t, r.env("E")+"/register", execToken, body)
	if m["environment_id"] == "E" || m["security_profile"] == SecurityProfile {
		t.Fatalf("wrong-answer switches ignored: %v", m)
	}
	reg, _ := r.attach(t, "G")
	hk := randomKey()
	for _, c := range []struct {
		f      Faults
		status int
	}{
		{Faults{Validate: Failure{Status: 401, Code: "unauthorized"}}, 401},
		{Faults{Validate: Failure{Status: 403, Code: "forbidden"}}, 403},
		{Faults{Validate: Failure{Status: 500, Code: "internal"}}, 500},
		{Faults{Invalid: true}, 200},
	} {
		r.ForTest().SetFaults(Faults{})
		a := r.connect(t, "G", hk)["harness_key_authorization"]
		r.ForTest().SetFaults(c.f)
		st, m := post(t, r.env("G")+"/validate", execToken, map[string]any{"executor_registration_id": reg["executor_registration_id"], "harness_public_key": hk, "harness_key_authorization": a})
		if st != c.status || m["valid"] == true {
			t.Fatalf("%+v: %d %v", c.f, st, m)
		}
	}
	r.ForTest().SetFaults(Faults{SlowValidate: 300 * time.Millisecond})
	start := time.Now()
	post(t, r.env("G")+"/validate", execToken, map[string]any{})
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("SlowValidate did not delay the answer")
	}
}

func TestReadyz(t *testing.T) {
	r := startRelay(t, Options{})
	resp, err := http.Get(r.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("readyz %d", resp.StatusCode)
	}
	r.Close()
	resp, err = http.Get(r.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("readyz after Close %d", resp.StatusCode)
	}
}

package main

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"regexp"
	"sync"
	"time"
)

// agentDouble is the Agent Identity side of the registry double: a JWKS
// with one RSA key (kid k1), Agent Identity JWTs signed with it (or with
// another key under the same kid), and the checks of what an executor
// signs with the agent key the JWT carries.
type agentDouble struct {
	jwks []byte
	pub  ed25519.PublicKey
	// JWTs for CODEX_ACCESS_TOKEN: good; signed by another key with kid
	// k1; expired; for another audience; without account_id.
	good, otherKey, expired, wrongAud, noAccount string
}

var rfc3339Seconds = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)

// agentFixture is made once per test binary (RSA key generation is slow).
var agentFixture = sync.OnceValue(newAgentDouble)

func newAgentDouble() agentDouble {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	pk8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		panic(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	mint := func(key *rsa.PrivateKey, edit func(map[string]any)) string {
		claims := map[string]any{
			"iss": "https://chatgpt.com/codex-backend/agent-identity", "aud": "codex-app-server",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
			"agent_runtime_id": "rt-1", "agent_private_key": base64.StdEncoding.EncodeToString(pk8),
			"account_id": "acct-agent", "chatgpt_user_id": "user-1", "email": "a@example.com",
			"plan_type": "plus", "chatgpt_account_is_fedramp": false,
		}
		if edit != nil {
			edit(claims)
		}
		h, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": "k1"})
		c, _ := json.Marshal(claims)
		signed := enc(h) + "." + enc(c)
		d := sha256.Sum256([]byte(signed))
		sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
		if err != nil {
			panic(err)
		}
		return signed + "." + enc(sig)
	}
	jwks, _ := json.Marshal(map[string]any{"keys": []any{map[string]any{
		"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256",
		"n": enc(rk.N.Bytes()), "e": enc(big.NewInt(int64(rk.E)).Bytes()),
	}}})
	return agentDouble{
		jwks: jwks, pub: pub,
		good:      mint(rk, nil),
		otherKey:  mint(other, nil),
		expired:   mint(rk, func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() }),
		wrongAud:  mint(rk, func(c map[string]any) { c["aud"] = "someone-else" }),
		noAccount: mint(rk, func(c map[string]any) { delete(c, "account_id") }),
	}
}

// checkTaskRegistration verifies a task registration body: exactly
// {"timestamp","signature"} in that order, the timestamp to the second in
// UTC, the signature the agent key's over "rt-1:<timestamp>".
func (a agentDouble) checkTaskRegistration(body []byte) string {
	var b struct{ Timestamp, Signature string }
	if json.Unmarshal(body, &b) != nil {
		return "not json"
	}
	want, _ := json.Marshal(map[string]string{"timestamp": b.Timestamp, "signature": b.Signature})
	if !jsonEqual(want, body) || !regexp.MustCompile(`^\{"timestamp":`).Match(body) {
		return "unexpected fields or order: " + string(body)
	}
	if !rfc3339Seconds.MatchString(b.Timestamp) {
		return "timestamp " + b.Timestamp
	}
	sig, err := base64.StdEncoding.DecodeString(b.Signature)
	if err != nil || !ed25519.Verify(a.pub, []byte("rt-1:"+b.Timestamp), sig) {
		return "bad signature"
	}
	return "signed rt-1:timestamp"
}

// checkAssertion verifies an AgentAssertion: unpadded base64url of the
// sorted JSON {agent_runtime_id, signature, task_id, timestamp}, signed
// over "rt-1:task-9:<timestamp>"; it returns what it found, the same
// string for every valid assertion.
func (a agentDouble) checkAssertion(v string) string {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return "<not unpadded base64url>"
	}
	var env map[string]string
	if json.Unmarshal(raw, &env) != nil || len(env) != 4 {
		return "<not the 4-field envelope: " + string(raw) + ">"
	}
	sorted, _ := json.Marshal(env)
	if string(sorted) != string(raw) {
		return "<fields not in sorted order: " + string(raw) + ">"
	}
	if !rfc3339Seconds.MatchString(env["timestamp"]) {
		return "<timestamp " + env["timestamp"] + ">"
	}
	sig, err := base64.StdEncoding.DecodeString(env["signature"])
	if err != nil || !ed25519.Verify(a.pub, []byte(env["agent_runtime_id"]+":"+env["task_id"]+":"+env["timestamp"]), sig) {
		return "<bad signature>"
	}
	return "<" + env["agent_runtime_id"] + " " + env["task_id"] + " signed>"
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// agentCases are TestRemoteAuthModes's Agent Identity cases, each run on
// this executor and the reference: the JWKS fetch, the task registration
// and register with an AgentAssertion, or the reference's refusal.
func agentCases(reg func(auth, acct string) *regRequest) []authCase {
	a := agentFixture()
	flag := []string{"--use-agent-identity-auth"}
	bases := func(extra ...string) []string {
		return append([]string{"CODEX_AGENT_IDENTITY_JWKS_BASE_URL={plain}/jwks-base", "CODEX_AGENT_IDENTITY_AUTHAPI_BASE_URL={plain}/authapi"}, extra...)
	}
	jwksGet := regRequest{Method: "GET", Path: "/jwks-base/agent-identities/jwks", Headers: []string{"accept", "originator"}}
	task := regRequest{Method: "POST", Path: "/authapi/v1/agent/rt-1/task/register", Headers: []string{"accept", "content-type", "originator"},
		BodyShape: `{"signature":"s","timestamp":"s"}`, Check: "signed rt-1:timestamp"}
	asserted := reg("AgentAssertion <rt-1 task-9 signed>", "acct-agent")
	unavailable := "Agent Identity authentication is unavailable"
	return []authCase{
		{name: "agent identity", args: flag, env: bases("CODEX_ACCESS_TOKEN=" + a.good), code: 1, pre: []regRequest{jwksGet, task}, want: asserted},
		{name: "agent identity https", tls: true, args: flag, env: bases("CODEX_ACCESS_TOKEN=" + a.good), code: 1, pre: []regRequest{jwksGet, task}, want: asserted},
		{name: "agent identity beats api key", args: flag, env: bases("CODEX_ACCESS_TOKEN="+a.good, "CODEX_API_KEY=k-1"), code: 1, pre: []regRequest{jwksGet, task}, want: asserted},
		{name: "agent identity without token", args: flag, env: bases(), code: 1, refusal: "CODEX_ACCESS_TOKEN is required when --use-agent-identity-auth is set"},
		{name: "agent identity other signing key", args: flag, env: bases("CODEX_ACCESS_TOKEN=" + a.otherKey), code: 1, pre: []regRequest{jwksGet}, refusal: unavailable},
		{name: "agent identity expired", args: flag, env: bases("CODEX_ACCESS_TOKEN=" + a.expired), code: 1, pre: []regRequest{jwksGet}, refusal: unavailable},
		{name: "agent identity wrong audience", args: flag, env: bases("CODEX_ACCESS_TOKEN=" + a.wrongAud), code: 1, pre: []regRequest{jwksGet}, refusal: unavailable},
		{name: "agent identity without account", args: flag, env: bases("CODEX_ACCESS_TOKEN=" + a.noAccount), code: 1, pre: []regRequest{jwksGet}, refusal: unavailable},
		{name: "agent identity not a JWT", args: flag, env: bases("CODEX_ACCESS_TOKEN=notajwt"), code: 1, pre: []regRequest{jwksGet}, refusal: unavailable},
		{name: "agent identity task refused", args: flag, env: bases("CODEX_ACCESS_TOKEN=" + a.good), task: 500, code: 1, pre: []regRequest{jwksGet, task}, refusal: unavailable},
		{name: "agent identity and bearer stdin", args: append(flag, "--registration-bearer-stdin"), env: bases("CODEX_ACCESS_TOKEN=" + a.good), stdin: "brr-Z9q\n", code: 2, refusal: "cannot be used with"},
	}
}

package executor

import "testing"

// FuzzAgentIdentity: any token and JWKS document are verified or refused,
// never a panic (parseAgentIdentity is the decoder of CODEX_ACCESS_TOKEN).
func FuzzAgentIdentity(f *testing.F) {
	f.Add("eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJleHAiOjF9.c2ln", []byte(`{"keys":[{"kty":"RSA","kid":"k1","n":"AQAB","e":"AQAB"}]}`))
	f.Add("a.b.c", []byte(`{}`))
	f.Fuzz(func(t *testing.T, token string, jwks []byte) {
		if a, err := parseAgentIdentity(token, jwks); err == nil && (a.RuntimeID == "" || a.key == nil) {
			t.Fatalf("accepted an identity without a runtime or key: %+v", a)
		}
	})
}

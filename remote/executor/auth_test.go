package executor

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func jwtFor(claims map[string]any) string {
	c, _ := json.Marshal(claims)
	e := base64.RawURLEncoding.EncodeToString
	return e([]byte(`{"alg":"RS256"}`)) + "." + e(c) + "." + e([]byte("s"))
}

func TestReadCredentialLine(t *testing.T) {
	for _, c := range []struct {
		in, want, rest string
		ok             bool
	}{
		{"tok\n", "tok", "", true},
		{"tok\r\nnext\n", "tok", "next\n", true},
		{"tok", "", "", false},
		{"", "", "", false},
		{strings.Repeat("a", MaxStdinCredential-1) + "\n", strings.Repeat("a", MaxStdinCredential-1), "", true},
		{strings.Repeat("a", MaxStdinCredential) + "\n", "", "", false},
	} {
		r := bufio.NewReaderSize(strings.NewReader(c.in), MaxStdinCredential)
		got, err := ReadCredentialLine(r, "bearer")
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("%.20q: %.20q, %v", c.in, got, err)
			continue
		}
		if c.ok {
			if rest, _ := r.ReadString(0); rest != c.rest {
				t.Errorf("%.20q: left %q, want %q", c.in, rest, c.rest)
			}
		}
	}
}

func TestValidBearer(t *testing.T) {
	for s, want := range map[string]bool{"a.b-c_d~e+f/g=": true, "é": true, "": false, "a b": false, "a\tb": false, "a\x7f": false} {
		if ValidBearer(s) != want {
			t.Errorf("ValidBearer(%q) != %v", s, want)
		}
	}
}

func TestChatGPTTokenAccount(t *testing.T) {
	claim := jwtFor(map[string]any{authClaim: map[string]any{"chatgpt_account_id": "A"}})
	top := jwtFor(map[string]any{"chatgpt_account_id": "A"}) // not where the reference looks
	for _, c := range []struct {
		tok, flag, want, err string
	}{
		{claim, "", "A", ""},
		{claim, "A", "A", ""},
		{claim, "B", "", "does not match"},
		{top, "", "", "no ChatGPT account ID"},
		{top, "B", "B", ""},
		{"x.y", "", "", "invalid ChatGPT access token"},
		{"a.!!.c", "A", "", "invalid ChatGPT access token"},
		{jwtFor(nil) + " ", "A", "", "invalid ChatGPT access token"},
	} {
		got, err := ChatGPTTokenAccount(c.tok, c.flag)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q/%q: %q, %v; want %q, %q", c.tok, c.flag, got, err, c.want, c.err)
		}
	}
}

func TestLoadAuthFile(t *testing.T) {
	live := jwtFor(map[string]any{"exp": float64(time.Now().Add(time.Hour).Unix())})
	dead := jwtFor(map[string]any{"exp": float64(time.Now().Add(-time.Hour).Unix())})
	soon := jwtFor(map[string]any{"exp": float64(time.Now().Add(RefreshMargin / 2).Unix())})
	tokens := func(access, refresh, id string) string {
		b, _ := json.Marshal(map[string]any{"OPENAI_API_KEY": nil, "last_refresh": "2026-01-01T00:00:00Z",
			"tokens": map[string]any{"id_token": id, "access_token": access, "refresh_token": refresh, "account_id": "acct"}})
		return string(b)
	}
	for _, c := range []struct {
		name, file string
		want       AuthFile
		err        string
	}{
		{"sign-in", tokens(live, "r", live), AuthFile{AccessToken: live, AccountID: "acct"}, ""},
		{"expired", tokens(dead, "r", live), AuthFile{AccessToken: dead, AccountID: "acct", Expired: true, RefreshDue: true}, ""},
		{"expiring", tokens(soon, "r", live), AuthFile{AccessToken: soon, AccountID: "acct", RefreshDue: true}, ""},
		{"api key", `{"OPENAI_API_KEY":"sk"}`, AuthFile{APIKey: "sk"}, ""},
		{"no refresh token", tokens(live, "", live), AuthFile{}, "run `codex login`"},
		{"id token not a JWT", tokens(live, "r", "x"), AuthFile{}, "run `codex login`"},
		{"no last_refresh", `{"tokens":{"id_token":"` + live + `","access_token":"a","refresh_token":"r"}}`, AuthFile{}, "no usable bearer"},
		{"empty", `{}`, AuthFile{}, "no usable bearer"},
		{"not json", `{`, AuthFile{}, "auth.json"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "auth.json"), []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		got, ok, err := LoadAuthFile(dir)
		if !ok || got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %+v %v %v; want %+v, %q", c.name, got, ok, err, c.want, c.err)
		}
	}
	if _, ok, err := LoadAuthFile(t.TempDir()); ok || err != nil {
		t.Errorf("no file: ok %v, %v", ok, err)
	}
}

func TestCheckAuthURL(t *testing.T) {
	for _, c := range []struct {
		url  string
		mode AuthMode
		ok   bool
	}{
		{"https://r.example.com/p/", AuthChatGPTToken, true},
		{"http://127.0.0.1:1", AuthChatGPTToken, false},
		{"https://u@r.example.com", AuthChatGPTToken, false},
		{"https://r.example.com#f", AuthChatGPTToken, false},
		{"http://127.0.0.1:1", AuthRegistrationBearer, true},
		{"http://[::1]:1", AuthChatGPT, true},
		{"http://r.example.com", AuthRegistrationBearer, false},
		{"http://r.example.com", AuthChatGPT, false},
		{"https://r.example.com?q=1", AuthChatGPT, false},
		{"ftp://r.example.com", AuthRegistrationBearer, false},
		{"http://r.example.com", AuthAPIKey, false},
		{"https://r.example.com", AuthAPIKey, true},
	} {
		got, err := checkAuthURL(c.url, c.mode)
		if (err == nil) != c.ok {
			t.Errorf("%s %s: %q %v", c.url, c.mode, got, err)
		}
	}
}

func TestRefreshAuthFile(t *testing.T) {
	fresh := jwtFor(map[string]any{"exp": float64(time.Now().Add(time.Hour).Unix())})
	dead := jwtFor(map[string]any{"exp": float64(time.Now().Add(-time.Hour).Unix())})
	status := http.StatusOK
	var got map[string]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&got)
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"access_token": fresh, "refresh_token": "r2"})
	}))
	defer srv.Close()
	dir := t.TempDir()
	orig := `{"OPENAI_API_KEY":null,"other":7,"last_refresh":"2026-01-01T00:00:00Z","tokens":{"id_token":"` + dead + `","access_token":"` + dead + `","refresh_token":"r1","account_id":"acct"}}`
	path := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(path, []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	status = http.StatusInternalServerError
	if _, err := RefreshAuthFile(context.Background(), srv.Client(), dir, srv.URL+"/oauth/token"); err == nil {
		t.Error("a refused refresh passed")
	}
	if b, _ := os.ReadFile(path); string(b) != orig {
		t.Errorf("a failed refresh changed auth.json: %s", b)
	}
	if _, err := RefreshAuthFile(context.Background(), srv.Client(), dir, "http://auth.example.com/oauth/token"); err == nil {
		t.Error("the refresh token went over plain http to a non-loopback host")
	}
	status = http.StatusOK
	af, err := RefreshAuthFile(context.Background(), srv.Client(), dir, srv.URL+"/oauth/token")
	if err != nil || af.AccessToken != fresh || af.AccountID != "acct" || af.RefreshDue {
		t.Fatalf("%+v %v", af, err)
	}
	if got["refresh_token"] != "r1" || got["grant_type"] != "refresh_token" || got["client_id"] == "" {
		t.Errorf("request %v", got)
	}
	var file map[string]any
	b, _ := os.ReadFile(path)
	json.Unmarshal(b, &file)
	tok := file["tokens"].(map[string]any)
	if tok["refresh_token"] != "r2" || tok["id_token"] != dead || file["other"] != float64(7) || file["last_refresh"] == "2026-01-01T00:00:00Z" {
		t.Errorf("rewritten auth.json %s", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("auth.json mode %v", fi.Mode())
	}
}

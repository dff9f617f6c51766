package awssig

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"
)

func keys(id string) (string, bool) {
	if id == "AKIDTEST" {
		return "secret-test", true
	}
	return "", false
}

// Sign and Verify agree, and Verify refuses a tampered, late, unknown or
// temporary-credential request.
func TestSignVerify(t *testing.T) {
	s := Static("AKIDTEST", "secret-test", "", "us-east-1", "")
	body := []byte(`{"transport":"direct_jsonrpc_v1"}`)
	newReq := func() *http.Request {
		r, _ := http.NewRequest("POST", "https://registry.test/cloud/environment/e/direct/register?x=1", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if err := s.Sign(context.Background(), r, body); err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Accept", "*/*") // added after signing: not covered
		return r
	}
	if id, err := Verify(newReq(), body, keys, time.Now()); err != nil || id != "AKIDTEST" {
		t.Fatalf("Verify of a good request: %q, %v", id, err)
	}
	cases := map[string]func(r *http.Request) ([]byte, time.Time){
		"other body":  func(r *http.Request) ([]byte, time.Time) { return []byte(`{}`), time.Now() },
		"other path":  func(r *http.Request) ([]byte, time.Time) { r.URL.Path += "x"; return body, time.Now() },
		"other query": func(r *http.Request) ([]byte, time.Time) { r.URL.RawQuery = "x=2"; return body, time.Now() },
		"other signed hdr": func(r *http.Request) ([]byte, time.Time) {
			r.Header.Set("Content-Type", "text/plain")
			return body, time.Now()
		},
		"16 minutes late": func(r *http.Request) ([]byte, time.Time) { return body, time.Now().Add(16 * time.Minute) },
		"unknown key": func(r *http.Request) ([]byte, time.Time) {
			r.Header.Set("Authorization", replaceKey(r.Header.Get("Authorization")))
			return body, time.Now()
		},
		"session token": func(r *http.Request) ([]byte, time.Time) {
			r.Header.Set("X-Amz-Security-Token", "t")
			return body, time.Now()
		},
		"no authorization": func(r *http.Request) ([]byte, time.Time) { r.Header.Del("Authorization"); return body, time.Now() },
		"bearer instead": func(r *http.Request) ([]byte, time.Time) {
			r.Header.Set("Authorization", "Bearer x")
			return body, time.Now()
		},
		"date not the scope": func(r *http.Request) ([]byte, time.Time) {
			r.Header.Set("X-Amz-Date", "20000101T000000Z")
			return body, time.Now()
		},
	}
	for name, tamper := range cases {
		r := newReq()
		b, now := tamper(r)
		if _, err := Verify(r, b, keys, now); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

func replaceKey(auth string) string {
	return string(bytes.Replace([]byte(auth), []byte("AKIDTEST"), []byte("AKIDOTHER"), 1))
}

// FuzzVerify: any Authorization and date header is refused or verified,
// never a panic.
func FuzzVerify(f *testing.F) {
	f.Add("AWS4-HMAC-SHA256 Credential=AKIDTEST/20260101/us-east-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature="+string(bytes.Repeat([]byte("0"), 64)), "20260101T000000Z")
	f.Fuzz(func(t *testing.T, auth, date string) {
		r, _ := http.NewRequest("GET", "http://h/p", nil)
		r.Header.Set("Authorization", auth)
		r.Header.Set("X-Amz-Date", date)
		Verify(r, nil, keys, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	})
}

package envreg

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPost(t *testing.T) {
	var got *http.Request
	var gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, strings.Repeat("x", 100))
	}))
	defer srv.Close()
	hdr := http.Header{}
	hdr.Set("ChatGPT-Account-ID", "acct")
	status, data, err := Post(context.Background(), srv.Client(), srv.URL+"/p", "env/1 x", "connect", "tok", hdr, map[string]int{"a": 1}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusTeapot || string(data) != strings.Repeat("x", 10) {
		t.Fatalf("status %d, body %q (want 418 and the first 10 bytes)", status, data)
	}
	if got.Method != http.MethodPost || got.URL.EscapedPath() != "/p/cloud/environment/env%2F1%20x/connect" {
		t.Errorf("%s %s", got.Method, got.URL.EscapedPath())
	}
	for k, want := range map[string]string{"Content-Type": "application/json", "Accept": "*/*", "Authorization": "Bearer tok", "Chatgpt-Account-Id": "acct"} {
		if v := got.Header.Get(k); v != want {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
	if gotBody != `{"a":1}` {
		t.Errorf("body %q", gotBody)
	}
	if _, _, err := Post(context.Background(), srv.Client(), srv.URL, "e", "v", "t", nil, func() {}, 10); err == nil {
		t.Error("a body that is not JSON was sent")
	}
}

func TestErrorBody(t *testing.T) {
	for _, c := range []struct{ in, code, msg string }{
		{`{"error":{"code":"environment_offline","message":"m"}}`, "environment_offline", "m"},
		{`{"error":{"code":"c"}}`, "c", ""},
		{`{}`, "", ""},
		{`not json`, "", ""},
		{`{"error":"flat"}`, "", ""},
	} {
		if code, msg := ErrorBody([]byte(c.in)); code != c.code || msg != c.msg {
			t.Errorf("ErrorBody(%s) = %q, %q; want %q, %q", c.in, code, msg, c.code, c.msg)
		}
	}
}

func FuzzErrorBody(f *testing.F) {
	f.Add([]byte(`{"error":{"code":"c","message":"m"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		code, msg := ErrorBody(b)
		// What it finds survives a round trip through the same shape.
		again, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
		if c2, m2 := ErrorBody(again); c2 != code || m2 != msg {
			t.Fatalf("%q: %q, %q; again %q, %q", b, code, msg, c2, m2)
		}
	})
}

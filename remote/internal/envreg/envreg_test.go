package envreg

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
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

func TestParseError(t *testing.T) {
	for _, c := range []struct{ in, code, msg string }{
		{`{"error":{"code":"environment_offline","message":"m"}}`, "environment_offline", "m"},
		{`{"error":{"code":"c"}}`, "c", ""},
		{`{}`, "", ""},
		{`not json`, "", ""},
		{`{"error":"flat"}`, "", ""},
	} {
		if code, msg := ParseError([]byte(c.in)); code != c.code || msg != c.msg {
			t.Errorf("ParseError(%s) = %q, %q; want %q, %q", c.in, code, msg, c.code, c.msg)
		}
	}
}

func FuzzParseError(f *testing.F) {
	f.Add([]byte(`{"error":{"code":"c","message":"m"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		code, msg := ParseError(b)
		// What it finds survives a round trip through the same shape.
		again, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
		if c2, m2 := ParseError(again); c2 != code || m2 != msg {
			t.Fatalf("%q: %q, %q; again %q, %q", b, code, msg, c2, m2)
		}
	})
}

// TestShapesEncodeAsSortedMaps keeps each shape's fields in the order
// encoding/json writes a map's keys: the three sides built these bodies as
// maps before they shared the structs, and the bytes on the wire (which the
// reference's executor and harness read, and a SigV4 signature covers)
// stay the same.
func TestShapesEncodeAsSortedMaps(t *testing.T) {
	for _, v := range []any{
		ErrorBody{}, Error{}, RegisterRequest{}, Registration{}, ConnectRequest{}, Bundle{},
		ValidateRequest{}, ValidateResponse{}, DirectRegisterRequest{}, DirectRegistration{},
	} {
		typ := reflect.TypeOf(v)
		var names []string
		for i := range typ.NumField() {
			name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "" || opts != "" {
				t.Errorf("%s.%s: json tag %q: every field is named and has no options, as a map's key", typ.Name(), typ.Field(i).Name, typ.Field(i).Tag.Get("json"))
			}
			names = append(names, name)
		}
		if !slices.IsSorted(names) {
			t.Errorf("%s: fields %v are not in sorted order", typ.Name(), names)
		}
	}
	got, err := json.Marshal(ErrorBody{Error: Error{Code: CodeEnvironmentOffline, Message: "m"}})
	if err != nil || string(got) != `{"error":{"code":"environment_offline","message":"m"}}` {
		t.Errorf("ErrorBody encodes as %s (%v)", got, err)
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRemoteFlags(t *testing.T) {
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--remote", "http://127.0.0.1:1"}, 2, "requires --environment-id"},
		{[]string{"--environment-id", "E"}, 2, "requires --remote"},
		{[]string{"--remote", "http://127.0.0.1:1", "--environment-id", "E", "--listen", "ws://127.0.0.1:0"}, 2, "conflicts with --listen"},
		// No CODEX_API_KEY: nothing to authenticate with.
		{[]string{"--remote", "http://127.0.0.1:1", "--environment-id", "E"}, 1, "CODEX_API_KEY"},
	}
	t.Setenv("CODEX_API_KEY", "")
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, strings.NewReader(""), &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
	// A key, but a non-loopback http registry: refused before any request.
	t.Setenv("CODEX_API_KEY", "k")
	var errb bytes.Buffer
	if code := run([]string{"--remote", "http://registry.example.com", "--environment-id", "E"}, strings.NewReader(""), &bytes.Buffer{}, &errb); code != 1 || !strings.Contains(errb.String(), "https") {
		t.Errorf("http registry: exit %d, %q", code, errb.String())
	}
}

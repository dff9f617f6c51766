package process

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// TestBuildEnv is not parallel: it sets the server's environment.
func TestBuildEnv(t *testing.T) {
	t.Setenv("EXECGO_TEST_PLAIN", "plain")
	t.Setenv("EXECGO_TEST_API_KEY", "k")
	t.Setenv("EXECGO_TEST_SECRET_X", "s")
	t.Setenv("EXECGO_test_token", "tok") // excludes ignore case
	for k, v := range map[string]string{"HOME": "/home/test", "LANG": "C.UTF-8", "LC_ALL": "C", "LC_CTYPE": "C", "LOGNAME": "tester",
		"SHELL": "/bin/sh", "TEMP": "/t1", "TMP": "/t2", "TMPDIR": "/t3", "USER": "tester", "USERNAME": "u", "TERM": "xterm"} {
		t.Setenv(k, v)
	}
	t.Setenv("CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE", "1")
	tests := []struct {
		name    string
		env     map[string]string
		policy  string
		want    []string // must be present
		notWant []string // names that must be absent
		exact   bool     // want is the whole environment
	}{
		{name: "exact, no policy", env: map[string]string{"B": "2", "A": "1"}, want: []string{"A=1", "B=2"}, exact: true},
		{name: "null policy", env: map[string]string{"A": "1"}, policy: "null", want: []string{"A=1"}, exact: true},
		{name: "nil env", want: nil, exact: true},
		{name: "stripped names", env: map[string]string{"CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE": "1", "OK": ""},
			want: []string{"OK="}, exact: true},
		{name: "inherit none", env: map[string]string{"A": "1"}, policy: `{"inherit":"none","set":{"B":"2"}}`,
			want: []string{"A=1", "B=2"}, exact: true},
		{name: "inherit all", policy: `{"inherit":"all"}`, want: []string{"EXECGO_TEST_PLAIN=plain", "HOME=/home/test"},
			notWant: []string{"EXECGO_TEST_API_KEY", "EXECGO_TEST_SECRET_X", "EXECGO_test_token", "CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE"}},
		{name: "inherit defaults to all", policy: `{}`, want: []string{"EXECGO_TEST_PLAIN=plain"}, notWant: []string{"EXECGO_TEST_API_KEY"}},
		{name: "ignore default excludes", policy: `{"inherit":"all","ignoreDefaultExcludes":true}`,
			want: []string{"EXECGO_TEST_API_KEY=k", "EXECGO_TEST_SECRET_X=s", "EXECGO_test_token=tok"}},
		{name: "custom exclude", policy: `{"inherit":"all","exclude":["execgo_test_p*"]}`, notWant: []string{"EXECGO_TEST_PLAIN"}},
		// The reference's core set, observed: LC_ALL and LC_CTYPE in,
		// TERM and USERNAME out.
		{name: "inherit core", policy: `{"inherit":"core"}`,
			want:    []string{"HOME=/home/test", "LANG=C.UTF-8", "LC_ALL=C", "LC_CTYPE=C", "LOGNAME=tester", "SHELL=/bin/sh", "TEMP=/t1", "TMP=/t2", "TMPDIR=/t3", "USER=tester"},
			notWant: []string{"EXECGO_TEST_PLAIN", "TERM", "USERNAME"}},
		{name: "include only", policy: `{"inherit":"all","includeOnly":["HOME","EXECGO_TEST_P*"]}`,
			want: []string{"EXECGO_TEST_PLAIN=plain", "HOME=/home/test"}, exact: true},
		{name: "env overlays the policy", env: map[string]string{"HOME": "/override", "X": "y"},
			policy: `{"inherit":"core","set":{"HOME":"/set"},"includeOnly":["HOME"]}`, want: []string{"HOME=/override", "X=y"}, exact: true},
		{name: "set overrides inherited", policy: `{"inherit":"all","set":{"EXECGO_TEST_PLAIN":"changed"}}`,
			want: []string{"EXECGO_TEST_PLAIN=changed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := buildEnv(tt.env, json.RawMessage(tt.policy))
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(got); i++ {
				if got[i-1] >= got[i] {
					t.Errorf("not sorted or duplicated: %q before %q", got[i-1], got[i])
				}
			}
			if tt.exact && strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("env %q, want exactly %q", got, tt.want)
			}
			have := map[string]string{}
			for _, kv := range got {
				k, _, _ := strings.Cut(kv, "=")
				have[k] = kv
			}
			for _, w := range tt.want {
				k, _, _ := strings.Cut(w, "=")
				if have[k] != w {
					t.Errorf("want %q, have %q", w, have[k])
				}
			}
			for _, k := range tt.notWant {
				if _, ok := have[k]; ok {
					t.Errorf("%s should be absent: %q", k, have[k])
				}
			}
		})
	}
	_, err := buildEnv(nil, json.RawMessage(`{"inherit":"Core"}`))
	if pe := (*protocol.Error)(nil); !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams ||
		pe.Message != "unknown variant `Core`, expected one of `core`, `all`, `none`" {
		t.Errorf("inherit Core: %v", err)
	}
	for _, bad := range []string{`{"inherit":"some"}`, `{"inherit":5}`, `[1]`, `{"exclude":"x"}`} {
		_, err := buildEnv(nil, json.RawMessage(bad))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams {
			t.Errorf("policy %s: err %v, want -32602", bad, err)
		}
	}
}

func TestResolveProgram(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	other := filepath.Join(dir, "other")
	for _, d := range []string{bin, other, filepath.Join(bin, "isdir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path string, mode os.FileMode) {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(bin, "tool"), 0o755)
	write(filepath.Join(other, "tool"), 0o755)
	write(filepath.Join(bin, "plain"), 0o644)
	write(filepath.Join(other, "plain"), 0o755)
	write(filepath.Join(bin, "noexec"), 0o644)
	tests := []struct {
		name, prog, path string
		want             string
		err              error
	}{
		{"first PATH entry wins", "tool", "PATH=" + bin + ":" + other, filepath.Join(bin, "tool"), nil},
		{"order matters", "tool", "PATH=" + other + ":" + bin, filepath.Join(other, "tool"), nil},
		{"non-executable skipped", "plain", "PATH=" + bin + ":" + other, filepath.Join(other, "plain"), nil},
		{"only non-executable", "noexec", "PATH=" + bin, "", syscall.EACCES},
		{"directories skipped", "isdir", "PATH=" + bin, "", syscall.ENOENT},
		{"missing", "nothing", "PATH=" + bin, "", syscall.ENOENT},
		{"empty PATH entry is the cwd", "tool", "PATH=:/nonexistent", filepath.Join(dir, "bin", "tool"), nil},
		{"relative PATH entry from the cwd", "tool", "PATH=bin", filepath.Join(bin, "tool"), nil},
		{"absolute name", "/bin/sh", "PATH=/nonexistent", "/bin/sh", nil},
		{"relative name", "./bin/tool", "PATH=/nonexistent", filepath.Join(bin, "tool"), nil},
		{"empty name", "", "PATH=" + bin, "", syscall.ENOENT},
		{"NUL in name", "to\x00ol", "PATH=" + bin, "", syscall.EINVAL},
	}
	for _, tt := range tests {
		cwd := dir
		if tt.name == "empty PATH entry is the cwd" {
			cwd = bin
		}
		got, err := resolveProgram(tt.prog, cwd, []string{"A=1", tt.path})
		if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) || got != tt.want {
			t.Errorf("%s: resolveProgram(%q) = %q, %v; want %q, %v", tt.name, tt.prog, got, err, tt.want, tt.err)
		}
	}
	// Without PATH in the child env, the server's PATH is searched.
	if got, err := resolveProgram("sh", dir, []string{"A=1"}); err != nil || !filepath.IsAbs(got) {
		t.Errorf("sh via the server PATH: %q %v", got, err)
	}
}

// Entries that cannot be passed as NAME=VALUE are refused with -32602
// naming the first of them, in env and in envPolicy.set; argv and arg0
// with a NUL likewise (issue 14: they were dropped silently, or -32603).
func TestInvalidStartValues(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		policy string
		argv   []string
		arg0   *string
		want   string
	}{
		{name: "empty name", env: map[string]string{"": "x", "OK": "1"}, want: `invalid env entry "": a variable name must not be empty`},
		{name: "= in name", env: map[string]string{"A=B": "c"}, want: `invalid env entry "A=B": a variable name must not contain '='`},
		{name: "NUL in name", env: map[string]string{"A\x00B": "c"}, want: `invalid env entry "A\x00B": a variable name must not contain a NUL byte`},
		{name: "NUL in value", env: map[string]string{"NUL": "a\x00b"}, want: `invalid env entry "NUL": its value must not contain a NUL byte`},
		{name: "first in name order", env: map[string]string{"Z=": "", "B=": "", "M\x00": ""}, want: `"B="`},
		{name: "long name cut", env: map[string]string{strings.Repeat("k", 100) + "=": ""}, want: `"` + strings.Repeat("k", 64) + `"...: a variable`},
		{name: "policy set", policy: `{"inherit":"none","set":{"X=Y":"1"}}`, want: `invalid envPolicy.set entry "X=Y"`},
		{name: "NUL in argv", argv: []string{"echo", "a\x00b"}, want: `invalid argv[1] "a\x00b": an argument must not contain a NUL byte`},
		{name: "NUL in argv[0]", argv: []string{"ec\x00ho"}, want: `invalid argv[0] "ec\x00ho"`},
		{name: "NUL in arg0", arg0: ptr("x\x00"), want: `invalid arg0 "x\x00"`},
		{name: "valid", env: map[string]string{"A": "", "B": "=x="}, argv: []string{"a", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			argv := tt.argv
			if argv == nil {
				argv = []string{"true"}
			}
			err := ValidateStart(&protocol.StartParams{Argv: argv, Arg0: tt.arg0, Env: tt.env})
			if tt.policy == "" && tt.argv == nil && tt.arg0 == nil {
				// buildEnv refuses the same env on its own.
				_, berr := buildEnv(tt.env, nil)
				if (berr == nil) != (err == nil) {
					t.Errorf("ValidateStart: %v, buildEnv: %v", err, berr)
				}
			}
			if tt.policy != "" {
				_, err = buildEnv(tt.env, json.RawMessage(tt.policy))
			}
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams || !strings.Contains(pe.Message, tt.want) {
				t.Fatalf("err %v, want -32602 containing %q", err, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

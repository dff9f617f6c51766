package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/execgo/exec-server/sandbox"
)

// The start-up line says whether the sandbox is available and, when not,
// what is missing, with what the probe found.
func TestLogSandboxSupport(t *testing.T) {
	var buf bytes.Buffer
	logSandboxSupport(slog.New(slog.NewTextHandler(&buf, nil)))
	line := buf.String()
	s := sandbox.Probe()
	want := []string{"level=INFO", "userNamespaces=", "landlockABI=", "seccomp="}
	if s.Available {
		want = append(want, "sandbox available")
	} else {
		want = append(want, "sandbox unavailable", "missing=")
	}
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("log %q lacks %q", line, w)
		}
	}
	if strings.Count(line, "\n") != 1 {
		t.Errorf("want one line, got %q", line)
	}
}

// environment/info says whether a sandbox policy can be enforced here,
// next to the reference's keys (which stay as they are).
func TestEnvInfoLinuxSandbox(t *testing.T) {
	caps := New(Config{}).envInfo().Capabilities
	if got, want := caps["linuxSandbox"], sandbox.Probe().Available; got != want {
		t.Fatalf("linuxSandbox = %v, probe says %v", got, want)
	}
	for _, k := range []string{"sandboxedFileStreaming", "capabilityDiscoverySandbox", "fileWriteStreaming"} {
		if _, ok := caps[k]; !ok {
			t.Errorf("reference key %s is gone", k)
		}
	}
}

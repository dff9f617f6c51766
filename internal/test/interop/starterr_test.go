package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

func init() {
	scenarios = append(scenarios, scenario{name: "start-error-kinds", run: startErrorKinds})
}

// startErrorKinds: a failed process/start answers with the error object
// byte for byte as 0.171 does: {"code":…,"data":{"kind":…},"message":…}
// (0.171's ProcessStartErrorData; a 0.169 reference sends no data, so
// against it the same cases are checked without). Validation errors carry
// no data on either. The cases are the ones where ours and the reference
// agree; a PTY start with a missing cwd (the reference starts it) or of a
// bare name not on PATH (the reference's text names its PATH search) are
// documented divergences.
func startErrorKinds(e *env) {
	noexec := filepath.Join(e.dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "file"), nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
	var info struct {
		EnvironmentInfo struct {
			ExecutorVersion string `json:"executorVersion"`
		} `json:"environmentInfo"`
	}
	e.callInto("environment/info", map[string]any{}, &info.EnvironmentInfo)
	kinds := info.EnvironmentInfo.ExecutorVersion != "0.169.0"

	mxc := map[string]any{"permissions": map[string]any{"type": "disabled"}, "windowsSandboxLevel": "mxc"}
	cases := []struct {
		name  string
		edit  func(p map[string]any)
		code  int
		kind  string
		msg   string
		noKey bool // a validation error: no data at all
	}{
		{"missing program", func(p map[string]any) { p["argv"] = []string{filepath.Join(e.dir, "nope")} }, -32603, "spawnNotFound", "No such file or directory (os error 2)", false},
		{"bare name not on PATH", func(p map[string]any) { p["argv"] = []string{"no-such-program-exec-server-interop"} }, -32603, "spawnNotFound", "No such file or directory (os error 2)", false},
		{"not executable", func(p map[string]any) { p["argv"] = []string{noexec} }, -32603, "spawnPermissionDenied", "Permission denied (os error 13)", false},
		{"program is a directory", func(p map[string]any) { p["argv"] = []string{e.dir} }, -32603, "spawnPermissionDenied", "Permission denied (os error 13)", false},
		{"missing cwd", func(p map[string]any) { p["cwd"] = e.uri("missing") }, -32603, "spawnNotFound", "No such file or directory (os error 2)", false},
		{"cwd is a file", func(p map[string]any) { p["cwd"] = e.uri("file") }, -32603, "spawnFailed", "Not a directory (os error 20)", false},
		{"native MXC", func(p map[string]any) { p["sandbox"] = mxc }, -32602, "sandboxUnavailable", "native MXC is unavailable on this executor", false},
		{"empty argv", func(p map[string]any) { p["argv"] = []string{} }, -32602, "", "argv must not be empty", true},
	}
	for i, c := range cases {
		p := e.startParams("k", false, "true")
		c.edit(p)
		req, _ := json.Marshal(map[string]any{"id": 1000 + i, "method": "process/start", "params": p})
		if err := e.c.SendRaw(e.ctx, req); err != nil {
			e.t.Fatal(err)
		}
		m, err := e.c.NextOther(e.ctx)
		if err != nil {
			e.t.Fatalf("%s: %v", c.name, err)
		}
		msg, _ := json.Marshal(c.msg)
		want := fmt.Sprintf(`{"code":%d,"message":%s}`, c.code, msg)
		if kinds && !c.noKey {
			want = fmt.Sprintf(`{"code":%d,"data":{"kind":%q},"message":%s}`, c.code, c.kind, msg)
		}
		if got := string(m.errorObject()); got != want {
			e.t.Errorf("%s: error object\n got %s\nwant %s", c.name, got, want)
		}
	}
	// None of the failures consumed the id.
	e.start("k", false, "true")
	e.closed("k")
}

// errorObject is the "error" member of a message as received.
func (m *Msg) errorObject() []byte {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	_ = json.Unmarshal(m.Raw, &v)
	return v.Error
}

func init() {
	scenarios = append(scenarios, scenario{name: "shell-snapshot-errors", run: shellSnapshotErrors})
}

// shellSnapshotErrors: process/start's shellSnapshot validation, as the
// reference words it; a snapshot on an argv that is not [shell, -lc, …]
// is ignored, even for an unsupported shell (the argv check comes first).
func shellSnapshotErrors(e *env) {
	snap := func(id, scope, name string, argv ...string) map[string]any {
		p := e.startParams(id, false, argv...)
		p["shellSnapshot"] = map[string]any{"scopeId": scope, "shell": map[string]any{"name": name, "path": "/bin/bash"}}
		return p
	}
	e.callErr("process/start", snap("s", "", "bash", "/bin/bash", "-lc", "true"), -32602, "shell snapshot scope must be non-empty and at most 256 bytes")
	e.callErr("process/start", snap("s", string(bytes.Repeat([]byte("s"), 257)), "bash", "/bin/bash", "-lc", "true"), -32602, "shell snapshot scope must be non-empty and at most 256 bytes")
	e.callErr("process/start", snap("s", "scope", "fish", "/bin/bash", "-lc", "true"), -32602, "shell snapshots are unsupported for shell `fish`")
	e.call("process/start", snap("s", "scope", "fish", "/bin/bash", "-c", "true"))
	e.closed("s")
}

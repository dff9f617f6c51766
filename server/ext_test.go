package server

import (
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// TestProcessExtensionsWire drives process/list, process/terminate's
// graceMs and process/start's timeoutMs over the wire, and checks that
// timedOut appears only when true.
func TestProcessExtensionsWire(t *testing.T) {
	s := New(Config{})
	p := stdioPeer(t, s)
	p.init()

	// A plain process: its exited notification and read have no timedOut.
	p.call("process/start", startParams(t, "plain", false, "sh", "-c", "exit 2"))
	for _, ev := range p.events("plain") {
		if strings.Contains(ev.raw, "timedOut") {
			t.Errorf("plain process: %s", ev.raw)
		}
	}
	if r := p.call("process/read", map[string]any{"processId": "plain"}); strings.Contains(string(r), "timedOut") {
		t.Errorf("plain read: %s", r)
	}

	// timeoutMs.
	sp := startParams(t, "slow", false, "sleep", "30")
	sp["timeoutMs"] = 100
	p.call("process/start", sp)
	evs := p.events("slow")
	exited := evs[len(evs)-2]
	var ex protocol.ExitedNotification
	mustUnmarshal(t, exited.Params, &ex)
	if exited.Method != "process/exited" || ex.ExitCode != 137 || !ex.TimedOut || !strings.Contains(exited.raw, `"timedOut":true`) {
		t.Errorf("timed-out exit: %s", exited.raw)
	}
	var rr protocol.ReadResult
	mustUnmarshal(t, p.call("process/read", map[string]any{"processId": "slow"}), &rr)
	if !rr.TimedOut || rr.ExitCode == nil || *rr.ExitCode != 137 {
		t.Errorf("timed-out read: %+v", rr)
	}

	// graceMs: SIGTERM first, handled by the process.
	p.call("process/start", startParams(t, "polite", false, "sh", "-c", "trap 'exit 9' TERM; echo ready; while :; do sleep 0.05; done"))
	p.wait("ready", func(w wire) bool {
		return w.Method == "process/output" && strings.Contains(string(w.Params), `"polite"`)
	})

	// process/list while polite runs.
	var list protocol.ListResult
	mustUnmarshal(t, p.call("process/list", map[string]any{}), &list)
	states := map[string]string{}
	for _, in := range list.Processes {
		states[in.ProcessID] = in.State
	}
	if len(list.Processes) != 3 || states["polite"] != "running" || states["plain"] != "closed" || states["slow"] != "closed" {
		t.Errorf("list: %+v", list.Processes)
	}
	// Absent params too, as the other no-params methods.
	p.call("process/list", nil)

	var tr map[string]any
	mustUnmarshal(t, p.call("process/terminate", map[string]any{"processId": "polite", "graceMs": 60000}), &tr)
	if len(tr) != 1 || tr["running"] != true {
		t.Errorf("terminate result %v, want exactly {running: true}", tr)
	}
	evs = p.events("polite")
	ex = protocol.ExitedNotification{}
	mustUnmarshal(t, evs[len(evs)-2].Params, &ex)
	if ex.ExitCode != 9 || ex.TimedOut {
		t.Errorf("graceful exit: %s", evs[len(evs)-2].raw)
	}

	// Bounds are -32602 errors naming the member.
	for _, tc := range []struct {
		method string
		params map[string]any
		want   string
	}{
		{"process/terminate", map[string]any{"processId": "polite", "graceMs": protocol.MaxGraceMs + 1}, "graceMs"},
		{"process/terminate", map[string]any{"processId": "polite", "graceMs": -1}, "graceMs"},
		{"process/start", func() map[string]any { sp := startParams(t, "z", false, "true"); sp["timeoutMs"] = 0; return sp }(), "timeoutMs"},
		{"process/start", func() map[string]any {
			sp := startParams(t, "z", false, "true")
			sp["timeoutMs"] = protocol.MaxTimeoutMs + 1
			return sp
		}(), "timeoutMs"},
		{"process/list", map[string]any{"x": 1}, "expected unit"},
	} {
		code, msg := p.callErr(tc.method, tc.params)
		if code != protocol.CodeInvalidParams || !strings.Contains(msg, tc.want) {
			t.Errorf("%s %v: error %d %q, want -32602 naming %s", tc.method, tc.params, code, msg, tc.want)
		}
	}

	// The capabilities say so.
	var info protocol.EnvironmentInfo
	mustUnmarshal(t, p.call("environment/info", nil), &info)
	for _, k := range []string{"processList", "terminateGrace", "processTimeout"} {
		if !info.Capabilities[k] {
			t.Errorf("capability %s not advertised: %v", k, info.Capabilities)
		}
	}
}

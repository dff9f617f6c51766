package interop

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"time"
)

// scenarios run on every target and transport. Where we diverge from the
// reference on purpose (README "Divergences"), the scenario says so and
// checks each side's documented behaviour.
var scenarios = []scenario{
	{name: "lifecycle", raw: true, run: lifecycle},
	{name: "malformed", run: malformed},
	{name: "request-ids", run: requestIDs},
	{name: "unknown-notification", run: unknownNotification},
	{name: "initialized-early", raw: true, run: initializedEarly},
	{name: "stray-response", run: strayResponse},
	{name: "errors", run: errorCodes},
	{name: "process-pipes", run: processPipes},
	{name: "process-pty", run: processPTY},
	{name: "process-read", run: processRead},
	{name: "process-read-wait", run: processReadWait},
	{name: "retained-window", run: retainedWindow},
	{name: "write-echo", run: writeEcho},
	{name: "write-pty", run: writePTY},
	{name: "write-status", run: writeStatus},
	{name: "signal-interrupt", run: signalInterrupt},
	{name: "signal-names", run: signalNames},
	{name: "terminate", run: terminate},
	{name: "duplicate-process-id", run: duplicateID},
	{name: "bad-cwd", run: badCwd},
	{name: "missing-program", run: missingProgram},
	{name: "fs-files", run: fsFiles},
	{name: "fs-directories", run: fsDirectories},
	{name: "fs-copy-remove", run: fsCopyRemove},
	{name: "fs-blocks", run: fsBlocks},
	{name: "fs-remove-root-refused", oursOnly: true, run: fsRemoveRoot},
	{name: "fs-watch-missing", run: fsWatchMissing},
}

func lifecycle(e *env) {
	start := e.startParams("p", false, "true")
	// Params are checked before the lifecycle.
	e.callErr("process/start", map[string]any{}, -32602, "processId")
	e.callErr("process/start", start, -32600, "client must call initialize before using exec methods")
	e.callErr("fs/readFile", map[string]any{"path": e.uri("x")}, -32600, "client must call initialize before using filesystem methods")
	e.callErr("initialize", map[string]any{}, -32602, "clientName")
	r := e.call("initialize", map[string]any{"clientName": "interop"})
	if id, _ := r["sessionId"].(string); id == "" {
		e.t.Fatalf("initialize: no sessionId in %v", r)
	}
	info, _ := r["environmentInfo"].(map[string]any)
	if info == nil || info["platformOs"] != "linux" {
		e.t.Fatalf("initialize: environmentInfo.platformOs want linux, got %v", r["environmentInfo"])
	}
	e.callErr("process/start", start, -32600, "client must send initialized before using exec methods")
	e.callErr("initialize", map[string]any{"clientName": "interop"}, -32600, "initialize may only be sent once per connection")
	if err := e.c.Notify(e.ctx, "initialized", map[string]any{}); err != nil {
		e.t.Fatal(err)
	}
	if st := e.call("environment/status", nil); st["status"] != "ready" {
		e.t.Fatalf("environment/status: %v", st)
	}
	e.start("p", false, "true")
	if code := exitCode(e.closed("p")); code != 0 {
		e.t.Fatalf("true exited %d", code)
	}
}

// expectIDMinus1 reads the next unsolicited message: an error with id -1
// and code -32600.
func (e *env) expectIDMinus1(sent string) {
	e.t.Helper()
	m, err := e.c.NextOther(e.ctx)
	if err != nil {
		e.t.Fatalf("after %s: %v", sent, err)
	}
	if string(m.ID) != "-1" || m.Error == nil || m.Error.Code != -32600 {
		e.t.Fatalf("after %s: want an error with id -1 and code -32600, got %s", sent, m.Raw)
	}
}

func malformed(e *env) {
	for _, in := range []string{`not json`, `{bad`, `42`, `"str"`, `[]`, `[{"id":1,"method":"environment/status"}]`, `{"id":9}`} {
		if err := e.c.SendRaw(e.ctx, []byte(in)); err != nil {
			e.t.Fatal(err)
		}
		e.expectIDMinus1(in)
	}
	// The connection goes on.
	if st := e.call("environment/status", nil); st["status"] != "ready" {
		e.t.Fatalf("environment/status after malformed input: %v", st)
	}
}

func requestIDs(e *env) {
	for _, id := range []string{`"abc"`, `""`, `0`, `-7`, `9007199254740993`, `"9"`} {
		in := `{"id":` + id + `,"method":"environment/status"}`
		if err := e.c.SendRaw(e.ctx, []byte(in)); err != nil {
			e.t.Fatal(err)
		}
		m, err := e.c.NextOther(e.ctx)
		if err != nil {
			e.t.Fatalf("%s: %v", in, err)
		}
		if string(m.ID) != id || m.Error != nil {
			e.t.Fatalf("%s: want a result echoing id %s, got %s", in, id, m.Raw)
		}
	}
	for _, id := range []string{`null`, `1.5`, `18446744073709551616`, `true`, `{"a":1}`, `[1]`} {
		in := `{"id":` + id + `,"method":"environment/status"}`
		if err := e.c.SendRaw(e.ctx, []byte(in)); err != nil {
			e.t.Fatal(err)
		}
		e.expectIDMinus1(in)
	}
}

// expectStopsServing checks the reference's reaction to a message it
// treats as fatal: over ws it closes the connection, over stdio it answers
// nothing more (stdout stays open until stdin ends). Either way a request
// sent afterwards gets no answer.
func (e *env) expectStopsServing(after string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	if m, err := e.c.CallMsg(ctx, "environment/status", nil); err == nil {
		e.t.Fatalf("reference answered after %s: %s", after, m.Raw)
	}
}

// unknownNotification: a notification other than `initialized`.
// Divergence: we answer id -1 -32600 and stay open; the reference stops
// serving the connection without a word.
func unknownNotification(e *env) {
	if err := e.c.Notify(e.ctx, "foo/bar", map[string]any{}); err != nil {
		e.t.Fatal(err)
	}
	if e.tg.ref {
		e.expectStopsServing("an unknown notification")
		return
	}
	e.expectIDMinus1("notification foo/bar")
	if st := e.call("environment/status", nil); st["status"] != "ready" {
		e.t.Fatalf("environment/status after the notification: %v", st)
	}
}

// initializedEarly: `initialized` before `initialize`.
// Divergence: we answer id -1 -32600 and the lifecycle goes on; the
// reference stops serving the connection.
func initializedEarly(e *env) {
	if err := e.c.Notify(e.ctx, "initialized", map[string]any{}); err != nil {
		e.t.Fatal(err)
	}
	if e.tg.ref {
		e.expectStopsServing("`initialized` before `initialize`")
		return
	}
	e.expectIDMinus1("initialized before initialize")
	if _, err := e.c.Initialize(e.ctx); err != nil {
		e.t.Fatalf("initialize after the early initialized: %v", err)
	}
	if st := e.call("environment/status", nil); st["status"] != "ready" {
		e.t.Fatalf("environment/status: %v", st)
	}
}

// strayResponse: a client response that answers no request.
// Divergence: we answer id -1 -32600 and stay open; the reference stops
// serving the connection.
func strayResponse(e *env) {
	if err := e.c.SendRaw(e.ctx, []byte(`{"id":77,"result":{}}`)); err != nil {
		e.t.Fatal(err)
	}
	if e.tg.ref {
		e.expectStopsServing("a response to no request")
		return
	}
	e.expectIDMinus1("a response to no request")
	if st := e.call("environment/status", nil); st["status"] != "ready" {
		e.t.Fatalf("environment/status: %v", st)
	}
}

func errorCodes(e *env) {
	e.callErr("foo/bar", map[string]any{}, -32601, "foo/bar")
	e.callErr("process/read", map[string]any{"processId": "nope"}, -32600, "unknown process id nope")
	e.callErr("process/read", map[string]any{}, -32602, "processId")
	e.callErr("process/read", nil, -32602, "")
	e.callErr("process/start", map[string]any{"processId": 7, "argv": []string{"true"}, "cwd": FileURI(e.dir), "env": map[string]string{}, "tty": false}, -32602, "")
	e.callErr("process/read", map[string]any{"processId": "x", "afterSeq": -1}, -32602, "")
	p := e.startParams("rel", false, "true")
	p["cwd"] = "relative/dir"
	e.callErr("process/start", p, -32602, "")
	p["cwd"] = "http://example.invalid/x"
	e.callErr("process/start", p, -32602, "")
	e.callErr("fs/readFile", map[string]any{"path": e.uri("missing")}, -32004, "No such file or directory (os error 2)")
	e.callErr("fs/readFile", map[string]any{"path": "not-a-uri"}, -32602, "")
	e.callErr("environment/status", map[string]any{"x": 1}, -32602, "")
}

func processPipes(e *env) {
	e.start("p", false, "sh", "-c", "echo out; echo err >&2; exit 3")
	evs := e.closed("p")
	if code := exitCode(evs); code != 3 {
		e.t.Fatalf("exit code %d, want 3", code)
	}
	out := Output(evs)
	if string(out["stdout"]) != "out\n" || string(out["stderr"]) != "err\n" {
		e.t.Fatalf("stdout %q stderr %q", out["stdout"], out["stderr"])
	}
	// Exactly the child environment given, and the cwd given.
	e.start("env", false, "sh", "-c", "pwd; echo \"$LC_ALL\"")
	got := string(Output(e.closed("env"))["stdout"])
	if want := e.dir + "\nC\n"; got != want {
		e.t.Fatalf("pwd/env output %q, want %q", got, want)
	}
}

func processPTY(e *env) {
	e.start("t", true, "sh", "-c", "test -t 0 && test -t 1 && printf 'a\\nb'; exit 4")
	evs := e.closed("t")
	if code := exitCode(evs); code != 4 {
		e.t.Fatalf("exit code %d, want 4", code)
	}
	for _, ev := range evs {
		if ev.Method == "process/output" && ev.Stream != "pty" {
			e.t.Fatalf("PTY output on stream %q", ev.Stream)
		}
	}
	// ONLCR: the terminal turns \n into \r\n.
	if got := string(Output(evs)["pty"]); got != "a\r\nb" {
		e.t.Fatalf("PTY output %q, want %q", got, "a\r\nb")
	}
}

type readResult struct {
	Chunks []struct {
		Seq    uint64 `json:"seq"`
		Stream string `json:"stream"`
		Chunk  []byte `json:"chunk"`
	} `json:"chunks"`
	NextSeq  uint64  `json:"nextSeq"`
	Exited   bool    `json:"exited"`
	ExitCode *int    `json:"exitCode"`
	Closed   bool    `json:"closed"`
	Failure  *string `json:"failure"`
}

func (e *env) read(params map[string]any) readResult {
	e.t.Helper()
	var r readResult
	e.callInto("process/read", params, &r)
	return r
}

func processRead(e *env) {
	e.start("r", false, "sh", "-c", "printf aaaa; sleep 0.05; printf bbbb >&2; sleep 0.05; printf cccc")
	evs := e.closed("r")
	var outs []Event
	for _, ev := range evs {
		if ev.Method == "process/output" {
			outs = append(outs, ev)
		}
	}
	last := evs[len(evs)-1].Seq
	all := e.read(map[string]any{"processId": "r"})
	if !all.Exited || !all.Closed || all.ExitCode == nil || *all.ExitCode != 0 || all.Failure != nil {
		e.t.Fatalf("read after close: %+v", all)
	}
	if all.NextSeq != last+1 {
		e.t.Fatalf("nextSeq %d, want %d", all.NextSeq, last+1)
	}
	// Retained chunks are exactly the pushed chunks.
	if len(all.Chunks) != len(outs) {
		e.t.Fatalf("read returned %d chunks, %d were pushed", len(all.Chunks), len(outs))
	}
	for i, ch := range all.Chunks {
		if ch.Seq != outs[i].Seq || ch.Stream != outs[i].Stream || !bytes.Equal(ch.Chunk, outs[i].Chunk) {
			e.t.Fatalf("chunk %d: read %d/%s/%q, pushed %d/%s/%q", i, ch.Seq, ch.Stream, ch.Chunk, outs[i].Seq, outs[i].Stream, outs[i].Chunk)
		}
	}
	out := Output(evs)
	if string(out["stdout"]) != "aaaacccc" || string(out["stderr"]) != "bbbb" {
		e.t.Fatalf("stdout %q stderr %q", out["stdout"], out["stderr"])
	}
	// afterSeq skips what was seen.
	tail := e.read(map[string]any{"processId": "r", "afterSeq": outs[0].Seq})
	if len(tail.Chunks) != len(outs)-1 {
		e.t.Fatalf("afterSeq %d: %d chunks, want %d", outs[0].Seq, len(tail.Chunks), len(outs)-1)
	}
	// maxBytes never splits a chunk and always returns the first one.
	one := e.read(map[string]any{"processId": "r", "maxBytes": 1})
	if len(one.Chunks) != 1 || one.Chunks[0].Seq != outs[0].Seq || one.NextSeq != outs[0].Seq+1 {
		e.t.Fatalf("maxBytes 1: %+v", one)
	}
	// Nothing after the last event; the state still says closed.
	none := e.read(map[string]any{"processId": "r", "afterSeq": last, "waitMs": 2000})
	if len(none.Chunks) != 0 || !none.Closed {
		e.t.Fatalf("afterSeq %d: %+v", last, none)
	}
}

// retainedWindow: 3 MiB of output; process/read from 0 returns only the
// newest whole chunks, at most 1 MiB, exactly as they were pushed, up to the
// last one.
func retainedWindow(e *env) {
	const total = 3 << 20
	e.start("w", false, "head", "-c", "3145728", "/dev/zero")
	evs := e.closed("w")
	var outs []Event
	pushed := 0
	for _, ev := range evs {
		if ev.Method == "process/output" {
			outs = append(outs, ev)
			pushed += len(ev.Chunk)
		}
	}
	if pushed != total {
		e.t.Fatalf("pushed %d bytes, want %d", pushed, total)
	}
	r := e.read(map[string]any{"processId": "w"})
	kept := 0
	for _, ch := range r.Chunks {
		kept += len(ch.Chunk)
	}
	if len(r.Chunks) == 0 || len(r.Chunks) == len(outs) || kept > 1<<20 {
		e.t.Fatalf("read from 0 returned %d chunks (%d bytes) of %d pushed: want the newest ones, at most 1 MiB", len(r.Chunks), kept, len(outs))
	}
	tail := outs[len(outs)-len(r.Chunks):]
	for i, ch := range r.Chunks {
		if ch.Seq != tail[i].Seq || !bytes.Equal(ch.Chunk, tail[i].Chunk) {
			e.t.Fatalf("retained chunk %d (seq %d) is not the pushed chunk seq %d", i, ch.Seq, tail[i].Seq)
		}
	}
}

func processReadWait(e *env) {
	e.startStdin("c", "cat")
	// Nothing to read: waitMs elapses and the read comes back empty.
	r := e.read(map[string]any{"processId": "c", "afterSeq": 0, "waitMs": 150})
	if len(r.Chunks) != 0 || r.Exited || r.Closed || r.ExitCode != nil {
		e.t.Fatalf("idle long poll: %+v", r)
	}
	e.call("process/write", map[string]any{"processId": "c", "chunk": B64([]byte("x")), "writeId": "w1"})
	r = e.read(map[string]any{"processId": "c", "afterSeq": 0, "waitMs": 10000})
	if len(r.Chunks) == 0 || string(r.Chunks[0].Chunk) != "x" {
		e.t.Fatalf("long poll after a write: %+v", r)
	}
	e.call("process/terminate", map[string]any{"processId": "c"})
	e.closed("c")
}

func writeEcho(e *env) {
	e.startStdin("c", "cat")
	write := func(id, s string) {
		var r struct {
			Status string `json:"status"`
		}
		e.callInto("process/write", map[string]any{"processId": "c", "chunk": B64([]byte(s)), "writeId": id}, &r)
		if r.Status != "accepted" {
			e.t.Fatalf("write %s: status %q", id, r.Status)
		}
	}
	write("w1", "hello\n")
	if _, err := e.c.WaitOutput(e.ctx, "c", []byte("hello\n")); err != nil {
		e.t.Fatal(err)
	}
	write("w1", "hello\n") // a retry: accepted, not written again
	write("w2", "bye\n")
	got, err := e.c.WaitOutput(e.ctx, "c", []byte("bye\n"))
	if err != nil {
		e.t.Fatal(err)
	}
	if string(got) != "hello\nbye\n" {
		e.t.Fatalf("output %q: a repeated writeId was written again", got)
	}
	// Divergence: a write without writeId is accepted by us, -32602 on the reference.
	noID := map[string]any{"processId": "c", "chunk": B64([]byte("z\n"))}
	if e.tg.ref {
		e.callErr("process/write", noID, -32602, "writeId")
	} else {
		if r := e.call("process/write", noID); r["status"] != "accepted" {
			e.t.Fatalf("write without writeId: %v", r)
		}
		if _, err := e.c.WaitOutput(e.ctx, "c", []byte("z\n")); err != nil {
			e.t.Fatal(err)
		}
	}
	e.callErr("process/write", map[string]any{"processId": "c", "chunk": B64([]byte("y")), "writeId": ""}, -32602, "writeId must not be empty")
	e.callErr("process/write", map[string]any{"processId": "c", "chunk": "!!", "writeId": "w3"}, -32602, "")
	e.call("process/terminate", map[string]any{"processId": "c"})
	if code := exitCode(e.closed("c")); code != 137 {
		e.t.Fatalf("terminated cat exited %d, want 137", code)
	}
}

func writePTY(e *env) {
	e.start("t", true, "sh", "-c", "stty raw -echo; echo ready; cat")
	if _, err := e.c.WaitOutput(e.ctx, "t", []byte("ready")); err != nil {
		e.t.Fatal(err)
	}
	e.call("process/write", map[string]any{"processId": "t", "chunk": B64([]byte("ping")), "writeId": "w1"})
	// raw -echo: the bytes come back once, exactly as written.
	out, err := e.c.WaitOutput(e.ctx, "t", []byte("ping"))
	if err != nil {
		e.t.Fatal(err)
	}
	if n := bytes.Count(out, []byte("ping")); n != 1 {
		e.t.Fatalf("PTY output %q: ping seen %d times", out, n)
	}
	e.call("process/terminate", map[string]any{"processId": "t"})
	e.closed("t")
}

func writeStatus(e *env) {
	status := func(id string) string {
		var r struct {
			Status string `json:"status"`
		}
		e.callInto("process/write", map[string]any{"processId": id, "chunk": B64([]byte("x")), "writeId": "w"}, &r)
		return r.Status
	}
	if s := status("nope"); s != "unknownProcess" {
		e.t.Fatalf("write to an unknown process: %q", s)
	}
	e.start("s", false, "sleep", "30")
	if s := status("s"); s != "stdinClosed" {
		e.t.Fatalf("write to a process without pipeStdin: %q", s)
	}
	e.call("process/terminate", map[string]any{"processId": "s"})
	e.closed("s")
}

// waitReady waits for a process to print "ready".
func (e *env) waitReady(id string) {
	e.t.Helper()
	if _, err := e.c.WaitOutput(e.ctx, id, []byte("ready")); err != nil {
		e.t.Fatal(err)
	}
}

const trapScript = `trap 'echo got; exit 7' INT; echo ready; while :; do sleep 0.05; done`

func signalInterrupt(e *env) {
	for _, tty := range []bool{false, true} {
		id := "pipes"
		if tty {
			id = "pty"
		}
		e.start(id, tty, "sh", "-c", trapScript)
		e.waitReady(id)
		if r := e.call("process/signal", map[string]any{"processId": id, "signal": "interrupt"}); len(r) != 0 {
			e.t.Fatalf("signal result %v, want {}", r)
		}
		evs := e.closed(id)
		if code := exitCode(evs); code != 7 {
			e.t.Fatalf("%s: exit %d after interrupt, want 7 (the trap's)", id, code)
		}
		all := Output(evs)
		if !bytes.Contains(append(all["stdout"], all["pty"]...), []byte("got")) {
			e.t.Fatalf("%s: trap did not run: %q", id, all)
		}
	}
	// Unknown processes are not an error.
	e.call("process/signal", map[string]any{"processId": "nope", "signal": "interrupt"})
}

// signalNames: divergence: we accept more signal names than "interrupt".
func signalNames(e *env) {
	e.start("s", false, "sleep", "30")
	params := map[string]any{"processId": "s", "signal": "terminate"}
	if e.tg.ref {
		e.callErr("process/signal", params, -32602, "unknown variant `terminate`")
		e.call("process/terminate", map[string]any{"processId": "s"})
		e.closed("s")
		return
	}
	e.call("process/signal", params)
	if code := exitCode(e.closed("s")); code != 143 {
		e.t.Fatalf("sleep exited %d after terminate, want 143", code)
	}
	e.callErr("process/signal", map[string]any{"processId": "s", "signal": "bogus"}, -32602, "bogus")
}

func terminate(e *env) {
	// The whole group dies: the background sleep must not keep closed away.
	e.start("t", false, "sh", "-c", "sleep 60 & echo ready; wait")
	e.waitReady("t")
	var r struct {
		Running bool `json:"running"`
	}
	e.callInto("process/terminate", map[string]any{"processId": "t"}, &r)
	if !r.Running {
		e.t.Fatal("terminate of a running process: running false")
	}
	if code := exitCode(e.closed("t")); code != 137 {
		e.t.Fatalf("exit code %d, want 137", code)
	}
	e.callInto("process/terminate", map[string]any{"processId": "t"}, &r)
	if r.Running {
		e.t.Fatal("terminate of an exited process: running true")
	}
	e.callInto("process/terminate", map[string]any{"processId": "nope"}, &r)
	if r.Running {
		e.t.Fatal("terminate of an unknown process: running true")
	}
}

func duplicateID(e *env) {
	e.start("d", false, "sleep", "30")
	e.callErr("process/start", e.startParams("d", false, "true"), -32600, "process d already exists")
	e.call("process/terminate", map[string]any{"processId": "d"})
	e.closed("d")
	// A closed process keeps its id for the retention period.
	e.callErr("process/start", e.startParams("d", false, "true"), -32600, "process d already exists")
	// The empty id is a valid id.
	e.start("", false, "true")
	e.closed("")
}

func badCwd(e *env) {
	p := e.startParams("b", false, "true")
	p["cwd"] = e.uri("missing")
	e.callErr("process/start", p, -32603, "No such file or directory (os error 2)")
	if err := os.WriteFile(filepath.Join(e.dir, "file"), nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
	p["cwd"] = e.uri("file")
	e.callErr("process/start", p, -32603, "Not a directory (os error 20)")
	// A failed start does not consume the id.
	e.start("b", false, "true")
	e.closed("b")
}

func missingProgram(e *env) {
	e.callErr("process/start", e.startParams("m", false, filepath.Join(e.dir, "nope")), -32603, "No such file or directory (os error 2)")
	e.callErr("process/start", e.startParams("m", false, "no-such-program-exec-server-interop"), -32603, "No such file or directory (os error 2)")
	if err := os.WriteFile(filepath.Join(e.dir, "noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.callErr("process/start", e.startParams("m", false, filepath.Join(e.dir, "noexec")), -32603, "Permission denied (os error 13)")
	p := e.startParams("m", false)
	p["argv"] = []string{}
	e.callErr("process/start", p, -32602, "argv must not be empty")
	e.start("m", false, "true")
	e.closed("m")
}

func (e *env) readFile(name string) []byte {
	e.t.Helper()
	var r struct {
		DataBase64 string `json:"dataBase64"`
	}
	e.callInto("fs/readFile", map[string]any{"path": e.uri(name)}, &r)
	b, err := base64.StdEncoding.DecodeString(r.DataBase64)
	if err != nil {
		e.t.Fatalf("fs/readFile %s: %v", name, err)
	}
	return b
}

func fsFiles(e *env) {
	data := []byte("hello\x00world\n")
	e.call("fs/writeFile", map[string]any{"path": e.uri("a.txt"), "dataBase64": B64(data)})
	if got, _ := os.ReadFile(filepath.Join(e.dir, "a.txt")); !bytes.Equal(got, data) {
		e.t.Fatalf("file on disk %q, want %q", got, data)
	}
	if got := e.readFile("a.txt"); !bytes.Equal(got, data) {
		e.t.Fatalf("fs/readFile %q, want %q", got, data)
	}
	// Create or truncate.
	e.call("fs/writeFile", map[string]any{"path": e.uri("a.txt"), "dataBase64": B64([]byte("x"))})
	if got := e.readFile("a.txt"); string(got) != "x" {
		e.t.Fatalf("after overwrite: %q", got)
	}
	e.call("fs/writeFile", map[string]any{"path": e.uri("empty"), "dataBase64": ""})
	if got := e.readFile("empty"); len(got) != 0 {
		e.t.Fatalf("empty file read as %q", got)
	}
	var md struct {
		IsDirectory  bool  `json:"isDirectory"`
		IsFile       bool  `json:"isFile"`
		IsSymlink    bool  `json:"isSymlink"`
		Size         int64 `json:"size"`
		ModifiedAtMs int64 `json:"modifiedAtMs"`
	}
	e.callInto("fs/getMetadata", map[string]any{"path": e.uri("a.txt")}, &md)
	if !md.IsFile || md.IsDirectory || md.IsSymlink || md.Size != 1 || md.ModifiedAtMs < time.Now().Add(-time.Hour).UnixMilli() {
		e.t.Fatalf("getMetadata a.txt: %+v", md)
	}
	if err := os.Symlink("a.txt", filepath.Join(e.dir, "link")); err != nil {
		e.t.Fatal(err)
	}
	e.callInto("fs/getMetadata", map[string]any{"path": e.uri("link")}, &md)
	if !md.IsFile || !md.IsSymlink {
		e.t.Fatalf("getMetadata of a symlink to a file: %+v", md)
	}
	e.callErr("fs/getMetadata", map[string]any{"path": e.uri("missing")}, -32004, "No such file or directory (os error 2)")
	e.callErr("fs/readFile", map[string]any{"path": FileURI(e.dir)}, -32600, "is not a file")
	e.callErr("fs/readFile", map[string]any{"path": e.uri("a.txt/x")}, -32603, "Not a directory (os error 20)")
	e.callErr("fs/writeFile", map[string]any{"path": e.uri("b.txt"), "dataBase64": "aGk"}, -32600, "fs/writeFile requires valid base64 dataBase64")
	e.callErr("fs/writeFile", map[string]any{"path": e.uri("missing/b.txt"), "dataBase64": ""}, -32004, "No such file or directory (os error 2)")
	e.callErr("fs/writeFile", map[string]any{"path": FileURI(e.dir), "dataBase64": ""}, -32603, "Is a directory (os error 21)")
	e.callErr("fs/readFile", map[string]any{"path": "file://otherhost" + filepath.Join(e.dir, "a.txt")}, -32600, "")
}

func fsDirectories(e *env) {
	e.call("fs/createDirectory", map[string]any{"path": e.uri("d/e/f")})
	e.call("fs/createDirectory", map[string]any{"path": e.uri("d/e/f")}) // mkdir -p: existing is fine
	e.callErr("fs/createDirectory", map[string]any{"path": e.uri("d/e/f"), "recursive": false}, -32603, "File exists (os error 17)")
	e.callErr("fs/createDirectory", map[string]any{"path": e.uri("x/y"), "recursive": false}, -32004, "")
	if err := os.WriteFile(filepath.Join(e.dir, "d", "file.txt"), []byte("1"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(e.dir, "d", "dangling")); err != nil {
		e.t.Fatal(err)
	}
	var r struct {
		Entries []struct {
			FileName    string `json:"fileName"`
			IsDirectory bool   `json:"isDirectory"`
			IsFile      bool   `json:"isFile"`
		} `json:"entries"`
	}
	e.callInto("fs/readDirectory", map[string]any{"path": e.uri("d")}, &r)
	got := map[string]string{}
	for _, en := range r.Entries {
		kind := "other"
		if en.IsDirectory {
			kind = "dir"
		} else if en.IsFile {
			kind = "file"
		}
		got[en.FileName] = kind
	}
	if len(got) != 2 || got["e"] != "dir" || got["file.txt"] != "file" {
		e.t.Fatalf("readDirectory d: %+v (dangling links are omitted)", r.Entries)
	}
	e.callErr("fs/readDirectory", map[string]any{"path": e.uri("d/file.txt")}, -32603, "Not a directory (os error 20)")
	e.callErr("fs/readDirectory", map[string]any{"path": e.uri("missing")}, -32004, "")
	var md struct {
		IsDirectory bool `json:"isDirectory"`
	}
	e.callInto("fs/getMetadata", map[string]any{"path": e.uri("d/e")}, &md)
	if !md.IsDirectory {
		e.t.Fatal("getMetadata d/e: not a directory")
	}
}

func fsCopyRemove(e *env) {
	if err := os.MkdirAll(filepath.Join(e.dir, "src", "sub"), 0o755); err != nil {
		e.t.Fatal(err)
	}
	for name, data := range map[string]string{"src/a": "A", "src/sub/b": "B"} {
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte(data), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	e.call("fs/copy", map[string]any{"sourcePath": e.uri("src/a"), "destinationPath": e.uri("a2"), "recursive": false})
	if got := e.readFile("a2"); string(got) != "A" {
		e.t.Fatalf("copied file: %q", got)
	}
	e.callErr("fs/copy", map[string]any{"sourcePath": e.uri("src"), "destinationPath": e.uri("dst"), "recursive": false}, -32600, "fs/copy requires recursive: true when sourcePath is a directory")
	e.callErr("fs/copy", map[string]any{"sourcePath": e.uri("src"), "destinationPath": e.uri("dst")}, -32602, "recursive")
	e.callErr("fs/copy", map[string]any{"sourcePath": e.uri("src"), "destinationPath": e.uri("src/sub/in"), "recursive": true}, -32600, "fs/copy cannot copy a directory to itself or one of its descendants")
	e.callErr("fs/copy", map[string]any{"sourcePath": e.uri("missing"), "destinationPath": e.uri("x"), "recursive": true}, -32004, "")
	e.call("fs/copy", map[string]any{"sourcePath": e.uri("src"), "destinationPath": e.uri("dst"), "recursive": true})
	if got := e.readFile("dst/sub/b"); string(got) != "B" {
		e.t.Fatalf("recursive copy: dst/sub/b = %q", got)
	}

	e.callErr("fs/remove", map[string]any{"path": e.uri("dst"), "recursive": false}, -32603, "Directory not empty (os error 39)")
	e.call("fs/remove", map[string]any{"path": e.uri("dst")}) // defaults: recursive, force
	if _, err := os.Stat(filepath.Join(e.dir, "dst")); !os.IsNotExist(err) {
		e.t.Fatalf("dst still there after fs/remove: %v", err)
	}
	e.call("fs/remove", map[string]any{"path": e.uri("dst")}) // force: missing is fine
	e.callErr("fs/remove", map[string]any{"path": e.uri("dst"), "force": false}, -32004, "")
	e.call("fs/remove", map[string]any{"path": e.uri("a2"), "recursive": false})
	if _, err := os.Stat(filepath.Join(e.dir, "a2")); !os.IsNotExist(err) {
		e.t.Fatalf("a2 still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "src", "sub", "b")); err != nil {
		e.t.Fatalf("the source went missing: %v", err)
	}
}

func fsBlocks(e *env) {
	e.call("fs/open", map[string]any{"handleId": "w", "path": e.uri("blk"), "mode": "replace"})
	e.callErr("fs/open", map[string]any{"handleId": "w", "path": e.uri("other"), "mode": "replace"}, -32600, "file handle `w` already exists")
	first := bytes.Repeat([]byte{1}, 100)
	e.call("fs/writeBlock", map[string]any{"handleId": "w", "offset": 0, "chunk": B64(first)})
	e.call("fs/writeBlock", map[string]any{"handleId": "w", "offset": 200, "chunk": B64([]byte("end"))})
	e.callErr("fs/writeBlock", map[string]any{"handleId": "w", "offset": 0, "chunk": ""}, -32600, "file write block length must be between 1 and 1048576")
	e.callErr("fs/readBlock", map[string]any{"handleId": "w", "offset": 0, "len": 10}, -32603, "Bad file descriptor (os error 9)")
	e.call("fs/close", map[string]any{"handleId": "w"})
	e.call("fs/close", map[string]any{"handleId": "w"}) // idempotent

	want := append(append(append([]byte{}, first...), make([]byte, 100)...), "end"...)
	if got, _ := os.ReadFile(filepath.Join(e.dir, "blk")); !bytes.Equal(got, want) {
		e.t.Fatalf("file after block writes: %d bytes, want %d (hole zero-filled)", len(got), len(want))
	}
	e.call("fs/open", map[string]any{"handleId": "r", "path": e.uri("blk")})
	type block struct {
		Chunk []byte `json:"chunk"`
		EOF   bool   `json:"eof"`
	}
	var b block
	e.callInto("fs/readBlock", map[string]any{"handleId": "r", "offset": 0, "len": 150}, &b)
	if !bytes.Equal(b.Chunk, want[:150]) || b.EOF {
		e.t.Fatalf("readBlock 0+150: %d bytes eof=%v", len(b.Chunk), b.EOF)
	}
	e.callInto("fs/readBlock", map[string]any{"handleId": "r", "offset": 150, "len": 1 << 20}, &b)
	if !bytes.Equal(b.Chunk, want[150:]) || !b.EOF {
		e.t.Fatalf("readBlock 150+1MiB: %d bytes eof=%v", len(b.Chunk), b.EOF)
	}
	e.callInto("fs/readBlock", map[string]any{"handleId": "r", "offset": 10000, "len": 10}, &b)
	if len(b.Chunk) != 0 || !b.EOF {
		e.t.Fatalf("readBlock past EOF: %d bytes eof=%v", len(b.Chunk), b.EOF)
	}
	e.callErr("fs/readBlock", map[string]any{"handleId": "r", "offset": 0, "len": 0}, -32600, "file read block length must be between 1 and 1048576")
	e.callErr("fs/readBlock", map[string]any{"handleId": "r", "offset": 0, "len": 1<<20 + 1}, -32600, "file read block length must be between 1 and 1048576")
	e.callErr("fs/readBlock", map[string]any{"handleId": "r", "offset": -1, "len": 1}, -32602, "")
	e.callErr("fs/writeBlock", map[string]any{"handleId": "r", "offset": 0, "chunk": B64([]byte("x"))}, -32603, "Bad file descriptor (os error 9)")
	e.callErr("fs/readBlock", map[string]any{"handleId": "nope", "offset": 0, "len": 1}, -32004, "unknown file handle `nope`")
	e.callErr("fs/open", map[string]any{"handleId": "m", "path": e.uri("missing")}, -32004, "")
	e.callErr("fs/open", map[string]any{"handleId": "d", "path": FileURI(e.dir)}, -32600, "is not a file")
	e.call("fs/close", map[string]any{"handleId": "r"})
}

// fsRemoveRoot: our server refuses to remove the root. NEVER sent to the
// reference, which would delete the machine (the scenario is oursOnly and
// env.guard refuses it as well).
func fsRemoveRoot(e *env) {
	for _, p := range []string{"file:///", "file:///.", "file:///tmp/.."} {
		e.callErr("fs/remove", map[string]any{"path": p}, -32600, "")
	}
}

// nextNotification waits up to d for the next unsolicited message.
func (e *env) nextNotification(d time.Duration) *Msg {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	m, err := e.c.NextOther(ctx)
	if err != nil {
		return nil
	}
	return m
}

// expectMissingChanged checks that the next message is fs/missingChanged
// for id, exactly as the reference words it.
func (e *env) expectMissingChanged(id int) {
	e.t.Helper()
	m := e.nextNotification(5 * time.Second)
	if m == nil {
		e.t.Fatalf("no fs/missingChanged for watch %d", id)
	}
	want := fmt.Sprintf(`{"method":"fs/missingChanged","params":{"watchId":%d}}`, id)
	var got, exp any
	_ = json.Unmarshal(m.Raw, &got)
	_ = json.Unmarshal([]byte(want), &exp)
	if !reflect.DeepEqual(got, exp) {
		e.t.Fatalf("got %s, want %s", m.Raw, want)
	}
}

// expectQuiet checks that nothing is pushed for a while (an inotify event
// arrives in well under a millisecond; 300 ms is ample).
func (e *env) expectQuiet(after string) {
	e.t.Helper()
	if m := e.nextNotification(300 * time.Millisecond); m != nil {
		e.t.Fatalf("after %s: unexpected %s", after, m.Raw)
	}
}

func (e *env) watchMissing(params map[string]any) bool {
	e.t.Helper()
	r := e.call("fs/watchMissing", params)
	w, ok := r["watching"].(bool)
	if !ok || len(r) != 1 {
		e.t.Fatalf("fs/watchMissing %s: result %v", mustJSON(params), r)
	}
	return w
}

func fsWatchMissing(e *env) {
	mk := func(name string) {
		if err := os.Mkdir(filepath.Join(e.dir, name), 0o755); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, c := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"watchId": "x", "missing": []string{}}, `invalid type: string "x", expected u64`},
		{map[string]any{"missing": []string{}}, "missing field `watchId`"},
		{map[string]any{"watchId": 1}, "missing field `missing`"},
		{map[string]any{"watchId": 1, "missing": []string{"rel/a"}}, "invalid URI: relative URL without a base"},
		{map[string]any{"watchId": 1, "missing": []string{e.dir}}, "invalid URI: relative URL without a base"},
		{map[string]any{"watchId": 1, "missing": []string{}, "present": []string{e.uri("a")}}, "invalid type: sequence, expected a string"},
	} {
		// The whole text, not a part: codex shows it as it is.
		if re := e.callErr("fs/watchMissing", c.params, -32602, c.want); re.Message != c.want {
			e.t.Errorf("fs/watchMissing %s: message %q, want exactly %q", mustJSON(c.params), re.Message, c.want)
		}
	}
	// The first watchId must be above 0.
	if e.watchMissing(map[string]any{"watchId": 0, "missing": []string{e.uri("q")}}) {
		e.t.Fatal("watchId 0 answered watching")
	}
	// Nothing to watch; present alone is not watched.
	if e.watchMissing(map[string]any{"watchId": 1, "missing": []string{}, "present": nil}) {
		e.t.Fatal("empty watch answered watching")
	}
	if e.watchMissing(map[string]any{"watchId": 2, "missing": []string{}, "present": e.uri("")}) {
		e.t.Fatal("present alone answered watching")
	}
	// A missing ancestor's creation fires, once.
	if !e.watchMissing(map[string]any{"watchId": 12, "missing": []string{e.uri("a/b"), e.uri("c")}, "present": nil}) {
		e.t.Fatal("watch 12 not watching")
	}
	e.expectQuiet("watch 12")
	mk("a")
	e.expectMissingChanged(12)
	mk("c")
	e.expectQuiet("a second creation")
	// Not greater than the current watchId, an existing path: false.
	if e.watchMissing(map[string]any{"watchId": 12, "missing": []string{e.uri("x")}}) {
		e.t.Fatal("watchId 12 again answered watching")
	}
	if e.watchMissing(map[string]any{"watchId": 13, "missing": []string{e.uri("a")}}) {
		e.t.Fatal("an existing missing path answered watching")
	}
	// A higher watchId replaces the watch in force.
	if !e.watchMissing(map[string]any{"watchId": 15, "missing": []string{e.uri("y")}}) {
		e.t.Fatal("watch 15 not watching")
	}
	if !e.watchMissing(map[string]any{"watchId": 16, "missing": []string{e.uri("z")}}) {
		e.t.Fatal("watch 16 not watching")
	}
	if e.watchMissing(map[string]any{"watchId": 14, "missing": []string{e.uri("w")}}) {
		e.t.Fatal("a lower watchId answered watching")
	}
	mk("y")
	e.expectQuiet("creating a replaced watch's path")
	mk("z")
	e.expectMissingChanged(16)
	// present: its modification fires; a missing present refuses.
	f := filepath.Join(e.dir, "f")
	if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if e.watchMissing(map[string]any{"watchId": 17, "missing": []string{e.uri("q")}, "present": e.uri("nope")}) {
		e.t.Fatal("a missing present answered watching")
	}
	// Only "does not exist" is missing: a path under a file is not.
	if e.watchMissing(map[string]any{"watchId": 18, "missing": []string{e.uri("f/x")}}) {
		e.t.Fatal("a path under a file answered watching")
	}
	if !e.watchMissing(map[string]any{"watchId": 19, "missing": []string{e.uri("q")}, "present": e.uri("f")}) {
		e.t.Fatal("watch 19 not watching")
	}
	if err := os.WriteFile(f, []byte("2"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.expectMissingChanged(19)
	// A chmod of present fires too.
	if !e.watchMissing(map[string]any{"watchId": 20, "missing": []string{e.uri("q")}, "present": e.uri("f")}) {
		e.t.Fatal("watch 20 not watching")
	}
	if err := os.Chmod(f, 0o600); err != nil {
		e.t.Fatal(err)
	}
	e.expectMissingChanged(20)
}

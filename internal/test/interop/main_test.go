package interop

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/testbin"
)

// target is one server binary the scenarios run against.
type target struct {
	name string
	bin  string
	ref  bool // the reference: `bin exec-server`, CODEX_HOME set

	wsOnce sync.Once
	ws     *Server
	wsErr  error
}

var targets []*target

// oursTarget is this project's server among targets (the reference may be
// absent; ours never is).
func oursTarget() *target {
	for _, tg := range targets {
		if !tg.ref {
			return tg
		}
	}
	return nil
}

func TestMain(m *testing.M) {
	flag.Parse()
	// Scenarios wait on servers far more than they compute; run more of
	// them at once than GOMAXPROCS unless the caller chose -parallel.
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "16")
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	defer testbin.SandboxState()()
	bin, err := testbin.ExecServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "interop: building our exec-server: %v\n", err)
		return 1
	}
	targets = append(targets, &target{name: "ours", bin: bin})
	if ref := os.Getenv("EXEC_SERVER_REFERENCE"); ref != "" {
		if _, err := os.Stat(ref); err != nil {
			fmt.Fprintf(os.Stderr, "interop: EXEC_SERVER_REFERENCE=%s: %v\n", ref, err)
			return 1
		}
		targets = append(targets, &target{name: "reference", bin: ref, ref: true})
	} else {
		fmt.Fprintln(os.Stderr, "interop: EXEC_SERVER_REFERENCE not set; scenarios run against our server only")
	}
	code := m.Run()
	for _, tg := range targets {
		if tg.ws != nil {
			tg.ws.Close()
		}
	}
	return code
}

func (tg *target) spec() Spec { return Spec{Name: tg.name, Bin: tg.bin, Reference: tg.ref} }

// wsServer is the target's shared websocket server: scenarios each open
// their own connection (and so their own session) on it.
func (tg *target) wsServer() (*Server, error) {
	tg.wsOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tg.ws, tg.wsErr = StartServer(ctx, tg.spec(), WebSocket)
	})
	return tg.ws, tg.wsErr
}

// env is what a scenario runs with: a connection, its own temp dir, and the
// target's identity for the scenarios that diverge on purpose.
type env struct {
	t   *testing.T
	ctx context.Context
	c   *Client
	tg  *target
	tr  Transport
	dir string
	// dial opens another connection to the same server (ws only; nil for stdio).
	dial func() *Client
}

// scenario is one protocol behaviour checked on every target and transport.
type scenario struct {
	name string
	// raw: the connection is handed over without initialize/initialized.
	raw bool
	// oursOnly: never sent to the reference (e.g. it would be destructive there).
	oursOnly bool
	run      func(e *env)
}

func TestScenarios(t *testing.T) {
	for _, tg := range targets {
		for _, tr := range []Transport{Stdio, WebSocket} {
			for _, sc := range scenarios {
				t.Run(tg.name+"/"+string(tr)+"/"+sc.name, func(t *testing.T) {
					if sc.oursOnly && tg.ref {
						t.Skip("checked on our server only (destructive or meaningless on the reference)")
					}
					t.Parallel()
					runScenario(t, tg, tr, sc)
				})
			}
		}
	}
}

func runScenario(t *testing.T, tg *target, tr Transport, sc scenario) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := &env{t: t, ctx: ctx, tg: tg, tr: tr, dir: t.TempDir()}
	if tr == Stdio {
		srv, err := StartServer(ctx, tg.spec(), Stdio)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		c, err := srv.Dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e.c = c
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s stderr tail:\n%s", tg.name, srv.Stderr())
			}
		})
	} else {
		srv, err := tg.wsServer()
		if err != nil {
			t.Fatal(err)
		}
		e.dial = func() *Client {
			c, err := srv.Dial(ctx)
			if err != nil {
				t.Fatalf("dial %s: %v", srv.URL, err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		e.c = e.dial()
	}
	if !sc.raw {
		if _, err := e.c.Initialize(ctx); err != nil {
			t.Fatalf("initialize: %v", err)
		}
	}
	sc.run(e)
}

// guard refuses, before anything is sent, an fs/remove aimed at the
// reference outside the scenario's temp dir: the reference has no guard of
// its own and would delete whatever it is told to.
func (e *env) guard(method string, params any) {
	if !e.tg.ref || method != "fs/remove" {
		return
	}
	b, _ := json.Marshal(params)
	var p struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(b, &p)
	prefix := FileURI(e.dir) + "/"
	if !strings.HasPrefix(p.Path, prefix) || strings.Contains(p.Path, "..") || strings.Contains(p.Path, "%") {
		e.t.Fatalf("refusing to send fs/remove of %q to the reference: not inside %s", p.Path, prefix)
	}
}

// call sends a request that must succeed and returns its result as a map.
func (e *env) call(method string, params any) map[string]any {
	e.t.Helper()
	e.guard(method, params)
	var r map[string]any
	if err := e.c.Call(e.ctx, method, params, &r); err != nil {
		e.t.Fatalf("%s %s: %v", method, mustJSON(params), err)
	}
	return r
}

// callInto sends a request that must succeed and decodes its result into out.
func (e *env) callInto(method string, params, out any) {
	e.t.Helper()
	e.guard(method, params)
	if err := e.c.Call(e.ctx, method, params, out); err != nil {
		e.t.Fatalf("%s %s: %v", method, mustJSON(params), err)
	}
}

// callErr sends a request that must fail with code and a message
// containing want (when want is not empty).
func (e *env) callErr(method string, params any, code int, want string) *RPCError {
	e.t.Helper()
	e.guard(method, params)
	err := e.c.Call(e.ctx, method, params, nil)
	var re *RPCError
	if !errors.As(err, &re) {
		e.t.Fatalf("%s %s: want error %d %q, got %v", method, mustJSON(params), code, want, err)
	}
	if re.Code != code || !strings.Contains(re.Message, want) {
		e.t.Fatalf("%s %s: want error %d containing %q, got %d %q", method, mustJSON(params), code, want, re.Code, re.Message)
	}
	return re
}

// uri names a file inside the scenario's temp dir.
func (e *env) uri(name string) string { return FileURI(filepath.Join(e.dir, name)) }

// startParams builds process/start params running argv in the temp dir.
func (e *env) startParams(id string, tty bool, argv ...string) map[string]any {
	return map[string]any{
		"processId": id,
		"argv":      argv,
		"cwd":       FileURI(e.dir),
		"env":       map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"},
		"tty":       tty,
	}
}

// start starts a process that must be accepted.
func (e *env) start(id string, tty bool, argv ...string) {
	e.t.Helper()
	e.call("process/start", e.startParams(id, tty, argv...))
}

// startStdin starts a non-tty process with a writable stdin.
func (e *env) startStdin(id string, argv ...string) {
	e.t.Helper()
	p := e.startParams(id, false, argv...)
	p["pipeStdin"] = true
	e.call("process/start", p)
}

// closed waits for a process to close and checks the event sequence:
// seqs 1..n without gaps, exactly one exited, closed last.
func (e *env) closed(id string) []Event {
	e.t.Helper()
	evs, err := e.c.WaitClosed(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	exited := 0
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			e.t.Fatalf("%s: event %d has seq %d, want %d (events %v)", id, i, ev.Seq, i+1, methods(evs))
		}
		if ev.Method == "process/exited" {
			exited++
		}
	}
	if exited != 1 || evs[len(evs)-1].Method != "process/closed" {
		e.t.Fatalf("%s: want one exited and closed last, got %v", id, methods(evs))
	}
	// Our server sends the pushes of one process in seq order (a
	// design decision). The reference does not always: it was seen sending exited
	// (seq 266) before output seq 265; clients must order by seq.
	if arr := e.c.Arrived(id); !e.tg.ref && len(arr) == len(evs) {
		for i, ev := range arr {
			if ev.Seq != uint64(i+1) {
				e.t.Fatalf("%s: events arrived out of seq order near %v", id, methods(arr[max(0, i-2):min(len(arr), i+3)]))
			}
		}
	}
	return evs
}

// exitCode returns the exit code of a closed event list.
func exitCode(evs []Event) int {
	for _, ev := range evs {
		if ev.Method == "process/exited" {
			return ev.ExitCode
		}
	}
	return -999
}

func methods(evs []Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%d:%s", ev.Seq, strings.TrimPrefix(ev.Method, "process/")))
	}
	return out
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 300 {
		b = append(b[:300], "..."...)
	}
	return string(b)
}

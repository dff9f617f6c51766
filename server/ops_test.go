package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/execgo/exec-server/process"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/transport"
)

func TestParseListen(t *testing.T) {
	for _, tc := range []struct {
		in          string
		stdio       bool
		addr        string
		bad         bool
		unsupported bool
	}{
		{in: "stdio", stdio: true},
		{in: "stdio://", stdio: true},
		{in: "ws://127.0.0.1:0", addr: "127.0.0.1:0"},
		{in: "ws://127.0.0.1:8765/", addr: "127.0.0.1:8765"},
		{in: "ws://[::1]:9", addr: "[::1]:9"},
		{in: "ws://0.0.0.0:80", addr: "0.0.0.0:80"},
		{in: "ws://localhost:8765", addr: "127.0.0.1:8765"},
		{in: "ws://localhost:0/", addr: "127.0.0.1:0"},
		{in: "ws://localhost", bad: true},
		{in: "ws://localhost:x", bad: true},
		{in: "ws://example.com:80", bad: true},
		{in: "ws://localhost.evil.com:80", bad: true},
		{in: "ws://127.0.0.1", bad: true},
		{in: "http://127.0.0.1:1", bad: true, unsupported: true},
		{in: "", bad: true, unsupported: true},
		{in: "wss://127.0.0.1:1", bad: true, unsupported: true},
	} {
		stdio, addr, err := ParseListen(tc.in)
		if tc.bad {
			var le *ListenError
			if !errors.As(err, &le) || le.URL != tc.in || le.Unsupported != tc.unsupported {
				t.Errorf("%q: err %v, want a *ListenError (unsupported %v)", tc.in, err, tc.unsupported)
				continue
			}
			if strings.Contains(err.Error(), "--") {
				t.Errorf("%q: error %q names a flag", tc.in, err)
			}
			continue
		}
		if err != nil || stdio != tc.stdio || addr != tc.addr {
			t.Errorf("%q: (%v, %q, %v), want (%v, %q, nil)", tc.in, stdio, addr, err, tc.stdio, tc.addr)
		}
	}
}

func FuzzParseListen(f *testing.F) {
	for _, s := range []string{"stdio", "ws://127.0.0.1:0", "ws://localhost:1", "ws://[::1]:2/", "http://x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		stdio, addr, err := ParseListen(s)
		switch {
		case err != nil:
			var le *ListenError
			if !errors.As(err, &le) {
				t.Fatalf("%q: %T error", s, err)
			}
		case stdio:
			if addr != "" {
				t.Fatalf("%q: stdio with addr %q", s, addr)
			}
		default:
			ap, perr := netip.ParseAddrPort(addr)
			if perr != nil {
				t.Fatalf("%q: addr %q does not parse: %v", s, addr, perr)
			}
			if strings.Contains(s, "localhost") && !ap.Addr().IsLoopback() {
				t.Fatalf("%q: localhost bound to %v", s, ap.Addr())
			}
		}
	})
}

// TestServeEndsSessionsOnCancel: when Serve's context ends, it returns
// ErrServerClosed and has ended every session: a detached session's
// process is killed, not left to SessionTTL.
func TestServeEndsSessionsOnCancel(t *testing.T) {
	s := startOpsServer(t, Config{SessionTTL: time.Hour})
	c := dialOps(t, s.url, nil)
	c.init()
	pid := c.startPid("p", t.TempDir())
	_ = c.ws.Close() // detached: would live for an hour
	s.stop()
	select {
	case err := <-s.done:
		if !errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve returned %v, want ErrServerClosed", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return")
	}
	s.done <- ErrServerClosed // for the cleanup
	if opsAlive(pid) {
		t.Errorf("process %d of a detached session outlived Serve", pid)
	}
	if !strings.Contains(s.logs.String(), "shutting down") {
		t.Errorf("no shutdown line in the log:\n%s", s.logs.String())
	}
}

// TestServeListenerError: an error of the listener itself is returned as
// it is, not as ErrServerClosed.
func TestServeListenerError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	err = New(Config{}).Serve(context.Background(), l)
	if err == nil || errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve on a closed listener: %v", err)
	}
}

// TestRunReturnsNilOnCancel: Run maps ErrServerClosed to nil.
func TestRunReturnsNilOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{Listen: "ws://localhost:0", OnListen: func(u string) { up <- u }}) }()
	select {
	case u := <-up:
		if !strings.HasPrefix(u, "ws://127.0.0.1:") {
			t.Errorf("localhost bound as %s, want 127.0.0.1", u)
		}
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v, want nil", err)
	}
	// Run logged the once-per-process sandbox line; TestLogSandboxSupport
	// wants to see it.
	sandboxLogOnce = sync.Once{}
}

// TestHTTPErrorLogThroughSlog: net/http's own errors (here a plain-text
// client on a TLS listener) reach the configured logger.
func TestHTTPErrorLogThroughSlog(t *testing.T) {
	s := startOpsServer(t, Config{TLSConfig: selfSignedTLS(t)})
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "wss://"))
	if err != nil {
		t.Fatal(err)
	}
	// Bounded: a server that never closes fails on the log check below.
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_, _ = io.ReadAll(conn)
	conn.Close()
	opsWaitFor(t, "the TLS handshake error in the slog output", func() bool {
		return strings.Contains(s.logs.String(), "TLS handshake error")
	})
	if !strings.Contains(s.logs.String(), "level=WARN") {
		t.Errorf("http.Server error not logged at warn:\n%s", s.logs.String())
	}
}

func selfSignedTLS(t *testing.T) *tls.Config {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// pipeStream is a stdio stream over two pipes; closing the client's end of
// the input ends the connection.
func pipeStream() (st *transport.Stdio, toServer *io.PipeWriter, fromServer *io.PipeReader) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	return transport.NewStdio(inR, outW, nil, 1<<20), inW, outR
}

// TestStreamSessionLifetime: ServeStream detaches the session when the
// stream ends, whatever the stream's type; ServeStreamWith with
// EndSessionOnClose ends it.
func TestStreamSessionLifetime(t *testing.T) {
	for _, end := range []bool{false, true} {
		t.Run(map[bool]string{false: "detach", true: "end"}[end], func(t *testing.T) {
			srv := New(Config{SessionTTL: time.Hour})
			defer srv.Close()
			st, in, _ := pipeStream()
			done := make(chan struct{})
			go func() {
				defer close(done)
				if end {
					srv.ServeStreamWith(context.Background(), st, StreamOptions{EndSessionOnClose: true})
				} else {
					srv.ServeStream(context.Background(), st)
				}
			}()
			_, _ = io.WriteString(in, `{"id":1,"method":"initialize","params":{"clientName":"x"}}`+"\n")
			opsWaitFor(t, "the session", func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return len(srv.sessions) == 1 })
			in.Close()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("the connection did not end")
			}
			srv.mu.Lock()
			n := len(srv.sessions)
			srv.mu.Unlock()
			if want := map[bool]int{false: 1, true: 0}[end]; n != want {
				t.Fatalf("%d sessions after the stream ended, want %d", n, want)
			}
		})
	}
}

// scrape GETs /metrics with h and returns the status and body.
func scrape(t *testing.T, url string, h http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue finds one sample's value in a scrape ("" when absent).
func metricValue(body, sample string) string {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`)
	if m := re.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

// TestMetricsEndpoint: /metrics is behind the listener's authentication
// and Origin check (both refusals logged at info), and counts what
// happened.
func TestMetricsEndpoint(t *testing.T) {
	const token = "Bearer metrics-test-token"
	reg := prometheus.NewRegistry()
	auth := func(r *http.Request) error {
		if r.Header.Get("Authorization") != token {
			return errors.New("missing or wrong bearer token")
		}
		return nil
	}
	s := startOpsServer(t, Config{Metrics: reg, Authenticate: auth})
	good := http.Header{"Authorization": {token}}

	if code, _ := scrape(t, s.http+"/metrics", nil); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, _ := scrape(t, s.http+"/metrics", http.Header{"Authorization": {token}, "Origin": {"http://evil"}}); code != http.StatusForbidden {
		t.Errorf("with Origin: %d, want 403", code)
	}
	logs := s.logs.String()
	for _, want := range []string{`level=INFO msg="request refused"`, "status=401", "status=403", "path=/metrics"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}

	dir := t.TempDir()
	c := dialOps(t, s.url, good)
	c.init()
	c.startPid("p", dir)
	if m := c.call("process/start", opsStartParams("q", dir, "/nonexistent/program")); m.Error == nil {
		t.Fatal("starting a missing program succeeded")
	}
	if m := c.call("fs/writeFile", map[string]any{"path": "file://" + dir + "/f", "dataBase64": "aGVsbG8="}); m.Error != nil {
		t.Fatalf("fs/writeFile: %s", m.Error.Message)
	}
	if m := c.call("fs/readFile", map[string]any{"path": "file://" + dir + "/f"}); m.Error != nil {
		t.Fatalf("fs/readFile: %s", m.Error.Message)
	}
	// A write under a policy that only lets dir be written runs in a
	// sandbox helper (when the kernel has one: the sample is checked then).
	policy := json.RawMessage(`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
		`{"path":{"type":"path","path":"file://` + dir + `"},"access":"write"}]}},"windowsSandboxLevel":"disabled"}`)
	sandboxed := c.call("fs/writeFile", map[string]any{"path": "file://" + dir + "/g", "dataBase64": "aGk=", "sandbox": policy}).Error == nil
	written := "5"
	if sandboxed {
		written = "7"
	}

	code, body := scrape(t, s.http+"/metrics", good)
	if code != http.StatusOK {
		t.Fatalf("scrape: %d %s", code, body)
	}
	for sample, want := range map[string]string{
		`exec_server_connections`:                                                                       "1",
		`exec_server_connections_total`:                                                                 "1",
		`exec_server_sessions{state="attached"}`:                                                        "1",
		`exec_server_sessions{state="detached"}`:                                                        "0",
		`exec_server_processes{state="running"}`:                                                        "1",
		`exec_server_process_starts_total{result="ok"}`:                                                 "1",
		`exec_server_fs_written_bytes_total`:                                                            written,
		`exec_server_fs_read_bytes_total`:                                                               "5",
		`exec_server_http_refusals_total{code="401"}`:                                                   "1",
		`exec_server_http_refusals_total{code="403"}`:                                                   "1",
		`exec_server_budget_limit_bytes{budget="retained"}`:                                             "1.073741824e+09",
		`exec_server_request_duration_seconds_count{code="0",method="process/start",sandboxed="false"}`: "1",
		`exec_server_request_duration_seconds_count{code="0",method="initialize",sandboxed="false"}`:    "1",
	} {
		if got := metricValue(body, sample); got != want {
			t.Errorf("%s = %q, want %q", sample, got, want)
		}
	}
	if sandboxed {
		if got := metricValue(body, `exec_server_sandbox_helper_seconds_count{warm="false"}`); got != "1" {
			t.Errorf("sandbox helper calls (a helper started) = %q, want 1 after one sandboxed fs/writeFile", got)
		}
	} else {
		t.Log("no sandbox on this machine: the helper latency is not checked")
	}
	if !regexp.MustCompile(`(?m)^exec_server_process_starts_total\{result="-3\d+"\} 1$`).MatchString(body) {
		t.Errorf("no failed start counted by error code:\n%s", grepLines(body, "process_starts"))
	}

	_ = c.ws.Close()
	opsWaitFor(t, "the session to detach", func() bool {
		_, body := scrape(t, s.http+"/metrics", good)
		return metricValue(body, `exec_server_sessions{state="detached"}`) == "1" && metricValue(body, "exec_server_connections") == "0"
	})

	// The same on a separate listener (--metrics-listen).
	ms := &http.Server{Handler: s.srv.MetricsHandler()}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ms.Serve(l) }()
	defer ms.Close()
	if code, _ := scrape(t, "http://"+l.Addr().String()+"/metrics", nil); code != http.StatusUnauthorized {
		t.Errorf("separate listener without token: %d, want 401", code)
	}
	if code, body := scrape(t, "http://"+l.Addr().String()+"/metrics", good); code != http.StatusOK || !strings.Contains(body, "exec_server_connections_total 1") {
		t.Errorf("separate listener: %d\n%s", code, body)
	}
}

func grepLines(body, sub string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestMetricsOff: without Config.Metrics, /metrics is an unknown path.
func TestMetricsOff(t *testing.T) {
	s := startOpsServer(t, Config{})
	if code, _ := scrape(t, s.http+"/metrics", nil); code != http.StatusNotFound {
		t.Errorf("/metrics without Config.Metrics: %d, want 404", code)
	}
	if s.srv.MetricsHandler() != nil {
		t.Error("MetricsHandler without Config.Metrics is not nil")
	}
}

// TestRequestDebugLog: one debug line per request with method, process
// id, argv[0], code and duration.
func TestRequestDebugLog(t *testing.T) {
	s := startOpsServer(t, Config{})
	c := dialOps(t, s.url, nil)
	c.init()
	dir := t.TempDir()
	c.startPid("p1", dir)
	c.call("process/terminate", map[string]any{"processId": "p1"})
	c.call("process/read", map[string]any{"processId": "nope"})
	logs := s.logs.String()
	for _, re := range []string{
		`level=DEBUG msg=request method=initialize code=0 duration=\S+`,
		`level=DEBUG msg=request method=process/start process=p1 argv0=/bin/sh code=0 duration=\S+`,
		`level=DEBUG msg=request method=process/terminate process=p1 code=0 duration=\S+`,
		`level=DEBUG msg=request method=process/read process=nope code=-32600 duration=\S+ err=`,
	} {
		if !regexp.MustCompile(re).MatchString(logs) {
			t.Errorf("no line matching %s in:\n%s", re, logs)
		}
	}
}

// TestProcessEventObserver: what (*session).Deliver reports: output bytes by
// stream, dropped pushes, and one debug line per exit with code, signal
// and duration.
func TestProcessEventObserver(t *testing.T) {
	logs := &opsLogBuffer{}
	reg := prometheus.NewRegistry()
	srv := New(Config{Metrics: reg, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ss := &session{id: "sess-1"}
	o := srv.obs
	o.processStarted(ss, startParamsFor("p", "sleep"), nil, time.Now().Add(-1500*time.Millisecond))
	o.processEvent(ss, process.Event{Kind: process.EventOutput, ProcessID: "p", Stream: "stdout", Data: []byte("hello")}, false)
	o.processEvent(ss, process.Event{Kind: process.EventOutput, ProcessID: "p", Stream: "stderr", Data: []byte("oops")}, true)
	o.processEvent(ss, process.Event{Kind: process.EventExited, ProcessID: "p", ExitCode: 128 + 15}, false)
	o.processEvent(ss, process.Event{Kind: process.EventExited, ProcessID: "unknown", ExitCode: 2}, false)
	o.pushSent(time.Now().Add(-250 * time.Millisecond))
	o.pushSent(time.Now()) // no wait: not a stall

	if got := gathered(t, reg, "exec_server_push_stall_seconds_total/"); got < 0.25 || got > 5 {
		t.Errorf("stall seconds %v, want about 0.25", got)
	}
	out := logs.String()
	if !regexp.MustCompile(`level=DEBUG msg="process exited" process=p code=143 signal=15 duration=1\.5\d*s session=sess-1`).MatchString(out) {
		t.Errorf("no exit line with signal and duration:\n%s", out)
	}
	if !regexp.MustCompile(`msg="process exited" process=unknown code=2 session=sess-1`).MatchString(out) {
		t.Errorf("no exit line for a process not seen starting:\n%s", out)
	}
	if len(o.started) != 0 {
		t.Errorf("%d start times kept after the exits", len(o.started))
	}
	for name, want := range map[string]float64{
		"exec_server_output_bytes_total/stdout": 5,
		"exec_server_output_bytes_total/stderr": 4,
		"exec_server_pushes_dropped_total/":     1,
		"exec_server_process_exits_total/":      2,
		"exec_server_push_stalls_total/":        1,
	} {
		if got := gathered(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func startParamsFor(id, argv0 string) any {
	return &protocol.StartParams{ProcessID: id, Argv: []string{argv0}}
}

// gathered reads one counter or gauge ("name/label value") from reg.
func gathered(t *testing.T, reg *prometheus.Registry, key string) float64 {
	name, label, _ := strings.Cut(key, "/")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestProcessExitLogEndToEnd: with (*session).Deliver calling the observer
// (two lines the engine's branch carries; see observe.go), a real process's
// output is counted and its exit logged with code, signal and duration.
// Skipped while Deliver does not call it.
func TestProcessExitLogEndToEnd(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startOpsServer(t, Config{Metrics: reg})
	c := dialOps(t, s.url, nil)
	c.init()
	if m := c.call("process/start", opsStartParams("k", t.TempDir(), "/bin/sh", "-c", "echo out; kill -TERM $$")); m.Error != nil {
		t.Fatalf("process/start: %s", m.Error.Message)
	}
	for m := c.next(); m.Method != "process/closed"; m = c.next() {
	}
	if gathered(t, reg, "exec_server_output_bytes_total/stdout") < 0 {
		t.Skip("(*session).Deliver does not call observer.processEvent in this tree")
	}
	if got := gathered(t, reg, "exec_server_output_bytes_total/stdout"); got != 4 {
		t.Errorf("stdout bytes %v, want 4", got)
	}
	opsWaitFor(t, "the exit line", func() bool { return strings.Contains(s.logs.String(), `msg="process exited"`) })
	if !regexp.MustCompile(`msg="process exited" process=k code=143 signal=15 duration=\S+ session=`).MatchString(s.logs.String()) {
		t.Errorf("exit line:\n%s", s.logs.String())
	}
}

// BenchmarkObserveRequest is the observer's cost per request (metrics on,
// debug logs off), as paid on every request.
func BenchmarkObserveRequest(b *testing.B) {
	srv := New(Config{Metrics: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	p := &protocol.WriteParams{ProcessID: "p"}
	for b.Loop() {
		srv.obs.request("process/write", p, nil, time.Microsecond, false)
	}
}

// BenchmarkObserveOutput is the observer's cost per output event.
func BenchmarkObserveOutput(b *testing.B) {
	srv := New(Config{Metrics: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ev := process.Event{Kind: process.EventOutput, ProcessID: "p", Stream: "stdout", Data: make([]byte, 4096)}
	ss := &session{id: "s"}
	for b.Loop() {
		srv.obs.processEvent(ss, ev, false)
	}
}

// TestParamSandboxed: the sandbox label is read from raw fs params
// without decoding them: a top-level member only. (The written-bytes count
// comes with the fs/writeFile and fs/writeBlock results: TestOps* scrape
// it.)
func TestParamSandboxed(t *testing.T) {
	for _, tt := range []struct {
		raw       string
		sandboxed bool
	}{
		{`{"path":"p","dataBase64":"aGVsbG8="}`, false},
		{`{"dataBase64":"YWJj\/\/\/\/","sandbox":{"mode":"x"},"path":"p"}`, true},
		{`{"path":"p","dataBase64":"aGk=","sandbox":null}`, false},
		{`{"path":"p","data\u0042ase64":"aGk=","x":{"sandbox":1}}`, false},
		{`{"handleId":"h","offset":0,"chunk":"aGVsbG8h"}`, false},
		{`{"path":"p","dataBase64":"aGk=","sandbox":{}}`, true},
	} {
		if got := paramSandboxed(json.RawMessage(tt.raw)); got != tt.sandboxed {
			t.Errorf("%s: sandboxed %v, want %v", tt.raw, got, tt.sandboxed)
		}
	}
}

// BenchmarkObserveWriteFile is what the observer adds to a 16 MiB
// fs/writeFile (the sandbox label, read from the raw params, and the
// request's metrics): it must stay far below the write's own cost.
func BenchmarkObserveWriteFile(b *testing.B) {
	srv := New(Config{Metrics: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	data := make([]byte, 16<<20)
	raw := json.RawMessage(`{"path":"file:///tmp/x","dataBase64":"` + base64.StdEncoding.EncodeToString(data) + `"}`)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		sandbox := paramSandboxed(raw)
		srv.obs.request(protocol.MethodFsWriteFile, raw, nil, time.Millisecond, sandbox)
		srv.obs.m.fsWritten(len(data))
	}
}

// TestMetricsRegistryShared: a registry given to a second server cannot
// take its metrics again; that server runs without metrics and says so.
func TestMetricsRegistryShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	_ = New(Config{Metrics: reg})
	logs := &opsLogBuffer{}
	second := New(Config{Metrics: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if second.MetricsHandler() != nil || second.obs.m != nil {
		t.Error("the second server has metrics on a registry already taken")
	}
	if !strings.Contains(logs.String(), `level=WARN msg="metrics off: cannot register them"`) {
		t.Errorf("no warning:\n%s", logs.String())
	}
}

// TestRefusalLogsLimited: a flood of refused requests logs at most
// refusalBurst lines a second; the metric counts them all, and the next
// logged line says how many were left out.
func TestRefusalLogsLimited(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startOpsServer(t, Config{Metrics: reg, Authenticate: func(*http.Request) error { return errors.New("no") }})
	const n = 60
	start := time.Now()
	for range n {
		if code, _ := scrape(t, s.http+"/metrics", nil); code != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", code)
		}
	}
	elapsed := time.Since(start)
	lines := strings.Count(s.logs.String(), `msg="request refused"`)
	if max := refusalBurst * (int(elapsed/time.Second) + 2); lines > max {
		t.Errorf("%d refusal lines for %d requests in %v, want at most %d", lines, n, elapsed, max)
	}
	if got := gathered(t, reg, "exec_server_http_refusals_total/401"); got != n {
		t.Errorf("refusals counted %v, want %d", got, n)
	}
	if elapsed < time.Second {
		// All in one window: the rest was left out; the next window's
		// first line reports it.
		time.Sleep(time.Second - elapsed + 50*time.Millisecond)
		scrape(t, s.http+"/metrics", nil)
		if !regexp.MustCompile(`msg="request refused".* suppressed=\d+`).MatchString(s.logs.String()) {
			t.Errorf("no suppressed count:\n%s", s.logs.String())
		}
	}
}

func TestLogLimiter(t *testing.T) {
	var l logLimiter
	t0 := time.Unix(1000, 0)
	for i := range refusalBurst {
		if _, ok := l.allow(t0.Add(time.Duration(i) * time.Millisecond)); !ok {
			t.Fatalf("line %d refused within the burst", i)
		}
	}
	for i := range 5 {
		if _, ok := l.allow(t0.Add(500 * time.Millisecond)); ok {
			t.Fatalf("line %d past the burst allowed", refusalBurst+i)
		}
	}
	if n, ok := l.allow(t0.Add(time.Second)); !ok || n != 5 {
		t.Fatalf("next second: (%d, %v), want (5, true)", n, ok)
	}
	if n, ok := l.allow(t0.Add(time.Second + time.Millisecond)); !ok || n != 0 {
		t.Fatalf("then: (%d, %v), want (0, true)", n, ok)
	}
}

package main

import (
	"bufio"
	"flag"
	"io"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	out, err := serverCommand("--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^exec-server \S+( revision [0-9a-f]+(\+dirty)?( \S+)?)? go1\.\d+`).Match(out) {
		t.Fatalf("--version printed %q", out)
	}
}

func TestFlagsFromEnv(t *testing.T) {
	newFS := func() (*flag.FlagSet, *string, *int, *audienceFlag) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var aud audienceFlag
		fs.Var(&aud, "ws-audience", "")
		return fs, fs.String("listen", "ws://127.0.0.1:0", ""), fs.Int("max-processes", 4096, ""), &aud
	}
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		listen   string
		maxProcs int
		aud      string
		err      string
	}{
		{name: "defaults", listen: "ws://127.0.0.1:0", maxProcs: 4096},
		{name: "from env", env: map[string]string{"EXEC_SERVER_LISTEN": "stdio", "EXEC_SERVER_MAX_PROCESSES": "7"}, listen: "stdio", maxProcs: 7},
		{name: "flag wins", args: []string{"--listen", "ws://127.0.0.1:1"}, env: map[string]string{"EXEC_SERVER_LISTEN": "stdio"}, listen: "ws://127.0.0.1:1", maxProcs: 4096},
		{name: "repeatable flag not appended to", args: []string{"--ws-audience", "a"}, env: map[string]string{"EXEC_SERVER_WS_AUDIENCE": "b"}, listen: "ws://127.0.0.1:0", maxProcs: 4096, aud: "[a]"},
		{name: "repeatable from env", env: map[string]string{"EXEC_SERVER_WS_AUDIENCE": `["x","y"]`}, listen: "ws://127.0.0.1:0", maxProcs: 4096, aud: "[x y]"},
		{name: "bad value", env: map[string]string{"EXEC_SERVER_MAX_PROCESSES": "many"}, err: "invalid value in EXEC_SERVER_MAX_PROCESSES for --max-processes"},
		{name: "other prefix ignored", env: map[string]string{"EXEC_SERVERLISTEN": "stdio", "LISTEN": "stdio"}, listen: "ws://127.0.0.1:0", maxProcs: 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, listen, maxProcs, aud := newFS()
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := flagsFromEnv(fs, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *listen != tc.listen || *maxProcs != tc.maxProcs {
				t.Errorf("listen %q max-processes %d, want %q %d", *listen, *maxProcs, tc.listen, tc.maxProcs)
			}
			if tc.aud != "" {
				if got := "[" + strings.Join(*aud, " ") + "]"; got != tc.aud {
					t.Errorf("audience %s, want %s", got, tc.aud)
				}
			}
		})
	}
}

// TestHelpHidesEnv: -h shows the built-in defaults, never a value from the
// environment.
func TestHelpHidesEnv(t *testing.T) {
	const secret = "0f343b0931126a20f133d67c2b018a3b0f343b0931126a20f133d67c2b018a3b"
	cmd := serverCommand("-h")
	cmd.Env = append(cmd.Environ(), "EXEC_SERVER_WS_TOKEN_SHA256="+secret, "EXEC_SERVER_LISTEN=ws://10.9.8.7:1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, leak := range []string{secret, "10.9.8.7"} {
		if strings.Contains(string(out), leak) {
			t.Errorf("help prints %q from the environment:\n%s", leak, out)
		}
	}
	if !strings.Contains(string(out), "EXEC_SERVER_") || !strings.Contains(string(out), "--metrics-listen") && !strings.Contains(string(out), "-metrics-listen") {
		t.Errorf("help does not mention the environment or --metrics-listen:\n%s", out)
	}
}

// lineReader hands out a process's output lines, with a deadline.
type lineReader struct{ lines chan string }

func newLineReader(r io.Reader) *lineReader {
	lr := &lineReader{lines: make(chan string, 256)}
	go func() {
		defer close(lr.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lr.lines <- sc.Text()
		}
	}()
	return lr
}

// until returns the first line matching re (and everything read so far).
func (lr *lineReader) until(t *testing.T, re string) (string, string) {
	t.Helper()
	rx := regexp.MustCompile(re)
	var seen strings.Builder
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-lr.lines:
			if !ok {
				t.Fatalf("output ended before a line matching %s:\n%s", re, seen.String())
			}
			seen.WriteString(l + "\n")
			if rx.MatchString(l) {
				return l, seen.String()
			}
		case <-deadline:
			t.Fatalf("no line matching %s within 20s:\n%s", re, seen.String())
		}
	}
}

// TestServerFromEnvWithMetricsAndLogs: a server configured by environment
// only (localhost listen, debug logs, --metrics-listen) logs its start,
// listen address, metrics address and, on SIGTERM, its shutdown; /metrics
// answers on both listeners.
func TestServerFromEnvWithMetricsAndLogs(t *testing.T) {
	cmd := serverCommand()
	cmd.Dir = t.TempDir()
	cmd.Env = append(cmd.Environ(), "EXEC_SERVER_LISTEN=ws://localhost:0", "EXEC_SERVER_LOG_LEVEL=debug", "EXEC_SERVER_METRICS_LISTEN=localhost:0")
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	out, errs := newLineReader(stdout), newLineReader(stderr)
	url, _ := out.until(t, `^ws://`)
	if !strings.HasPrefix(url, "ws://127.0.0.1:") {
		t.Fatalf("ws://localhost:0 bound as %s", url)
	}
	line, seen := errs.until(t, `msg="serving metrics"`)
	for _, want := range []string{`level=INFO msg="exec-server starting"`, "listen=ws://localhost:0"} {
		if !strings.Contains(seen, want) {
			t.Errorf("start-up log lacks %q:\n%s", want, seen)
		}
	}
	murl := regexp.MustCompile(`url=(\S+)`).FindStringSubmatch(line)
	if murl == nil || !strings.HasPrefix(murl[1], "http://127.0.0.1:") {
		t.Fatalf("metrics line %q", line)
	}
	for _, u := range []string{murl[1], "http" + strings.TrimPrefix(url, "ws") + "/metrics"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "exec_server_connections_total") || !strings.Contains(string(body), "go_goroutines") || !strings.Contains(string(body), "go_build_info{") {
			t.Errorf("%s: %d\n%.400s", u, resp.StatusCode, body)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, seen = errs.until(t, `msg="exec-server stopped"`)
	if !strings.Contains(seen, `level=INFO msg="shutting down"`) {
		t.Errorf("no shutdown line:\n%s", seen)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

func TestParseMetricsListen(t *testing.T) {
	for in, want := range map[string]string{
		"localhost:9100": "127.0.0.1:9100",
		"0.0.0.0:9100":   "0.0.0.0:9100",
		"[::1]:1":        "[::1]:1",
		"example.com:80": "",
		":9100":          "",
		"9100":           "",
	} {
		got, err := parseMetricsListen(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
}

func FuzzParseMetricsListen(f *testing.F) {
	for _, s := range []string{"localhost:9100", "127.0.0.1:1", "[::1]:2", "x:1", ":1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		addr, err := parseMetricsListen(s)
		if err != nil {
			return
		}
		ap, perr := netip.ParseAddrPort(addr)
		if perr != nil {
			t.Fatalf("%q gave %q, which does not parse: %v", s, addr, perr)
		}
		if strings.HasPrefix(s, "localhost:") && !ap.Addr().IsLoopback() {
			t.Fatalf("%q bound to %v", s, ap.Addr())
		}
	})
}

package server

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/test/asnobody"
	"github.com/execgo/exec-server/internal/test/linesrv"
	"github.com/execgo/exec-server/sandbox"
)

// pongLine answers a line with "pong <line>".
func pongLine(line string) string { return "pong " + line + "\n" }

func needTransparent(t *testing.T) {
	t.Helper()
	if s := sandbox.Probe(); !s.Available {
		t.Skipf("sandbox not available: %s", s.Missing)
	}
	if err := sandbox.TransparentSupport(); err != nil {
		t.Skipf("transparent TCP not available: %v", err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
}

// transparentLaunch is proxyLaunch with transparentTcp, as the 0.171
// client sends it (the third key).
func transparentLaunch(domains string) json.RawMessage {
	return json.RawMessage(strings.Replace(string(proxyLaunch(domains, "")),
		`"enableSocks5":true,`, `"enableSocks5":true,"transparentTcp":true,`, 1))
}

// TestTransparentTCP: with transparentTcp, a sandboxed command's raw TCP
// (bash /dev/tcp, no proxy variable used) to an allowed address reaches
// it through the proxy (an allow decision, protocol socks5_tcp); to an
// address not allowed, IPv4 or IPv6, the connection is reset and the
// target never sees it (deny decisions); UDP out is refused at once; the
// command's own 127.0.0.1 stays its own; the transparent port dialled
// directly goes nowhere (no decision: the first one is the allowed host's).
func TestTransparentTCP(t *testing.T) {
	needTransparent(t)
	// The command's 127.0.0.1 is its own loopback; other loopback
	// addresses of the host are reached through the proxy, which allows
	// them only when listed exactly (local addresses).
	allowed, _ := linesrv.Start(t, "127.0.0.2", pongLine)
	denied, deniedConns := linesrv.Start(t, "127.0.0.3", pongLine)
	dir := t.TempDir()
	p := stdioPeer(t, New(Config{}))
	p.init()
	script := fmt.Sprintf(`
skip=" ${HTTP_PROXY##*:} ${ALL_PROXY##*:} "
unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy
try() { # host port: one line through a raw TCP connection
	if exec 3<>"/dev/tcp/$1/$2"; then
		printf 'hi\n' >&3
		if read -r -t 20 line <&3; then echo "$line"; else echo "read failed"; fi
		exec 3>&-
	else
		echo "connect failed"
	fi
}
# The transparent port itself, dialled directly: no destination.
{ read -r _; while read -r _ local _ st _; do
	port=$((16#${local#*:}))
	[ "$st" = 0A ] && [ "${local%%:*}" = 0100007F ] && [ "${skip/ $port /}" = "$skip" ] && echo "self=$(try 127.0.0.1 $port 2>/dev/null)"
done; } < /proc/net/tcp
echo "allowed=$(try 127.0.0.2 %[1]d)"
echo "denied=$(try 127.0.0.3 %[2]d 2>/dev/null)"
echo "v6=$(try 2001:db8::1 80 2>/dev/null)"
(echo x > /dev/udp/192.0.2.1/53) 2>/dev/null; echo "udp=$?"
(echo x > /dev/udp/2001:db8::1/53) 2>/dev/null; echo "udp6=$?"
python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(1); c=socket.create_connection(s.getsockname()); a,_=s.accept(); a.sendall(b"own"); print("own="+c.recv(3).decode())' 2>&1 || echo "own=no python3"
`, allowed, denied)
	sp := startParams(t, "tt", false, "/bin/bash", "-c", script)
	sp["cwd"] = "file://" + dir
	sp["sandbox"] = proxySandbox(dir)
	sp["enforceManagedNetwork"] = true
	sp["networkProxy"] = transparentLaunch(`{"127.0.0.2":"allow","*.example":"allow"}`)
	p.call("process/start", sp)
	out, code := output(p, "tt")
	t.Logf("output:\n%s", out)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"self=read failed\n",
		"allowed=pong hi\n",
		"denied=read failed\n",
		"v6=read failed\n",
		"udp=1\n", "udp6=1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if !strings.Contains(out, "own=own\n") && !strings.Contains(out, "own=no python3") {
		t.Errorf("the command's own loopback: %q", out)
	}
	if n := deniedConns.Load(); n != 0 {
		t.Errorf("the denied server saw %d connections", n)
	}
	type decision struct {
		ProcessID, Decision, Source, Reason, Protocol, Host string
		Port                                                int
	}
	want := map[string]string{
		"127.0.0.2":   "allow/allow",
		"127.0.0.3":   "deny/not_allowed_local",
		"2001:db8::1": "deny/not_allowed",
	}
	first := true
	for len(want) > 0 {
		w := p.wait("policyDecision", func(w wire) bool { return w.Method == "network/policyDecision" })
		var d decision
		mustUnmarshal(t, w.Params, &d)
		if first && d.Host != "127.0.0.2" {
			t.Errorf("first decision %s, want the allowed host's", w.Params)
		}
		first = false
		exp, ok := want[d.Host]
		if !ok {
			t.Fatalf("unexpected decision %s", w.Params)
		}
		if got := d.Decision + "/" + d.Reason; got != exp || d.Protocol != "socks5_tcp" || d.ProcessID != "tt" || d.Source != "baseline_policy" {
			t.Errorf("decision %s, want %s", w.Params, exp)
		}
		delete(want, d.Host)
	}
}

// TestTransparentTCPFailsClosed: when the redirect cannot be set up, a
// start asking for transparentTcp is refused (sandboxUnavailable) and the
// command never runs.
func TestTransparentTCPFailsClosed(t *testing.T) {
	if s := sandbox.Probe(); !s.Available {
		t.Skipf("sandbox not available: %s", s.Missing)
	}
	t.Setenv(sandbox.SimulateEnv, "transparent")
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	p := stdioPeer(t, New(Config{}))
	p.init()
	sp := startParams(t, "tf", false, "/bin/sh", "-c", "echo ran > "+marker)
	sp["cwd"] = "file://" + dir
	sp["sandbox"] = proxySandbox(dir)
	sp["enforceManagedNetwork"] = true
	sp["networkProxy"] = transparentLaunch(`{"*":"allow"}`)
	w := p.response(p.request("process/start", sp))
	if w.Error == nil || !strings.Contains(w.raw, `"kind":"sandboxUnavailable"`) || !strings.Contains(w.raw, "transparentTcp") {
		t.Fatalf("got %s, want a sandboxUnavailable refusal naming transparentTcp", w.raw)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the refused command ran")
	}
}

// TestTransparentTCPNonRoot runs TestTransparentTCP as an unprivileged
// user: the init sets the routes and the table up as root of its own user
// namespace.
func TestTransparentTCPNonRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	needTransparent(t)
	asnobody.Run(t, "", "^TestTransparentTCP$", nil, "sandbox not available")
}

// tcpLoop is a python3 client run inside the sandbox: N raw TCP
// connections with one round trip each (no proxy variable used); it
// prints the seconds they took.
const tcpLoop = `import socket,sys,time
n=int(sys.argv[1]);host=sys.argv[2];port=int(sys.argv[3])
t=time.perf_counter()
for _ in range(n):
  s=socket.create_connection((host,port));s.sendall(b"ping\n");s.recv(16);s.close()
print("tcp",time.perf_counter()-t)
`

// BenchmarkSandboxedTransparentTCP measures, from inside a sandbox, a raw
// TCP connection with one round trip to a host server: direct (network
// enabled, no proxy) and redirected through the managed proxy
// (transparentTcp). Run with -benchtime=Nx: N connections per run; the
// metric is per connection.
func BenchmarkSandboxedTransparentTCP(b *testing.B) {
	if s := sandbox.Probe(); !s.Available {
		b.Skipf("sandbox not available: %s", s.Missing)
	}
	if err := sandbox.TransparentSupport(); err != nil {
		b.Skip(err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("no python3")
	}
	port, _ := linesrv.Start(b, "127.0.0.2", pongLine)
	for _, name := range []string{"direct", "transparent"} {
		b.Run(name, func(b *testing.B) {
			p := stdioPeer(b, New(Config{}))
			p.init()
			dir := b.TempDir()
			n := b.N
			sp := map[string]any{"processId": name, "argv": []string{"/usr/bin/env", "python3", "-c", tcpLoop,
				fmt.Sprint(n), "127.0.0.2", fmt.Sprint(port)},
				"cwd": "file://" + dir, "env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false,
				"sandbox": proxySandbox(dir)}
			if name == "transparent" {
				sp["networkProxy"] = transparentLaunch(`{"127.0.0.2":"allow"}`)
			}
			b.ResetTimer()
			p.call("process/start", sp)
			out, code := output(p, name)
			b.StopTimer()
			if code != 0 {
				b.Fatalf("exit %d: %s", code, out)
			}
			f := strings.Fields(out)
			if len(f) != 2 {
				b.Fatalf("output %q", out)
			}
			var sec float64
			fmt.Sscan(f[1], &sec)
			b.ReportMetric(sec*1e3/float64(n), "ms/tcp")
			b.ReportMetric(0, "ns/op")
		})
	}
}

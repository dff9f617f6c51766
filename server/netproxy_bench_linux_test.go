package server

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/test/linesrv"
	"github.com/execgo/exec-server/sandbox"
)

// clientLoop is a python3 (standard library) client run inside the
// sandbox: N HTTP GETs, each on a new connection, through $HTTP_PROXY when
// set; then N TCP connections with one round trip, through the SOCKS5
// proxy in $ALL_PROXY when set. It prints the seconds each loop took.
const clientLoop = `import os,socket,struct,sys,time,urllib.request
n=int(sys.argv[1]);host=sys.argv[2];hp=int(sys.argv[3]);tp=int(sys.argv[4])
px=os.environ.get("HTTP_PROXY")
op=urllib.request.build_opener(urllib.request.ProxyHandler({"http":px} if px else {}))
t=time.perf_counter()
for _ in range(n): op.open("http://%s:%d/"%(host,hp)).read()
print("http",time.perf_counter()-t)
sp=os.environ.get("ALL_PROXY")
t=time.perf_counter()
for _ in range(n):
  if sp:
    h,p=sp.split("//")[1].rsplit(":",1);s=socket.create_connection((h,int(p)))
    s.sendall(b"\x05\x01\x00");s.recv(2);d=host.encode()
    s.sendall(b"\x05\x01\x00\x03"+bytes([len(d)])+d+struct.pack(">H",tp));r=s.recv(10)
  else:
    s=socket.create_connection((host,tp))
  s.sendall(b"ping\n");s.recv(5);s.close()
print("tcp",time.perf_counter()-t)
`

// BenchmarkSandboxedNetwork measures, from inside a sandbox, an HTTP
// request and a TCP connection with one round trip: direct (network
// enabled, no proxy) and through the managed proxy (its own network
// namespace, the listeners handed to the server). Run with -benchtime=Nx:
// N requests of each kind per run; the metrics are per request.
func BenchmarkSandboxedNetwork(b *testing.B) {
	if s := sandbox.Probe(); !s.Available {
		b.Skipf("sandbox not available: %s", s.Missing)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("no python3")
	}
	hello := helloServer(b)
	echo, _ := linesrv.Start(b, "127.0.0.1", linesrv.Pong)
	for _, proxied := range []bool{false, true} {
		name := "direct"
		if proxied {
			name = "proxy"
		}
		b.Run(name, func(b *testing.B) {
			p := stdioPeer(b, New(Config{}))
			p.init()
			dir := b.TempDir()
			n := b.N
			host := "127.0.0.1"
			sp := map[string]any{"processId": name, "argv": []string{"/usr/bin/env", "python3", "-c", clientLoop,
				strconv.Itoa(n), host, strconv.Itoa(hello), strconv.Itoa(echo)},
				"cwd": "file://" + dir, "env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false,
				"sandbox": proxySandbox(dir)}
			if proxied {
				sp["networkProxy"] = proxyLaunch(`{"127.0.0.1":"allow"}`, "")
			}
			b.ResetTimer()
			p.call("process/start", sp)
			out, code := output(p, name)
			b.StopTimer()
			if code != 0 {
				b.Fatalf("exit %d: %s", code, out)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(line)
				if len(f) != 2 {
					continue
				}
				sec, _ := strconv.ParseFloat(f[1], 64)
				b.ReportMetric(sec*1e3/float64(n), "ms/"+f[0])
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

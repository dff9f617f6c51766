package main

import (
	"bytes"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// With NOTIFY_SOCKET set (systemd Type=notify), the server sends READY=1
// once it listens; `exec-server healthcheck` then answers 0 for the same
// listen URL, over https when --tls-cert is set (here through the
// environment, as the Dockerfile's HEALTHCHECK does), and 1 when nothing
// listens.
func TestReadinessAndHealthcheck(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(map[bool]string{false: "ws", true: "wss"}[tlsOn], func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "notify")
			ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var args, env []string
			if tlsOn {
				cert, key := writeCert(t, dir)
				args = []string{"--tls-cert", cert, "--tls-key", key}
				env = []string{"EXEC_SERVER_TLS_CERT=" + cert}
			}
			s := &srvProc{cmd: serverCommand(append([]string{"--listen", "ws://127.0.0.1:0"}, args...)...)}
			s.cmd.Env = append(s.cmd.Env, "NOTIFY_SOCKET="+sock)
			s.cmd.Dir = dir
			out, _ := s.cmd.StdoutPipe()
			if err := s.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
			ln.SetReadDeadline(time.Now().Add(30 * time.Second))
			buf := make([]byte, 256)
			n, err := ln.Read(buf)
			if err != nil || string(buf[:n]) != "READY=1" {
				t.Fatalf("notification %q, %v; want READY=1", buf[:n], err)
			}
			line := make([]byte, 128)
			n, _ = out.Read(line)
			url := strings.TrimSpace(string(line[:n]))
			url = strings.Replace(url, "wss://", "ws://", 1)
			hc := serverCommand("healthcheck", "--listen", url)
			hc.Env = append(hc.Env, env...)
			var stdout, stderr bytes.Buffer
			hc.Stdout, hc.Stderr = &stdout, &stderr
			if err := hc.Run(); err != nil {
				t.Fatalf("healthcheck %s: %v\n%s%s", url, err, stdout.String(), stderr.String())
			}
			want := "ok http://"
			if tlsOn {
				want = "ok https://"
			}
			if !strings.HasPrefix(stdout.String(), want) {
				t.Errorf("healthcheck said %q, want %q...", stdout.String(), want)
			}
			s.cmd.Process.Kill()
			s.cmd.Wait()
			hc = serverCommand("healthcheck", "--listen", url, "--timeout", "10s")
			hc.Env = append(hc.Env, env...)
			if err := hc.Run(); err == nil || hc.ProcessState.ExitCode() != 1 {
				t.Errorf("healthcheck with no server: %v, want exit 1", err)
			}
		})
	}
}

func TestReadyzURL(t *testing.T) {
	for _, tc := range []struct {
		listen string
		tls    bool
		want   string
	}{
		{"ws://0.0.0.0:8765", false, "http://127.0.0.1:8765/readyz"},
		{"ws://0.0.0.0:8765", true, "https://127.0.0.1:8765/readyz"},
		{"ws://localhost:1", false, "http://127.0.0.1:1/readyz"},
		{"ws://[::]:9", false, "http://[::1]:9/readyz"},
		{"ws://10.1.2.3:9", false, "http://10.1.2.3:9/readyz"},
		{"ws://127.0.0.1:0", false, ""},
		{"stdio", false, ""},
	} {
		got, err := readyzURL(tc.listen, tc.tls)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("readyzURL(%q, %v) = %q, %v; want %q", tc.listen, tc.tls, got, err, tc.want)
		}
	}
}

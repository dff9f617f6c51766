package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/internal/tailbuf"
)

// The relay workloads (issue 11 item 7) measure remote mode's cost: our
// server reached through exec-relay on loopback (harness SDK ⇄ relay ⇄
// `exec-server --remote`, Noise-encrypted, relay frames, two more hops)
// against the same server over a direct websocket. In their rows the
// "ours" columns are the relay path and the "ref" columns the direct
// path; --reference plays no part in them.
var relayBinFlag = flag.String("relay", "", "exec-relay binary for the relay-* workloads (default: go build ./cmd/exec-relay into a temp dir)")

var relayPaths = []side{{name: "relay"}, {name: "direct"}}

// relayTargets: the relay path adds at most 0.3 ms to a median round
// trip and keeps at least half the direct path's throughput.
var relayTargets = map[string]string{
	"relay-spawn/latency":     "delta <= 0.3",
	"relay-tty-echo/latency":  "delta <= 0.3",
	"relay-stream/throughput": "ratio >= 0.5",
}

var relayBuild struct {
	once sync.Once
	bin  string
	err  error
}

func relayBinary(cfg *config) (string, error) {
	relayBuild.once.Do(func() {
		if relayBuild.bin = *relayBinFlag; relayBuild.bin != "" {
			return
		}
		relayBuild.bin = filepath.Join(cfg.dir, "exec-relay")
		build := exec.Command("go", "build", "-o", relayBuild.bin, "github.com/execgo/exec-server/cmd/exec-relay")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			relayBuild.err = fmt.Errorf("building exec-relay: %w (run from the module root, or pass --relay BIN)", err)
		}
	})
	return relayBuild.bin, relayBuild.err
}

// relayRig is one path's processes and its SDK connection.
type relayRig struct {
	c     *client.Client
	procs []*exec.Cmd
	srv   *server // direct path
	pid   int     // the exec-server's pid
}

func (r *relayRig) close() {
	if r.c != nil {
		_ = r.c.Close()
	}
	if r.srv != nil {
		r.srv.close()
	}
	for i := len(r.procs) - 1; i >= 0; i-- {
		p := r.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
}

// openPath starts our server for path "direct" (a websocket server) or
// "relay" (exec-relay, and our server registered with it in remote mode)
// and connects the SDK.
func openPath(ctx context.Context, cfg *config, ours side, path string) (*relayRig, error) {
	if path == "direct" {
		srv, c, err := conn(ctx, ours, webSocket)
		if err != nil {
			return nil, err
		}
		return &relayRig{c: c, srv: srv, pid: srv.pid()}, nil
	}
	bin, err := relayBinary(cfg)
	if err != nil {
		return nil, err
	}
	execTok, harnTok := rand.Text(), rand.Text()
	tokDir, err := os.MkdirTemp(cfg.dir, "relay-")
	if err != nil {
		return nil, err
	}
	ef, hf := filepath.Join(tokDir, "executor"), filepath.Join(tokDir, "harness")
	if err := os.WriteFile(ef, []byte(execTok+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(hf, []byte(harnTok+"\n"), 0o600); err != nil {
		return nil, err
	}
	r := &relayRig{}
	relayErr := &tailbuf.Buffer{Max: 8192}
	rc := exec.Command(bin, "--listen", "127.0.0.1:0", "--executor-token-file", ef, "--harness-token-file", hf, "--log-level", "error")
	rc.Stderr = relayErr
	stdout, err := rc.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := rc.Start(); err != nil {
		return nil, err
	}
	r.procs = append(r.procs, rc)
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	base := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(base, "http://") {
		r.close()
		return nil, fmt.Errorf("exec-relay printed no base URL (%q, %v): %s", base, err, relayErr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, br) }()

	const env = "bench"
	sc := exec.Command(ours.bin, "--remote", base, "--environment-id", env)
	sc.Env = append(os.Environ(), "CODEX_API_KEY="+execTok)
	srvErr := &tailbuf.Buffer{Max: 8192}
	sc.Stderr = srvErr
	if err := sc.Start(); err != nil {
		r.close()
		return nil, err
	}
	r.procs = append(r.procs, sc)
	r.pid = sc.Process.Pid
	// The executor attaches asynchronously: a connect before it has
	// fails, so retry until the deadline.
	deadline := time.Now().Add(15 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r.c, err = client.DialRemote(dctx, base, env, harnTok, sdkOptions)
		cancel()
		if err == nil {
			return r, nil
		}
		if time.Now().After(deadline) {
			r.close()
			return nil, fmt.Errorf("relay: %v; exec-relay: %s; exec-server: %s", err, relayErr.String(), srvErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// relayInterleave is interleave over the two paths of our server.
func relayInterleave(cfg *config, sides []side, total, rounds int, open func(ctx context.Context, r *relayRig) (*runner, error)) []*stats {
	return interleave(cfg, relayPaths, webSocket, total, rounds, func(ctx context.Context, p side) (*runner, error) {
		r, err := openPath(ctx, cfg, sides[0], p.name)
		if err != nil {
			return nil, err
		}
		rn, err := open(ctx, r)
		if err != nil {
			r.close()
			return nil, err
		}
		inner := rn.close
		rn.close = func() {
			if inner != nil {
				inner()
			}
			r.close()
		}
		return rn, nil
	})
}

func relayRow(w, metric, unit string, higher bool, st []*stats) *row {
	r := mkrow(w, metric, unit, higher, webSocket, st)
	r.Target = relayTargets[w+"/"+metric]
	return r
}

// runRelaySpawn: a /bin/true start → closed round trip on each path.
func runRelaySpawn(cfg *config, sides []side, _ transportKind) []*row {
	st := relayInterleave(cfg, sides, cfg.spawnN, 6, func(_ context.Context, r *relayRig) (*runner, error) {
		var next int
		rn := &runner{}
		rn.take = func(n int) ([]float64, error) {
			ctx := timeout(2 * time.Minute)
			return rn.timed(n, &next, func(int) error { return roundTrip(ctx, cfg, r.c, "/bin/true") })
		}
		return rn, nil
	})
	return []*row{relayRow("relay-spawn", "latency", "ms", false, st)}
}

// runRelayTTY: a 1-byte echo through a raw pty on each path.
func runRelayTTY(cfg *config, sides []side, _ transportKind) []*row {
	st := relayInterleave(cfg, sides, cfg.ttyN, 5, func(ctx context.Context, r *relayRig) (*runner, error) {
		return startTTYEcho(ctx, cfg, r.c)
	})
	return []*row{relayRow("relay-tty-echo", "latency", "ms", false, st)}
}

// runRelayStream: a command's stdout of zeros read to the end on each
// path, with our server's CPU per GB (on the relay path it also does the
// encryption; the relay's own CPU is not counted).
func runRelayStream(cfg *config, sides []side, _ transportKind) []*row {
	n := min(cfg.streamBytes, 256<<20)
	var mu sync.Mutex
	cpu := map[string][]float64{}
	st := relayInterleave(cfg, sides, cfg.streamRuns, cfg.streamRuns, func(_ context.Context, r *relayRig) (*runner, error) {
		path := "direct"
		if r.srv == nil {
			path = "relay"
		}
		return &runner{take: func(k int) ([]float64, error) {
			var xs []float64
			for range k {
				ctx := timeout(2 * time.Minute)
				c0 := cpuSeconds(r.pid)
				t0 := time.Now()
				var z zeroCounter
				p, err := r.c.Start(ctx, command(cfg, zeroCmd(n)...))
				if err == nil {
					_, err = io.Copy(&z, p.Stdout())
				}
				if err == nil {
					_, err = p.Wait(ctx)
				}
				el := time.Since(t0)
				if err != nil {
					return xs, err
				}
				if z.n != n || z.bad {
					return xs, fmt.Errorf("stream: got %d bytes (want %d), non-zero bytes: %v", z.n, n, z.bad)
				}
				xs = append(xs, float64(n)/el.Seconds()/1e6)
				mu.Lock()
				cpu[path] = append(cpu[path], (cpuSeconds(r.pid)-c0)/(float64(n)/1e9))
				mu.Unlock()
			}
			return xs, nil
		}}, nil
	})
	cr := relayRow("relay-stream", "server-cpu", "s/GB", false, []*stats{summarize(cpu["relay"], nil), summarize(cpu["direct"], nil)})
	return []*row{relayRow("relay-stream", "throughput", "MB/s", true, st), cr}
}

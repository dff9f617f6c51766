package main

// Rows of exec-bench fleet that measure the relay rather than its
// clients: raw executors and harnesses speak the relay's frame protocol
// (RelayMessageFrame, remote/frame) with opaque payloads. The relay never
// decrypts a frame (it reads the stream id and the body kind, nothing
// else), so what it does per frame is the same as with Noise-encrypted
// payloads; the Noise end-to-end clients stay for the correctness and
// latency rows (rtt_1k_*, stream_MBps_*). On a 2-core machine the Noise
// clients, not the relay, were the limit of the frames/s row.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/internal/rawsock"
	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
)

const rawProfile = "noise_hybrid_ik_v1"

// rawPost posts body to base/cloud/environment/env/verb and returns the
// answer's "url".
func (b *fleetBench) rawPost(ctx context.Context, base, env, verb, token string, body any) (string, int, error) {
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/cloud/environment/"+env+"/"+verb, bytes.NewReader(data))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := b.client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return "", resp.StatusCode, fmt.Errorf("%s %s: %d %s", verb, env, resp.StatusCode, rb)
	}
	var out struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(rb, &out); err != nil || out.URL == "" {
		return "", resp.StatusCode, fmt.Errorf("%s %s: no url in %s", verb, env, rb)
	}
	return out.URL, resp.StatusCode, nil
}

func rawKey() noise.PublicKey {
	kp, err := noise.GenerateKeypair()
	if err != nil {
		panic(err)
	}
	return kp.Public()
}

// gatherConn is a raw client's socket: writes gather in a buffer that goes
// out in one write when flushed, when it passes 64 KiB, or before a read
// would wait on the network (so whatever was written is out before the
// client waits for an answer). So the raw clients write many frames per
// syscall when they have many in hand (the frames/s rows), and one per
// syscall when they have one (the round-trip rows): the relay's work per
// frame is the same either way, and the clients, which share the 2 cores
// with the relays, cost less.
type gatherConn struct {
	net.Conn
	br       *bufio.Reader
	mu       sync.Mutex
	wbuf     []byte
	gather   atomic.Bool // off until the websocket handshake is done
	writeErr error
}

func (c *gatherConn) Write(p []byte) (int, error) {
	if !c.gather.Load() {
		return c.Conn.Write(p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writeErr != nil {
		return 0, c.writeErr
	}
	c.wbuf = append(c.wbuf, p...)
	if len(c.wbuf) >= 64<<10 {
		c.flushLocked()
	}
	return len(p), c.writeErr
}

func (c *gatherConn) flushLocked() {
	if len(c.wbuf) > 0 && c.writeErr == nil {
		_, c.writeErr = c.Conn.Write(c.wbuf)
	}
	c.wbuf = c.wbuf[:0]
}

// Flush writes what was gathered.
func (c *gatherConn) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushLocked()
	return c.writeErr
}

func (c *gatherConn) Read(p []byte) (int, error) {
	if c.br.Buffered() == 0 {
		if err := c.Flush(); err != nil {
			return 0, err
		}
	}
	return c.br.Read(p)
}

// rawDial dials url's websocket; at ("host:port"), if set, is dialled
// instead of url's host (a node directly, not the balancer: the URL's
// signature does not cover its host).
func rawDial(ctx context.Context, url, at string) (*websocket.Conn, *gatherConn, error) {
	var rc *gatherConn
	var d net.Dialer
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if at != "" {
			addr = at
		}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Raw syscalls, as the relay's and the forwarder's sockets:
		// the clients share the two cores with the relays.
		conn = rawsock.Wrap(conn)
		rc = &gatherConn{Conn: conn, br: bufio.NewReaderSize(conn, 64<<10)}
		return rc, nil
	}}
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		return nil, nil, err
	}
	rc.gather.Store(true)
	c.SetReadLimit(1 << 20)
	return c, rc, nil
}

// rawExecutor registers env at base, dials its socket (at at, if set:
// rawDial) and echoes every frame until ctx ends.
func (b *fleetBench) rawExecutor(ctx context.Context, base, env, at string) error {
	url, _, err := b.rawPost(ctx, base, env, "register", fleetExecToken,
		map[string]any{"security_profile": rawProfile, "executor_public_key": rawKey()})
	if err != nil {
		return err
	}
	c, _, err := rawDial(ctx, url, at)
	if err != nil {
		return err
	}
	// Echoes gather until the socket has nothing more to read (gatherConn).
	go func() {
		defer c.CloseNow()
		ioctx, stop := rawIOContext(ctx, c)
		defer stop()
		for {
			typ, r, err := c.Reader(ioctx)
			if err != nil {
				return
			}
			w, err := c.Writer(ioctx, typ)
			if err != nil {
				return
			}
			if _, err := io.Copy(w, r); err != nil || w.Close() != nil {
				return
			}
		}
	}()
	return nil
}

// rawHarness connects to env through base (retrying while its home is
// not known yet) and dials the harness socket (at at, if set: rawDial).
func (b *fleetBench) rawHarness(ctx context.Context, base, env, at string) (*websocket.Conn, *gatherConn, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		url, _, err := b.rawPost(dctx, base, env, "connect", fleetHarnessToken, map[string]any{"harness_public_key": rawKey()})
		if err == nil {
			c, rc, derr := rawDial(dctx, url, at)
			if derr == nil {
				return c, rc, nil
			}
			err = derr
		}
		if dctx.Err() != nil {
			return nil, nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rawIOContext is the context the raw clients pass to each read and
// write of c: one that never ends, so the library does not register a
// cancellation for every message (context.AfterFunc, an allocation and
// the parent's lock each time: the clients share the two cores with the
// relays they measure), with c closed instead when ctx ends; stop ends
// that watch.
func rawIOContext(ctx context.Context, c *websocket.Conn) (context.Context, func() bool) {
	return context.WithoutCancel(ctx), context.AfterFunc(ctx, func() { c.CloseNow() })
}

// rawSID is stream i's id (a UUID, as harnesses use).
func rawSID(i int) string { return fmt.Sprintf("0f8b1d2e-aaaa-4bbb-8ccc-%012d", i) }

// rawRTT echoes n frames of size payload bytes one at a time on each of
// conns, taking the sockets in turn (one frame on each, then again), so
// that every path's samples are taken over the same moments of a shared
// machine and their differences are not the machine's drift between rows:
// p50 and p99 in µs for each. Each frame is its own write (the read that
// waits for its echo flushes it). Socket j sends on stream rawSID(rttSID+j)
// (the frames/s rows' streams are 0..k-1).
func rawRTT(ctx context.Context, conns []*websocket.Conn, size, n int) (p50, p99 []float64, err error) {
	msgs := make([][]byte, len(conns))
	for j := range conns {
		msgs[j] = frame.Data(rawSID(rttSID+j), 1, bytes.Repeat([]byte("r"), size)).Marshal()
	}
	s := make([][]float64, len(conns))
	var ioctx context.Context
	for _, c := range conns {
		var stop func() bool
		ioctx, stop = rawIOContext(ctx, c)
		defer stop()
	}
	for range n {
		for j, c := range conns {
			t0 := time.Now()
			if err := c.Write(ioctx, websocket.MessageBinary, msgs[j]); err != nil {
				return nil, nil, err
			}
			if _, _, err := c.Read(ioctx); err != nil {
				return nil, nil, err
			}
			s[j] = append(s[j], float64(time.Since(t0).Nanoseconds())/1000)
		}
	}
	for j := range conns {
		p50, p99 = append(p50, pct(s[j], 50)), append(p99, pct(s[j], 99))
	}
	return p50, p99, nil
}

// rttSID: the round-trip rows' first stream id.
const rttSID = 1 << 20

// rawPump sends frames of size payload bytes on every socket for d, at
// most window in flight on each, and reads the echoes: frames per second
// each way and payload bytes carried one way.
func rawPump(ctx context.Context, conns []*websocket.Conn, rcs []*gatherConn, size, window int, d time.Duration) (float64, int64, error) {
	var frames atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 2*len(conns))
	t0 := time.Now()
	stop := t0.Add(d)
	for i, c := range conns {
		msg := frame.Data(rawSID(i), 1, bytes.Repeat([]byte("f"), size)).Marshal()
		// The last frame, shorter than the others, tells the reader
		// every echo is in (frames of one stream stay in order).
		last := frame.Data(rawSID(i), 2, nil).Marshal()
		inflight := make(chan struct{}, window)
		rc := rcs[i]
		ioctx, stopIO := rawIOContext(ctx, c)
		defer stopIO()
		wg.Add(2)
		go func() {
			defer wg.Done()
			fail := func(err error) {
				errc <- err
				c.CloseNow() // the reader waits for nothing more
			}
			for time.Now().Before(stop) {
				// As many frames as the window allows now, then one
				// write for all of them.
				inflight <- struct{}{}
				for more := true; more; {
					if err := c.Write(ioctx, websocket.MessageBinary, msg); err != nil {
						fail(err)
						return
					}
					select {
					case inflight <- struct{}{}:
					default:
						more = false
					}
				}
				if err := rc.Flush(); err != nil {
					fail(err)
					return
				}
			}
			if err := c.Write(ioctx, websocket.MessageBinary, last); err != nil {
				fail(err)
				return
			}
			if err := rc.Flush(); err != nil {
				fail(err)
			}
		}()
		go func() {
			defer wg.Done()
			for {
				_, r, err := c.Reader(ioctx)
				if err != nil {
					errc <- err
					return
				}
				n, err := io.Copy(io.Discard, r)
				if err != nil {
					errc <- err
					return
				}
				if n == int64(len(last)) {
					return
				}
				frames.Add(1)
				<-inflight
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	select {
	case err := <-errc:
		return 0, 0, err
	default:
	}
	n := frames.Load()
	return round3(float64(n) / el), n * int64(size), nil
}

// rawProcCPU is procCPU with the single-node relay.
func (b *fleetBench) rawProcCPU() map[string]float64 {
	out := b.procCPU()
	if b.single != nil {
		out["single"] = pidCPU(b.single.cmd.Process.Pid)
	}
	if b.forwarder != nil {
		out["forwarder"] = pidCPU(b.forwarder.cmd.Process.Pid)
	}
	return out
}

// procCounts sums, over procs' live processes: read and write syscalls
// (/proc/PID/io) and voluntary and involuntary context switches of all
// their threads (readProc).
func procCounts(procs []*fleetProc) [4]int64 {
	var c [4]int64
	for _, n := range procs {
		if n == nil || n.dead.Load() {
			continue
		}
		s := readProc(n.cmd.Process.Pid)
		c[0] += int64(s.syscr)
		c[1] += int64(s.syscw)
		c[2] += int64(s.ctxsw - s.nvcsw)
		c[3] += int64(s.nvcsw)
	}
	return c
}

// machineBusy is the host's non-idle CPU seconds so far (/proc/stat).
func machineBusy() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest is in user
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x
	}
	return busy / 100 // USER_HZ
}

// sumCPU is the CPU seconds (utime + stime) of the live processes so far.
func sumCPU(procs []*fleetProc) float64 {
	var total float64
	for _, n := range procs {
		if n != nil && !n.dead.Load() {
			total += pidCPU(n.cmd.Process.Pid)
		}
	}
	return total
}

// rawRows measures the three paths with raw frame clients: the
// single-node relay, a fleet node with the harness on the executor's node
// (local), and the harness on another node (cross). k raw executors per
// path echo frames.
func (b *fleetBench) rawRows(ctx context.Context, out map[string]any, k int, d time.Duration) error {
	type path struct {
		name      string
		regBase   string // where executors register
		connBase  string // where harnesses connect
		procs     []*fleetProc
		envPrefix string
		// withNATS: procs and the NATS process (with external NATS; an
		// embedded server's CPU is already in its node's).
		withNATS []*fleetProc
		// direct: the harness sockets are dialled at the node the
		// balancer would pick (port connPort), not through the balancer,
		// which is this process's code on the same two cores. The raw
		// executors' sockets are dialled so on every path (the fleet's
		// registry holds 1 024: no second set of environments).
		direct   bool
		connPort int
		// at: the harness sockets are dialled here (the forwarder).
		at string
	}
	fwd, fwdAddr, stopFwd, err := startForwarder(b.single.base)
	if err != nil {
		return err
	}
	b.forwarder = fwd
	defer func() { stopFwd(); b.forwarder = nil }()
	paths := []path{
		{name: "single", regBase: b.single.base, connBase: b.single.base, procs: []*fleetProc{b.single}, envPrefix: "rawsingle-"},
		// The harness sockets through a bare forwarding process
		// (fleetfwd.go): the floor of one more process on the path. Its
		// relay CPU rows are the single node's alone.
		{name: "single_forwarded", regBase: b.single.base, connBase: b.single.base, procs: []*fleetProc{b.single}, envPrefix: "rawsingle-", at: fwdAddr},
		{name: "local", regBase: b.lb.url(0), connBase: b.lb.url(0), procs: b.nodes, envPrefix: "rawfleet-"},
		{name: "cross", regBase: b.lb.url(0), connBase: b.lb.url(1), procs: b.nodes, envPrefix: "rawfleet-"},
		{name: "local_direct", regBase: b.lb.url(0), connBase: b.lb.url(0), procs: b.nodes, envPrefix: "rawfleet-", direct: true},
		{name: "cross_direct", regBase: b.lb.url(0), connBase: b.lb.url(1), procs: b.nodes, envPrefix: "rawfleet-", direct: true, connPort: 1},
	}
	for i := range paths {
		paths[i].withNATS = paths[i].procs
		if paths[i].procs[0] != b.single && b.natsProc != nil {
			paths[i].withNATS = append(append([]*fleetProc{}, b.nodes...), b.natsProc)
		}
	}
	registered := map[string]bool{}
	for _, p := range paths {
		if registered[p.envPrefix] {
			continue
		}
		registered[p.envPrefix] = true
		for i := range k {
			env, at := fmt.Sprint(p.envPrefix, i), ""
			if p.regBase != b.single.base {
				at = b.lb.nodeAddr(env, 0)
			}
			if err := b.rawExecutor(ctx, p.regBase, env, at); err != nil {
				return fmt.Errorf("raw executor: %w", err)
			}
		}
	}
	// The harness socket of environment i on path p.
	harness := func(p path, i int) (*websocket.Conn, *gatherConn, error) {
		env, at := fmt.Sprint(p.envPrefix, i), ""
		if p.direct {
			at = b.lb.nodeAddr(env, p.connPort)
		}
		if p.at != "" {
			at = p.at
		}
		return b.rawHarness(ctx, p.connBase, env, at)
	}
	// The round trips of every path in one loop (rawRTT).
	var rttConns []*websocket.Conn
	for _, p := range paths {
		c, _, err := harness(p, 0)
		if err != nil {
			return fmt.Errorf("raw %s harness: %w", p.name, err)
		}
		defer c.CloseNow()
		rttConns = append(rttConns, c)
	}
	p50s, p99s, err := rawRTT(ctx, rttConns, 1024, 2000)
	if err != nil {
		return fmt.Errorf("raw rtt: %w", err)
	}
	for j, p := range paths {
		out["raw_rtt_1k_p50_us_"+p.name], out["raw_rtt_1k_p99_us_"+p.name] = p50s[j], p99s[j]
		rttConns[j].CloseNow()
	}
	for _, p := range paths {
		var conns []*websocket.Conn
		var rcs []*gatherConn
		for i := range k {
			c, rc, err := harness(p, i)
			if err != nil {
				return fmt.Errorf("raw %s harness: %w", p.name, err)
			}
			conns = append(conns, c)
			rcs = append(rcs, rc)
		}
		cpu0, cpuN := sumCPU(p.procs), sumCPU(p.withNATS)
		pc0, busy0, t0 := b.rawProcCPU(), machineBusy(), time.Now()
		sc0 := procCounts(p.procs)
		fps, _, err := rawPump(ctx, conns, rcs, 1024, 64, d)
		if err != nil {
			return fmt.Errorf("raw %s frames: %w", p.name, err)
		}
		// What bounds the row: the cores each process used while it ran
		// ("bench" is this process, whose raw clients both send and
		// echo; "machine" is every process on the host, others' too).
		el := time.Since(t0).Seconds()
		sc1 := procCounts(p.procs)
		machine := (machineBusy() - busy0) / el
		cores := map[string]float64{"machine": round3(machine)}
		ours := 0.0
		for name, v := range b.rawProcCPU() {
			cores[name] = round3((v - pc0[name]) / el)
			ours += (v - pc0[name]) / el
		}
		// Everything else on the host: other engineers' work, kernel
		// threads.
		cores["others"] = round3(machine - ours)
		out["raw_cores_during_frames_"+p.name] = cores
		// The relays' syscalls and thread switches per frame carried
		// (each way counted, as the CPU per frame).
		if carried := fps * el * 2; carried > 0 {
			per := map[string]float64{}
			for i, k := range []string{"read_syscalls", "write_syscalls", "voluntary_switches", "involuntary_switches"} {
				per[k] = round3(float64(sc1[i]-sc0[i]) / carried)
			}
			out["raw_relay_per_1k_frame_"+p.name] = per
			out["raw_client_cpu_us_per_1k_frame_"+p.name] = round3(cores["bench"] * el / carried * 1e6)
		}
		out[fmt.Sprintf("raw_1k_frames_per_s_each_way_%d_streams_%s", k, p.name)] = fps
		out["raw_relay_cpu_us_per_1k_frame_"+p.name] = round3((sumCPU(p.procs) - cpu0) / (fps * d.Seconds() * 2) * 1e6)
		out["raw_relay_nats_cpu_us_per_1k_frame_"+p.name] = round3((sumCPU(p.withNATS) - cpuN) / (fps * d.Seconds() * 2) * 1e6)
		cpu0, cpuN = sumCPU(p.procs), sumCPU(p.withNATS)
		_, bytes, err := rawPump(ctx, conns[:1], rcs[:1], 60<<10, 16, d)
		if err != nil {
			return fmt.Errorf("raw %s stream: %w", p.name, err)
		}
		out["raw_stream_MBps_"+p.name] = round3(float64(bytes) / d.Seconds() / 1e6)
		if bytes > 0 {
			out["raw_relay_cpu_s_per_GB_"+p.name] = round3((sumCPU(p.procs) - cpu0) / (float64(bytes) * 2 / 1e9))
			out["raw_relay_nats_cpu_s_per_GB_"+p.name] = round3((sumCPU(p.withNATS) - cpuN) / (float64(bytes) * 2 / 1e9))
		}
		for _, c := range conns {
			c.CloseNow()
		}
	}
	ratio := func(key, a, bb string) {
		x, ok1 := out[key+a].(float64)
		y, ok2 := out[key+bb].(float64)
		if ok1 && ok2 && y > 0 {
			out[key+a+"_vs_"+bb] = round3(x / y)
		}
	}
	ratio("raw_stream_MBps_", "cross", "local")
	ratio("raw_stream_MBps_", "cross", "single")
	ratio("raw_stream_MBps_", "cross_direct", "local_direct")
	ratio("raw_stream_MBps_", "single_forwarded", "single")
	if x, ok := out["raw_rtt_1k_p50_us_cross"].(float64); ok {
		out["raw_added_rtt_p50_us_cross_vs_local"] = round3(x - out["raw_rtt_1k_p50_us_local"].(float64))
		out["raw_added_rtt_p50_us_cross_vs_single"] = round3(x - out["raw_rtt_1k_p50_us_single"].(float64))
	}
	if x, ok := out["raw_rtt_1k_p50_us_single_forwarded"].(float64); ok {
		out["raw_added_rtt_p50_us_single_forwarded_vs_single"] = round3(x - out["raw_rtt_1k_p50_us_single"].(float64))
	}
	if x, ok := out["raw_rtt_1k_p50_us_cross_direct"].(float64); ok {
		out["raw_added_rtt_p50_us_cross_direct_vs_local_direct"] = round3(x - out["raw_rtt_1k_p50_us_local_direct"].(float64))
		out["raw_added_rtt_p50_us_cross_direct_vs_single"] = round3(x - out["raw_rtt_1k_p50_us_single"].(float64))
	}
	out["raw_note"] = "raw_*: clients speak the relay frame protocol with opaque payloads (the relay never decrypts); the clients gather their writes (the frames/s and stream rows write every frame the window allows in one syscall, executors echo what they read in one write; the round-trip rows write one frame at a time, one socket per path taken in turn, so every path's round trips are sampled over the same moments), the relay's work per frame being the same; the raw executors' sockets are dialled at the node the balancer would pick (not through the balancer, which is this process's code); the harnesses' of local and cross go through the balancer (each frame crosses it once more each way), those of local_direct and cross_direct to the node directly, as single's; single_forwarded is single with the harnesses' sockets through a bare forwarding process (reads and writes bytes, nothing else: the floor of one more process on the path, as a cross-node frame crosses one more relay than a node-local one); relay CPU is the relay processes' utime+stime, both directions counted; raw_relay_nats_*: the same plus the NATS process's (external NATS; an embedded server's CPU is its node's)"
	return nil
}

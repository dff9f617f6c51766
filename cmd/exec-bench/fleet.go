package main

// exec-bench fleet: exec-relay as a fleet of three nodes on NATS, against
// the single-node relay, in one run (remote/relay/fabric.go, docs/remote.md
// "Scaling out").
//
//	go run ./cmd/exec-bench fleet --executors 1000 --nodes 3
//
// It starts a NATS server (JetStream on; this binary re-executed as
// "fleet-nats", so no external binary is needed) in a process of its own, one
// exec-relay process without NATS (the baseline) and --nodes exec-relay
// processes with --nats-url, and a load balancer in this process with two
// ports: "affinity" hashes the environment id of each request's path to a
// node (as an L7 balancer hashing on the {env} segment would), "skew"
// sends it to the next node, so that a harness dialled through it lands
// on another node than its executor. Executors (remote/executor, real
// register, Noise and validate, serving an echo) and the harness streams
// measured across the kill (remote/harness, reliability extension on) run
// in --client-procs worker processes each (fleetclient.go), so that their
// scheduling is not counted as the relay's; the latency, throughput and
// admission probes run in this process. Midway
// it SIGKILLs the first node and measures recovery. It prints one JSON
// line.
//
// The raw_* rows (fleetraw.go) measure the relay rather than its
// clients: raw executors and harnesses speak the relay frame protocol
// with opaque payloads (the relay never decrypts), single node, fleet
// node-local and cross-node side by side.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/executor"
	"github.com/execgo/exec-server/remote/harness"
)

// The subcommand needs no hook in main: it takes over before main's flags
// are parsed.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "fleet" {
		os.Exit(fleetMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "fleet-client" {
		os.Exit(fleetClientMain(os.Args[2:]))
	}
	if len(os.Args) > 2 && os.Args[1] == "fleet-forward" {
		os.Exit(fleetForward(os.Args[2]))
	}
	if len(os.Args) > 2 && os.Args[1] == "fleet-nats" {
		os.Exit(fleetNATS(os.Args[2]))
	}
}

// fleetNATS is the benchmark's NATS server, in a process of its own (as
// in production, and so that the executors and streams this process
// simulates do not share its scheduler): it prints its client URL, answers
// "stats" on stdin with a JSON line, and exits when stdin closes.
func fleetNATS(storeDir string) int {
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: storeDir, NoLog: true, NoSigs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		fmt.Fprintln(os.Stderr, "nats not ready")
		return 1
	}
	fmt.Println(ns.ClientURL())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "stats" {
			b, _ := json.Marshal(map[string]any{"slow_consumers": ns.NumSlowConsumers(), "pid": os.Getpid()})
			fmt.Println(string(b))
		}
	}
	ns.Shutdown()
	return 0
}

const (
	fleetExecToken    = "bench-exec-token"
	fleetHarnessToken = "bench-harness-token"
)

type fleetBench struct {
	dir      string
	relayBin string
	// peerLinks: the nodes run with --peer-listen (legs' frames on direct links).
	peerLinks bool
	log       *slog.Logger
	nodes     []*fleetProc
	lb        *fleetLB
	single    *fleetProc
	forwarder *fleetProc // the raw rows' bare forwarder (fleetfwd.go)
	client    *http.Client

	// The node kill's figures (kill_timeline).
	mu        sync.Mutex
	cpuAround map[string][2]float64
	natsPID   int
	natsProc  *fleetProc // the NATS process (its CPU counted in raw_relay_nats_*)

	// The client worker processes (fleetclient.go).
	clients       []*fleetClient
	execClients   []int // pids
	streamClients []*fleetClient
}

type fleetProc struct {
	name string
	base string
	cmd  *exec.Cmd
	dead atomic.Bool
}

func fleetMain(args []string) int {
	fs := flag.NewFlagSet("exec-bench fleet", flag.ContinueOnError)
	executors := fs.Int("executors", 1000, "executors registered through the fleet")
	nodes := fs.Int("nodes", 3, "relay nodes")
	streams := fs.Int("streams", 0, "reliable harness streams moving data across the node kill (default min(300, executors))")
	relayBin := fs.String("relay", "", "exec-relay binary (default: go build ./cmd/exec-relay)")
	after := fs.Duration("after-kill", 8*time.Second, "how long streams run after the node kill")
	jsonOut := fs.String("json", "", "also write the JSON line to this file")
	clientProcs := fs.Int("client-procs", 2, "worker processes for the executors, and as many for the streams across the kill (clients out of this process, so that their scheduling is not measured as the relay's)")
	peerLinks := fs.Bool("peer-links", true, "relay nodes link to each other directly for legs' frames (exec-relay --peer-listen); false: frames cross through NATS")
	rawStreams := fs.Int("raw-streams", 16, "streams of the raw_* rows (raw frame clients, opaque payloads: the relay measured, not Noise); 0 skips them")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *streams <= 0 {
		*streams = min(300, *executors)
	}
	if *nodes < 2 || *executors < 2 {
		fmt.Fprintln(os.Stderr, "exec-bench fleet: --nodes and --executors must be at least 2")
		return 2
	}
	raiseNoFile()
	dir, err := os.MkdirTemp("", "exec-bench-fleet-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	b := &fleetBench{dir: dir, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, peerLinks: *peerLinks}
	defer b.stop()
	out, err := b.run(*relayBin, *nodes, *executors, *streams, *rawStreams, *clientProcs, *after)
	if err != nil {
		fmt.Fprintf(os.Stderr, "exec-bench fleet: %v\n", err)
		return 1
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
	if *jsonOut != "" {
		os.WriteFile(*jsonOut, append(line, '\n'), 0o644)
	}
	return 0
}

func (b *fleetBench) stop() {
	b.stopClients()
	for _, p := range append(b.nodes, b.single) {
		if p != nil && !p.dead.Load() {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	}
	if b.lb != nil {
		b.lb.close()
	}
}

func (b *fleetBench) startRelay(name string, extra ...string) (*fleetProc, error) {
	secret := filepath.Join(b.dir, "secret")
	etok := filepath.Join(b.dir, "etok")
	htok := filepath.Join(b.dir, "htok")
	os.WriteFile(secret, []byte(strings.Repeat("s", 48)), 0o600)
	os.WriteFile(etok, []byte(fleetExecToken+"\n"), 0o600)
	os.WriteFile(htok, []byte(fleetHarnessToken+"\n"), 0o600)
	args := append([]string{"--listen", "127.0.0.1:0", "--url-secret-file", secret,
		"--executor-token-file", etok, "--harness-token-file", htok, "--log-level", "warn"}, extra...)
	cmd := exec.Command(b.relayBin, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &fleetProc{name: name, base: strings.TrimSpace(line), cmd: cmd}, nil
}

// run is the whole benchmark; the result is the JSON line.
func (b *fleetBench) run(relayBin string, nNodes, nExec, nStreams, rawK, procs int, after time.Duration) (map[string]any, error) {
	out := map[string]any{"bench": "fleet", "nodes": nNodes, "executors": nExec, "streams": nStreams, "client_procs": procs, "peer_links": b.peerLinks}
	b.relayBin = relayBin
	if b.relayBin == "" {
		b.relayBin = filepath.Join(b.dir, "exec-relay")
		build := exec.Command("go", "build", "-o", b.relayBin, "github.com/execgo/exec-server/cmd/exec-relay")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("building exec-relay: %w (run from the module root, or pass --relay)", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	natsCmd := exec.Command(self, "fleet-nats", filepath.Join(b.dir, "js"))
	natsCmd.Stderr = os.Stderr
	natsIn, _ := natsCmd.StdinPipe()
	natsOutPipe, _ := natsCmd.StdoutPipe()
	if err := natsCmd.Start(); err != nil {
		return nil, err
	}
	defer func() { natsIn.Close(); natsCmd.Wait() }()
	natsOut := bufio.NewReader(natsOutPipe)
	natsURL, err := natsOut.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	natsURL = strings.TrimSpace(natsURL)
	b.natsPID = natsCmd.Process.Pid
	b.natsProc = &fleetProc{name: "nats", cmd: natsCmd}

	if b.single, err = b.startRelay("single"); err != nil {
		return nil, err
	}
	for i := range nNodes {
		args := []string{"--nats-url", natsURL, "--node-name", fmt.Sprint("n", i)}
		if b.peerLinks {
			args = append(args, "--peer-listen", "127.0.0.1:0")
		}
		p, err := b.startRelay(fmt.Sprint("n", i), args...)
		if err != nil {
			return nil, err
		}
		b.nodes = append(b.nodes, p)
	}
	if b.lb, err = startFleetLB(b.nodes); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Baseline: the single-node relay, one executor, one stream.
	if err := b.startExecutors(b.single.base, "single-", 0, 1, 1); err != nil {
		return nil, err
	}
	if err := b.waitSockets([]*fleetProc{b.single}, 1, 30*time.Second); err != nil {
		return nil, err
	}

	// The fleet's executors, through the affinity port.
	start := time.Now()
	// The environments of the streams measured across the kill
	// (env-1..env-nStreams) in workers of their own, the others in
	// theirs: the 332 executors redialling after the kill would
	// otherwise share a process with the unaffected streams' executors
	// and show their own scheduling as those streams' gaps.
	nMeasured := min(nStreams, nExec-1)
	if err := b.startExecutors(b.lb.url(0), "env-", 0, nMeasured+1, procs); err != nil {
		return nil, err
	}
	if rest := nExec - nMeasured - 1; rest > 0 {
		if err := b.startExecutors(b.lb.url(0), "env-", nMeasured+1, rest, procs); err != nil {
			return nil, err
		}
	}
	if err := b.waitSockets(b.nodes, nExec, 120*time.Second); err != nil {
		return nil, err
	}
	out["executors_attached_s"] = secs(time.Since(start))

	// Latency and throughput, same run: single node, fleet node-local,
	// fleet cross-node (1 KiB messages echoed).
	paths := []struct{ name, base, env string }{
		{"single", b.single.base, "single-0"},
		{"local", b.lb.url(0), "env-0"},
		{"cross", b.lb.url(1), "env-0"},
	}
	// The nodes' upkeep with nothing carried (the executors' sockets,
	// heartbeats, NATS): the relay CPU per GB rows below count every
	// node's CPU over their 2 s, so the _net_of_idle ones take this out.
	idle0, idleT := b.relayCPU(), time.Now()
	time.Sleep(2 * time.Second)
	idleCores := (b.relayCPU() - idle0) / time.Since(idleT).Seconds()
	out["relay_idle_cores"] = round3(idleCores)
	for _, p := range paths {
		ch, err := b.dial(ctx, p.base, p.env)
		if err != nil {
			return nil, fmt.Errorf("%s stream: %w", p.name, err)
		}
		rcl0 := b.noiseClientCPU()
		p50, p99, err := fleetRTT(ctx, ch, 1024, 2000)
		if err != nil {
			return nil, fmt.Errorf("%s rtt: %w", p.name, err)
		}
		out["client_cpu_us_per_rtt_"+p.name] = round3((b.noiseClientCPU() - rcl0) / 2000 * 1e6)
		out["rtt_1k_p50_us_"+p.name], out["rtt_1k_p99_us_"+p.name] = p50, p99
		cpu0, t0 := b.relayCPU(), time.Now()
		cl0 := b.noiseClientCPU()
		mbps, bytes, err := fleetThroughput(ctx, ch, 60<<10, 2*time.Second)
		if err != nil {
			return nil, fmt.Errorf("%s throughput: %w", p.name, err)
		}
		out["stream_MBps_"+p.name] = mbps
		if bytes > 0 {
			out["client_cpu_s_per_GB_"+p.name] = round3((b.noiseClientCPU() - cl0) / (float64(bytes) * 2 / 1e9))
		}
		if p.name != "single" && bytes > 0 {
			cpu, gb := b.relayCPU()-cpu0, float64(bytes)*2/1e9
			out["relay_cpu_s_per_GB_"+p.name] = round3(cpu / gb)
			out["relay_cpu_s_per_GB_net_of_idle_"+p.name] = round3(max(0, cpu-idleCores*time.Since(t0).Seconds()) / gb)
		}
		ch.Close()
	}
	out["client_note"] = "client_cpu_s_per_GB_*, client_cpu_us_per_rtt_*: the Noise rows' clients, both directions counted: this process (the harness; for local and cross also the balancer) and the executors' worker processes (all 1 000 executors' upkeep included)"
	out["added_rtt_p50_us_cross_vs_local"] = round3(out["rtt_1k_p50_us_cross"].(float64) - out["rtt_1k_p50_us_local"].(float64))
	out["added_rtt_p50_us_cross_vs_single"] = round3(out["rtt_1k_p50_us_cross"].(float64) - out["rtt_1k_p50_us_single"].(float64))
	if l := out["stream_MBps_local"].(float64); l > 0 {
		out["stream_ratio_cross_vs_local"] = round3(out["stream_MBps_cross"].(float64) / l)
	}
	fps, err := b.framesPerSecond(ctx, 1, 16, 2*time.Second)
	if err != nil {
		return nil, err
	}
	out["cross_1k_msgs_per_s_each_way_16_streams"] = fps
	// Affinity: the same through the env-hash port; the share of routed
	// frames that did not cross nodes, from the nodes' counters.
	before := b.scrape(b.nodes)
	if fps, err = b.framesPerSecond(ctx, 0, 16, 2*time.Second); err != nil {
		return nil, err
	}
	out["local_1k_msgs_per_s_each_way_16_streams"] = fps
	afterM := b.scrape(b.nodes)
	var routed, crossed float64
	for i := range afterM {
		routed += afterM[i]["exec_relay_frames_routed_total"] - before[i]["exec_relay_frames_routed_total"]
		crossed += afterM[i]["exec_relay_fleet_frames_in_total"] - before[i]["exec_relay_fleet_frames_in_total"]
	}
	if routed > 0 {
		out["affinity_node_local_fraction"] = round3(1 - crossed/routed)
	}
	if rawK > 0 {
		// The relay itself (fleetraw.go): raw frame clients.
		if err := b.rawRows(ctx, out, rawK, 3*time.Second); err != nil {
			return nil, err
		}
	}

	// Streams across the kill: half node-local, half cross-node, in
	// worker processes of their own (fleetclient.go).
	specs := make([][]fleetStreamSpec, max(1, min(procs, nStreams)))
	for i := range nStreams {
		sp := fleetStreamSpec{Env: fmt.Sprint("env-", 1+i%(nExec-1)), Port: i % 2}
		specs[i%len(specs)] = append(specs[i%len(specs)], sp)
	}
	openErrs := 0
	for _, sp := range specs {
		c, err := b.startClient("streams", b.lb.url(0), b.lb.url(1))
		if err != nil {
			return nil, err
		}
		b.streamClients = append(b.streamClients, c)
		line, _ := json.Marshal(sp)
		c.send(string(line))
	}
	for _, c := range b.streamClients {
		var st struct {
			OpenErrors int `json:"open_errors"`
		}
		line, err := c.out.ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &st)
		}
		if err != nil {
			return nil, fmt.Errorf("stream worker: %w", err)
		}
		openErrs += st.OpenErrors
	}
	// Where each stream's sockets are, before the kill moves them.
	nodesOf := map[fleetStreamSpec][2]int{}
	for _, sps := range specs {
		for _, sp := range sps {
			nodesOf[sp] = [2]int{b.lb.execNode(sp.Env), b.lb.harnessNode(sp.Env, sp.Port)}
		}
	}
	out["stream_open_errors"] = openErrs
	var killAt atomic.Int64 // for the admission probe
	broadcast := func(line string) {
		for _, c := range b.streamClients {
			c.send(line)
		}
	}
	out["rss_MB_per_node_before_kill"] = b.rssMB(b.nodes)
	out["mem_per_node_before_kill"] = b.memOf(b.nodes)
	broadcast(fmt.Sprint("steady ", time.Now().UnixNano()))
	// Admission across the kill (fleetadmit.go): new streams to
	// environments homed on the survivors, from 2 s before the kill to
	// 5 s after it.
	adm := &admission{}
	admDone := make(chan struct{})
	go func() {
		defer close(admDone)
		b.admitProbe(ctx, adm, 0, nExec, func() time.Time {
			if k := killAt.Load(); k != 0 {
				return time.Unix(0, k)
			}
			return time.Time{}
		})
	}()
	cpuSteady := b.procCPU()
	time.Sleep(2 * time.Second)
	cpuKill := b.procCPU()
	steady := b.scrape(b.nodes)
	var linkF, crossF float64
	for _, m := range steady {
		crossF += m["exec_relay_fleet_frames_out_total"]
		linkF += m["exec_relay_fleet_link_frames_out_total"]
	}
	out["fleet_frames_out_before_kill"] = crossF
	out["fleet_link_frames_out_before_kill"] = linkF

	// Kill the first node.
	victim := b.nodes[0]
	killed := time.Now()
	killAt.Store(killed.UnixNano())
	broadcast(fmt.Sprint("kill ", killed.UnixNano()))
	b.log.Warn("exec-bench fleet: SIGKILL", "node", victim.name)
	b.lb.mark(killed)
	victim.cmd.Process.Signal(syscall.SIGKILL)
	victim.cmd.Wait()
	victim.dead.Store(true)
	b.lb.markDead(0)
	alive := b.nodes[1:]
	// CPU seconds each process used in the 2 s before the kill and the
	// 2 s after it: is the machine the limit while the fleet recovers?
	go func() {
		time.Sleep(time.Until(killed.Add(2 * time.Second)))
		cpu := b.procCPU()
		use := map[string][2]float64{}
		for k, v := range cpu {
			use[k] = [2]float64{round3(cpuKill[k] - cpuSteady[k]), round3(v - cpuKill[k])}
		}
		b.mu.Lock()
		b.cpuAround = use
		b.mu.Unlock()
	}()
	if err := b.waitSockets(alive, nExec, 30*time.Second); err != nil {
		out["executors_reattached_error"] = err.Error()
	} else {
		out["executors_reattached_s"] = secs(time.Since(killed))
	}
	// New connections to environments homed elsewhere: a connect right
	// after the kill.
	time.Sleep(after)
	<-admDone
	broadcast("stop")
	var res []fleetStreamResult
	for _, c := range b.streamClients {
		line, err := c.out.ReadBytes('\n')
		var part []fleetStreamResult
		if err == nil {
			err = json.Unmarshal(line, &part)
		}
		if err != nil {
			return nil, fmt.Errorf("stream worker results: %w", err)
		}
		for i := range part {
			n := nodesOf[fleetStreamSpec{Env: part[i].Env, Port: part[i].Port}]
			part[i].execNode, part[i].harnessNode = n[0], n[1]
		}
		res = append(res, part...)
	}

	var touching, other []float64
	// The kill's timeline, in ms from it: per class of stream (where its
	// executor and harness sockets were), when its largest gap after the
	// kill ended (it echoed again); the
	// executors' and harnesses' new connections through the balancer;
	// unaffected streams' largest gap before and after the kill.
	classes := map[string][]float64{}
	var otherBefore, otherAfter, otherAfterEnd, localAfter, crossAfter []float64
	for _, r := range res {
		if r.Err != "" {
			continue
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		switch {
		case r.execNode == 0 && r.harnessNode == 0:
			classes["exec_and_harness_on_dead"] = append(classes["exec_and_harness_on_dead"], ms(r.MaxGapEnd))
		case r.execNode == 0:
			classes["exec_on_dead"] = append(classes["exec_on_dead"], ms(r.MaxGapEnd))
		case r.harnessNode == 0:
			classes["harness_on_dead"] = append(classes["harness_on_dead"], ms(r.MaxGapEnd))
		default:
			otherBefore = append(otherBefore, ms(r.MaxGapBefore))
			otherAfter = append(otherAfter, ms(r.MaxGapAfter))
			otherAfterEnd = append(otherAfterEnd, ms(r.MaxGapEnd))
			if r.execNode == r.harnessNode {
				localAfter = append(localAfter, ms(r.MaxGapAfter))
			} else {
				crossAfter = append(crossAfter, ms(r.MaxGapAfter))
			}
		}
	}
	timeline := map[string]any{}
	for c, v := range classes {
		timeline["largest_gap_end_ms_"+c] = []float64{pct(v, 50), pct(v, 99), pct(v, 100), float64(len(v))}
	}
	execRedial, harnessRedial := b.lb.since(killed)
	timeline["executor_redial_ms"] = []float64{pct(execRedial, 0), pct(execRedial, 50), pct(execRedial, 99), pct(execRedial, 100), float64(len(execRedial))}
	timeline["harness_redial_ms"] = []float64{pct(harnessRedial, 0), pct(harnessRedial, 50), pct(harnessRedial, 99), pct(harnessRedial, 100), float64(len(harnessRedial))}
	timeline["unaffected_max_gap_ms_before_kill"] = []float64{pct(otherBefore, 50), pct(otherBefore, 99), pct(otherBefore, 100)}
	timeline["unaffected_max_gap_ms_after_kill"] = []float64{pct(otherAfter, 50), pct(otherAfter, 99), pct(otherAfter, 100)}
	timeline["unaffected_max_gap_end_ms_after_kill"] = []float64{pct(otherAfterEnd, 50), pct(otherAfterEnd, 99), pct(otherAfterEnd, 100)}
	timeline["unaffected_local_max_gap_ms_after_kill"] = []float64{pct(localAfter, 50), pct(localAfter, 99), pct(localAfter, 100)}
	timeline["unaffected_cross_max_gap_ms_after_kill"] = []float64{pct(crossAfter, 50), pct(crossAfter, 99), pct(crossAfter, 100)}
	b.mu.Lock()
	timeline["cpu_s_2s_before_and_after_kill"] = b.cpuAround
	b.mu.Unlock()
	// Unaffected streams, second by second from 2 s before the kill: the
	// 99th percentile and the largest of their largest gap ending in
	// that second (a stall the kill causes stands out; one the machine
	// causes does not).
	var series [][2]float64
	for sec := range gapSecs {
		var v []float64
		for _, r := range res {
			if r.Err == "" && r.execNode != 0 && r.harnessNode != 0 && r.BySec[sec] > 0 {
				v = append(v, float64(r.BySec[sec].Microseconds())/1000)
			}
		}
		series = append(series, [2]float64{pct(v, 99), pct(v, 100)})
	}
	timeline["unaffected_gap_ms_p99_max_by_second_from_kill_minus_2"] = series
	// The same for the node-local unaffected streams of each survivor:
	// the one taking most of the dead node's executors (the balancer's
	// next node) and the other. If both rise alike, what the streams
	// wait for is not that node's takeover work.
	for node := 1; node < nNodes; node++ {
		var ser []float64
		for sec := range gapSecs {
			var v []float64
			for _, r := range res {
				if r.Err == "" && r.execNode == node && r.harnessNode == node && r.BySec[sec] > 0 {
					v = append(v, float64(r.BySec[sec].Microseconds())/1000)
				}
			}
			ser = append(ser, pct(v, 99))
		}
		timeline[fmt.Sprintf("unaffected_local_n%d_gap_ms_p99_by_second_from_kill_minus_2", node)] = ser
	}
	adm.figures(timeline)
	out["mem_format"] = "MB heap objects, heap unused, heap free not returned, stacks; goroutines"
	timeline["format"] = "largest_gap_end: p50 p99 max n; redial: first p50 p99 max n; gaps: p50 p99 max; admission_ms: p50 p99 max n_ok"
	out["kill_timeline"] = timeline
	resets, errs := 0, 0
	for _, r := range res {
		if r.Err != "" {
			errs++
			if strings.Contains(r.Err, "reset") {
				resets++
			}
			continue
		}
		// The stall: the largest gap after the kill (the gap spanning
		// the kill itself can be short: an echo already on its way when
		// the node died, the stream stalling on its next message).
		g := float64(max(r.GapAtKill, r.MaxGapAfter).Microseconds()) / 1000
		if r.execNode == 0 || r.harnessNode == 0 {
			touching = append(touching, g)
		} else {
			other = append(other, float64(r.MaxGap.Microseconds())/1000)
		}
	}
	out["stream_errors"], out["stream_resets"] = errs, resets
	out["stall_ms_touching_dead_p50"], out["stall_ms_touching_dead_p99"] = pct(touching, 50), pct(touching, 99)
	out["streams_touching_dead"] = len(touching)
	out["max_gap_ms_not_touching_dead_p99"], out["max_gap_ms_not_touching_dead_max"] = pct(other, 99), pct(other, 100)
	out["streams_not_touching_dead"] = len(other)
	out["rss_MB_per_node_after"] = b.rssMB(alive)
	out["mem_per_node_after"] = b.memOf(alive)
	var drops, slow, reconnects, takeovers, recSum, recN, rehomed float64
	for _, m := range b.scrape(alive) {
		recSum += m["exec_relay_stream_recovery_seconds_sum"]
		recN += m["exec_relay_stream_recovery_seconds_count"]
		rehomed += m["exec_relay_fleet_rehomed_total"]
		drops += m["exec_relay_nats_dropped_total"]
		slow += m["exec_relay_nats_slow_consumers_total"]
		reconnects += m["exec_relay_nats_reconnects_total"]
		takeovers += m["exec_relay_fleet_homes_total"]
	}
	out["nats_dropped"], out["nats_slow_consumers_relays"], out["nats_reconnects"] = drops, slow, reconnects
	if recN > 0 {
		out["relay_stream_recovery_s_mean"], out["relay_stream_recoveries"] = round3(recSum/recN), recN
	}
	out["relay_forwarders_rehomed"] = rehomed
	io.WriteString(natsIn, "stats\n")
	if line, err := natsOut.ReadString('\n'); err == nil {
		var st struct {
			SlowConsumers int64 `json:"slow_consumers"`
			PID           int   `json:"pid"`
		}
		json.Unmarshal([]byte(line), &st)
		out["nats_server_slow_consumers"] = st.SlowConsumers
		out["nats_server_rss_MB"] = b.rssMB([]*fleetProc{{name: "nats", cmd: &exec.Cmd{Process: &os.Process{Pid: st.PID}}}})["nats"]
	}
	// Every attach counts, the first ones included.
	out["homes_on_survivors"] = takeovers
	return out, nil
}

// gapSecs: seconds of per-second gap figures, from 2 s before the kill.
const gapSecs = 12

func secs(d time.Duration) float64 { return round3(d.Seconds()) }

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

func pct(v []float64, p int) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	i := min(len(v)-1, len(v)*p/100)
	return round3(v[i])
}

type echoStreams struct{}

func (echoStreams) ServeStream(ctx context.Context, st jsonrpc.Stream) {
	defer st.Close()
	for {
		m, err := st.Read(ctx)
		if err != nil || st.Write(ctx, m, false) != nil {
			return
		}
	}
}

func (b *fleetBench) startExecutor(ctx context.Context, registry, env string) {
	go executor.Run(ctx, executor.Config{
		RegistryURL: registry, EnvironmentID: env, Token: fleetExecToken, Server: echoStreams{},
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		ReconnectMin: 300 * time.Millisecond, ReconnectMax: 2 * time.Second,
	})
}

func (b *fleetBench) dial(ctx context.Context, base, env string) (*channel.Channel, error) {
	d, err := harness.NewDialer(base, env, fleetHarnessToken, harness.Options{
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	})
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		ch, err := d.Dial(dctx)
		if err == nil || dctx.Err() != nil {
			return ch, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fleetRTT echoes n messages of size bytes one at a time: p50, p99 in µs.
func fleetRTT(ctx context.Context, ch *channel.Channel, size, n int) (float64, float64, error) {
	msg := append(append([]byte(`{"jsonrpc":"2.0","method":"m","params":"`), bytes.Repeat([]byte("r"), size)...), `"}`...)
	var s []float64
	for range n {
		t0 := time.Now()
		if err := ch.Write(ctx, msg, false); err != nil {
			return 0, 0, err
		}
		if _, err := ch.Read(ctx); err != nil {
			return 0, 0, err
		}
		s = append(s, float64(time.Since(t0).Nanoseconds())/1000)
	}
	return pct(s, 50), pct(s, 99), nil
}

// fleetThroughput sends messages of size bytes for d, at most 8 in
// flight (the echo server must not fall behind its inbound queue), with a
// reader draining the echo: MB/s one way, and the bytes carried one way.
func fleetThroughput(ctx context.Context, ch *channel.Channel, size int, d time.Duration) (float64, int64, error) {
	msg := append(append([]byte(`{"jsonrpc":"2.0","method":"m","params":"`), bytes.Repeat([]byte("t"), size)...), `"}`...)
	var got atomic.Int64
	inflight := make(chan struct{}, 8)
	done := make(chan error, 1)
	sent := 0
	go func() {
		for {
			m, err := ch.Read(ctx)
			if err != nil {
				done <- err
				return
			}
			got.Add(int64(len(m)))
			<-inflight
		}
	}()
	t0 := time.Now()
	stop := t0.Add(d)
	for time.Now().Before(stop) {
		select {
		case inflight <- struct{}{}:
		case err := <-done:
			return 0, 0, err
		}
		if err := ch.Write(ctx, msg, false); err != nil {
			return 0, 0, err
		}
		sent++
	}
	for got.Load() < int64(sent*len(msg)) {
		select {
		case err := <-done:
			return 0, 0, err
		case <-time.After(time.Millisecond):
		}
	}
	el := time.Since(t0).Seconds()
	return round3(float64(got.Load()) / el / 1e6), got.Load(), nil
}

// framesPerSecond runs k cross-node streams echoing 1 KiB messages with
// up to 16 in flight each, for d: messages per second each way.
func (b *fleetBench) framesPerSecond(ctx context.Context, port, k int, d time.Duration) (float64, error) {
	var total atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, k)
	msg := append(append([]byte(`{"jsonrpc":"2.0","method":"m","params":"`), bytes.Repeat([]byte("f"), 1000)...), `"}`...)
	var chans []*channel.Channel
	for i := range k {
		ch, err := b.dial(ctx, b.lb.url(port), fmt.Sprint("env-", 1+i))
		if err != nil {
			return 0, err
		}
		defer ch.Close()
		chans = append(chans, ch)
	}
	t0 := time.Now()
	stop := t0.Add(d)
	for _, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inflight := make(chan struct{}, 16)
			rdone := make(chan struct{})
			go func() {
				defer close(rdone)
				for {
					if _, err := ch.Read(ctx); err != nil {
						return
					}
					total.Add(1)
					<-inflight
				}
			}()
			for time.Now().Before(stop) {
				inflight <- struct{}{}
				if err := ch.Write(ctx, msg, false); err != nil {
					errc <- err
					return
				}
			}
			for len(inflight) > 0 {
				time.Sleep(time.Millisecond)
			}
			ch.Close()
			<-rdone
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return 0, err
	default:
	}
	return round3(float64(total.Load()) / time.Since(t0).Seconds()), nil
}

// scrape reads each node's /metrics (name → value, labels summed).
func (b *fleetBench) scrape(nodes []*fleetProc) []map[string]float64 {
	var out []map[string]float64
	for _, n := range nodes {
		m := map[string]float64{}
		resp, err := b.client.Get(n.base + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(body), "\n") {
				if line == "" || line[0] == '#' {
					continue
				}
				name, val, ok := strings.Cut(line, " ")
				if !ok {
					continue
				}
				if i := strings.IndexByte(name, '{'); i >= 0 {
					name = name[:i]
				}
				v, _ := strconv.ParseFloat(val, 64)
				m[name] += v
			}
		}
		out = append(out, m)
	}
	return out
}

// waitSockets waits until the nodes hold n executor sockets together.
func (b *fleetBench) waitSockets(nodes []*fleetProc, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		total := 0
		for _, n := range nodes {
			resp, err := b.client.Get(n.base + "/metrics")
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(body), "\n") {
				if v, ok := strings.CutPrefix(line, `exec_relay_sockets{role="environment"} `); ok {
					k, _ := strconv.Atoi(v)
					total += k
				}
			}
		}
		if total >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d executor sockets after %s", total, n, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *fleetBench) rssMB(nodes []*fleetProc) map[string]float64 {
	out := map[string]float64{}
	for _, n := range nodes {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			var kb float64
			if _, err := fmt.Sscanf(line, "VmRSS: %g kB", &kb); err == nil {
				out[n.name] = round3(kb / 1024)
			}
		}
	}
	return out
}

// memOf is where each node's memory goes, from its /metrics: MB of live
// heap objects, unused heap, free heap not returned, stacks; goroutines.
func (b *fleetBench) memOf(nodes []*fleetProc) map[string][5]float64 {
	out := map[string][5]float64{}
	for i, m := range b.scrape(nodes) {
		mb := func(k string) float64 { return round3(m["exec_relay_memory_"+k+"_bytes"] / (1 << 20)) }
		out[nodes[i].name] = [5]float64{mb("heap_objects"), mb("heap_unused"), mb("heap_free"), mb("stacks"), m["exec_relay_goroutines"]}
	}
	return out
}

// procCPU is the CPU seconds so far of each process of the benchmark:
// the fleet nodes, the NATS server, this one (the balancer, the admission
// probe) and the client workers.
func (b *fleetBench) procCPU() map[string]float64 {
	out := map[string]float64{"bench": pidCPU(os.Getpid()), "nats": pidCPU(b.natsPID)}
	out["executor_clients"], out["stream_clients"] = b.clientCPU()
	for _, n := range b.nodes {
		if !n.dead.Load() {
			out[n.name] = pidCPU(n.cmd.Process.Pid)
		}
	}
	return out
}

func pidCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) <= 12 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // USER_HZ
}

// relayCPU is the fleet nodes' CPU seconds so far (utime + stime).
func (b *fleetBench) relayCPU() float64 { return sumCPU(b.nodes) }

// fleetLB is the load balancer: port 0 hashes the environment id in the
// request path to a node, port 1 sends it to the next node; a dead node
// is skipped. It peeks the request line only.
type fleetLB struct {
	nodes []*fleetProc
	lns   [2]net.Listener
	dead  sync.Map // node index → true
	mu    sync.Mutex
	execs map[string]int    // env → node of its last executor socket
	hsock map[[2]string]int // (env, port) → node of the last harness socket
	// From mark on, when each environment's first executor and harness
	// connections came.
	marked         time.Time
	execAt, harnAt map[string]time.Time
}

func (b *fleetLB) mark(t time.Time) {
	b.mu.Lock()
	b.marked, b.execAt, b.harnAt = t, map[string]time.Time{}, map[string]time.Time{}
	b.mu.Unlock()
}

// since: ms from t to the first executor and harness connections of each
// environment after the mark.
func (b *fleetLB) since(t time.Time) (execs, harns []float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, at := range b.execAt {
		execs = append(execs, float64(at.Sub(t).Microseconds())/1000)
	}
	for _, at := range b.harnAt {
		harns = append(harns, float64(at.Sub(t).Microseconds())/1000)
	}
	return execs, harns
}

func startFleetLB(nodes []*fleetProc) (*fleetLB, error) {
	b := &fleetLB{nodes: nodes, execs: map[string]int{}, hsock: map[[2]string]int{}}
	for i := range b.lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		b.lns[i] = ln
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go b.proxy(c, i)
			}
		}()
	}
	return b, nil
}

func (b *fleetLB) close() {
	for _, ln := range b.lns {
		ln.Close()
	}
}

// nodeAddr is the address ("host:port") of the node port would send env
// to while every node lives (proxy's choice).
func (b *fleetLB) nodeAddr(env string, port int) string {
	h := fnv.New32a()
	h.Write([]byte(env))
	n := (int(h.Sum32()%uint32(len(b.nodes))) + port) % len(b.nodes)
	return strings.TrimPrefix(b.nodes[n].base, "http://")
}

func (b *fleetLB) url(port int) string { return "http://" + b.lns[port].Addr().String() }

func (b *fleetLB) markDead(i int) { b.dead.Store(i, true) }

func (b *fleetLB) execNode(env string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.execs[env]
}

func (b *fleetLB) harnessNode(env string, port int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hsock[[2]string{env, fmt.Sprint(port)}]
}

func (b *fleetLB) proxy(c net.Conn, port int) {
	defer c.Close()
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return
	}
	// "GET /rendezvous/{role}/{env}?..." or "POST /cloud/environment/{env}/...".
	path := strings.Fields(line + " x")[1]
	path, _, _ = strings.Cut(path, "?")
	seg := strings.Split(strings.Trim(path, "/"), "/")
	env, role := "", ""
	switch {
	case len(seg) >= 3 && seg[0] == "rendezvous":
		role, env = seg[1], seg[2]
	case len(seg) >= 3 && seg[0] == "cloud":
		env = seg[2]
	}
	h := fnv.New32a()
	h.Write([]byte(env))
	first := int(h.Sum32()%uint32(len(b.nodes))) + port
	var up net.Conn
	node := -1
	for i := range b.nodes {
		n := (first + i) % len(b.nodes)
		if _, dead := b.dead.Load(n); dead {
			continue
		}
		if up, err = net.Dial("tcp", strings.TrimPrefix(b.nodes[n].base, "http://")); err == nil {
			node = n
			break
		}
	}
	if up == nil {
		return
	}
	defer up.Close()
	if role != "" {
		b.mu.Lock()
		if role == "environment" {
			b.execs[env] = node
		} else {
			b.hsock[[2]string{env, fmt.Sprint(port)}] = node
		}
		if !b.marked.IsZero() {
			at := b.execAt
			if role != "environment" {
				at = b.harnAt
			}
			if _, ok := at[env]; !ok {
				at[env] = time.Now()
			}
		}
		b.mu.Unlock()
	}
	if _, err := io.WriteString(up, line); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, br); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

package main

// The fleet benchmark's clients run in processes of their own: this binary
// re-executed as "fleet-client exec ..." (executors serving an echo) or
// "fleet-client streams ..." (the reliable harness streams measured across
// the node kill). With 1 000 executors, 300 streams and the balancer in one
// process, that process used a whole core and its own scheduling showed as
// a 0.24 s gap before the kill, when nothing happened: the 100 ms bar on
// unaffected streams measured the client, not the relay.
//
// The parent speaks to a worker on its stdin and stdout, a line at a time;
// a worker exits when its stdin closes (the parent gone). Timestamps are
// wall-clock nanoseconds, one clock on one machine.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// fleetStreamResult is one stream's figures across the kill, as a stream
// worker reports them.
type fleetStreamResult struct {
	Env          string                 `json:"env"`
	Port         int                    `json:"port"`
	MaxGap       time.Duration          `json:"max_gap"`
	GapAtKill    time.Duration          `json:"gap_at_kill"`
	MaxGapBefore time.Duration          `json:"max_gap_before"` // largest gap ending before the kill
	MaxGapAfter  time.Duration          `json:"max_gap_after"`  // largest gap ending after it
	MaxGapEnd    time.Duration          `json:"max_gap_end"`    // when MaxGapAfter ended, from the kill
	BySec        [gapSecs]time.Duration `json:"by_sec"`         // largest gap ending in each second from the steady start
	Err          string                 `json:"err,omitempty"`
	Msgs         int                    `json:"msgs"`

	// Filled by the parent from its balancer, before the kill.
	execNode, harnessNode int
}

// fleetStreamSpec is one stream a worker opens: an environment through
// one of the balancer's ports.
type fleetStreamSpec struct {
	Env  string `json:"env"`
	Port int    `json:"port"`
}

// fleetClientMain is "fleet-client exec REGISTRY PREFIX FIRST COUNT" or
// "fleet-client streams LB0 LB1" (the stream specs as one JSON line on
// stdin, then "steady NS", "kill NS", "stop").
func fleetClientMain(args []string) int {
	raiseNoFile()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &fleetBench{}
	in := bufio.NewReader(os.Stdin)
	switch {
	case len(args) == 5 && args[0] == "exec":
		first, err1 := strconv.Atoi(args[3])
		count, err2 := strconv.Atoi(args[4])
		if err1 != nil || err2 != nil {
			fmt.Fprintln(os.Stderr, "fleet-client exec: FIRST and COUNT are numbers")
			return 2
		}
		for i := first; i < first+count; i++ {
			b.startExecutor(ctx, args[1], args[2]+strconv.Itoa(i))
		}
		io.Copy(io.Discard, in) // until the parent closes stdin
		return 0
	case len(args) == 3 && args[0] == "streams":
		return fleetStreamWorker(ctx, b, in, [2]string{args[1], args[2]})
	}
	fmt.Fprintln(os.Stderr, "usage: fleet-client exec REGISTRY PREFIX FIRST COUNT | fleet-client streams LB0 LB1")
	return 2
}

func fleetStreamWorker(ctx context.Context, b *fleetBench, in *bufio.Reader, lb [2]string) int {
	line, err := in.ReadBytes('\n')
	var specs []fleetStreamSpec
	if err == nil {
		err = json.Unmarshal(line, &specs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-client streams: specs:", err)
		return 2
	}
	res := make([]fleetStreamResult, len(specs))
	var killAt, steadyAt atomic.Int64
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	opened := make(chan error, len(specs))
	var wg sync.WaitGroup
	for i, sp := range specs {
		res[i].Env, res[i].Port = sp.Env, sp.Port
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := b.dial(ctx, lb[sp.Port], sp.Env)
			opened <- err
			if err != nil {
				res[i].Err = err.Error()
				return
			}
			defer ch.Close()
			killStream(sctx, ch, &res[i], &killAt, &steadyAt)
		}()
	}
	errs := 0
	for range specs {
		if err := <-opened; err != nil {
			errs++
		}
	}
	fmt.Printf("{\"open_errors\":%d}\n", errs)
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return 1
		}
		cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
		ns, _ := strconv.ParseInt(arg, 10, 64)
		switch cmd {
		case "steady":
			steadyAt.Store(ns)
		case "kill":
			killAt.Store(ns)
		case "stop":
			scancel()
			wg.Wait()
			out, _ := json.Marshal(res)
			fmt.Printf("%s\n", out)
			io.Copy(io.Discard, in)
			return 0
		}
	}
}

// killStream echoes 1 KiB messages about 50 times a second until ctx
// ends, recording the gaps between echoes around the kill.
func killStream(ctx context.Context, ch interface {
	Write(context.Context, []byte, bool) error
	Read(context.Context) ([]byte, error)
}, r *fleetStreamResult, killAt, steadyAt *atomic.Int64) {
	msg := bytes.Repeat([]byte("x"), 1024)
	msg = append(append([]byte(`{"jsonrpc":"2.0","method":"m","params":"`), msg...), `"}`...)
	last := time.Now()
	for ctx.Err() == nil {
		if err := ch.Write(ctx, msg, false); err != nil {
			if ctx.Err() == nil {
				r.Err = err.Error()
			}
			return
		}
		got, err := ch.Read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.Err = err.Error()
			}
			return
		}
		if !bytes.Equal(got, msg) {
			r.Err = "message differs"
			return
		}
		now := time.Now()
		gap := now.Sub(last)
		r.MaxGap = max(r.MaxGap, gap)
		k := killAt.Load()
		switch {
		case k == 0:
			if st := steadyAt.Load(); st != 0 && last.UnixNano() >= st {
				r.MaxGapBefore = max(r.MaxGapBefore, gap)
			}
		case gap > r.MaxGapAfter:
			r.MaxGapAfter = gap
			r.MaxGapEnd = time.Duration(now.UnixNano() - k)
		}
		if st := steadyAt.Load(); st != 0 && last.UnixNano() >= st {
			if sec := int((now.UnixNano() - st) / 1e9); sec < gapSecs {
				r.BySec[sec] = max(r.BySec[sec], gap)
			}
		}
		if k != 0 && last.UnixNano() <= k && now.UnixNano() >= k {
			r.GapAtKill = gap
		}
		last = now
		r.Msgs++
		time.Sleep(20 * time.Millisecond) // about 50 round trips/s per stream
	}
}

// fleetClient is a worker process seen from the parent.
type fleetClient struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func (b *fleetBench) startClient(args ...string) (*fleetClient, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{"fleet-client"}, args...)...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &fleetClient{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	b.mu.Lock()
	b.clients = append(b.clients, c)
	b.mu.Unlock()
	return c, nil
}

func (c *fleetClient) send(line string) { io.WriteString(c.in, line+"\n") }

// stopClients closes every worker's stdin, then kills what is left.
func (b *fleetBench) stopClients() {
	b.mu.Lock()
	cs := b.clients
	b.clients = nil
	b.mu.Unlock()
	for _, c := range cs {
		c.in.Close()
	}
	for _, c := range cs {
		done := make(chan struct{})
		go func() { c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.cmd.Process.Kill()
			<-done
		}
	}
}

// startExecutors runs executors PREFIXfirst..PREFIX(first+n-1)
// registered at registry, split over procs worker processes.
func (b *fleetBench) startExecutors(registry, prefix string, first, n, procs int) error {
	procs = max(1, min(procs, n))
	for p := range procs {
		lo, hi := first+n*p/procs, first+n*(p+1)/procs
		c, err := b.startClient("exec", registry, prefix, strconv.Itoa(lo), strconv.Itoa(hi-lo))
		if err != nil {
			return err
		}
		b.execClients = append(b.execClients, c.cmd.Process.Pid)
	}
	return nil
}

// clientCPU: CPU seconds so far of the executor workers and of the stream
// workers.
func (b *fleetBench) clientCPU() (execs, streams float64) {
	for _, pid := range b.execClients {
		execs += pidCPU(pid)
	}
	for _, c := range b.streamClients {
		streams += pidCPU(c.cmd.Process.Pid)
	}
	return execs, streams
}

// noiseClientCPU is the CPU seconds so far of this process and the
// executors' workers: the clients of the Noise rows.
func (b *fleetBench) noiseClientCPU() float64 {
	execs, _ := b.clientCPU()
	return pidCPU(os.Getpid()) + execs
}

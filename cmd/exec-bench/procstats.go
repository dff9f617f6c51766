package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// procStats (--proc-stats) adds rows per MiB moved to the fs workloads that
// measure server CPU per byte (readFile, writeFile, readBlock, writeBlock):
// user and system CPU (utime and stime, summed over the samples: one
// sample is a few 10 ms ticks), threads, read system calls and
// bytes per read (/proc/PID/io: read(2) only, so not the reference's
// recvfrom(2) socket reads), minor page faults (/proc/PID/stat) and
// context switches (every live thread's, /proc/PID/task/*/status), taken
// around each sample as the CPU time is. They say where a server's CPU per
// byte goes: how many wake-ups and reads a message takes, how many fresh
// pages it touches.
var procStats bool

// procSnap is one reading of a process's counters.
type procSnap struct {
	syscr, syscw, rchar, minflt, ctxsw float64
	utime, stime, threads              float64 // clock ticks; threads now
	cpu                                float64 // seconds, the precise clock (cpuSeconds)
	nvcsw                              float64 // of ctxsw, the involuntary ones (preempted)
}

func readProc(pid int) procSnap {
	var s procSnap
	if pid <= 0 {
		return s
	}
	s.cpu = cpuSeconds(pid)
	dir := fmt.Sprintf("/proc/%d", pid)
	if b, err := os.ReadFile(dir + "/io"); err == nil {
		for _, line := range bytes.Split(b, []byte("\n")) {
			k, v, ok := bytes.Cut(line, []byte(": "))
			if !ok {
				continue
			}
			n, _ := strconv.ParseFloat(string(v), 64)
			switch string(k) {
			case "syscr":
				s.syscr = n
			case "syscw":
				s.syscw = n
			case "rchar":
				s.rchar = n
			}
		}
	}
	if b, err := os.ReadFile(dir + "/stat"); err == nil {
		// minflt is field 10 of the line, the 8th after the command
		// name's closing parenthesis.
		// utime, stime and num_threads are fields 14, 15 and 20.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 {
			f := bytes.Fields(b[i+1:])
			if len(f) > 17 {
				s.minflt, _ = strconv.ParseFloat(string(f[7]), 64)
				s.utime, _ = strconv.ParseFloat(string(f[11]), 64)
				s.stime, _ = strconv.ParseFloat(string(f[12]), 64)
				s.threads, _ = strconv.ParseFloat(string(f[17]), 64)
			}
		}
	}
	tasks, _ := filepath.Glob(dir + "/task/*/status")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.HasSuffix(k, []byte("ctxt_switches")) {
				n, _ := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
				s.ctxsw += n
				if bytes.HasPrefix(k, []byte("nonvoluntary")) {
					s.nvcsw += n
				}
			}
		}
	}
	return s
}

// procMeter gathers per-sample deltas for ours (0), the reference (1) and
// the floor (2).
type procMeter struct {
	mu   sync.Mutex
	runs [3][4][]float64 // side, metric: reads/MiB, KiB/read, minflt/MiB, ctxsw/MiB
	// Sums over the samples per side: utime and stime ticks, bytes; and
	// the threads after each sample.
	ut, stt, by [3]float64
	threads     [3][]float64
	label       string // workload and transport, for the per-sample lines
	seq         [3]int
}

// named sets the label of m's per-sample lines on stderr.
func (m *procMeter) named(w string, tr transportKind) *procMeter {
	if m != nil {
		m.label = fmt.Sprintf("%s %s", w, tr)
	}
	return m
}

func (m *procMeter) add(i int, a, b procSnap, bytes float64) {
	if m == nil || bytes <= 0 {
		return
	}
	mib := bytes / (1 << 20)
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &m.runs[i]
	if reads := b.syscr - a.syscr; reads > 0 {
		r[0] = append(r[0], reads/mib)
		r[1] = append(r[1], (b.rchar-a.rchar)/reads/1024)
	}
	r[2] = append(r[2], (b.minflt-a.minflt)/mib)
	r[3] = append(r[3], (b.ctxsw-a.ctxsw)/mib)
	m.ut[i] += b.utime - a.utime
	m.stt[i] += b.stime - a.stime
	m.by[i] += bytes
	m.threads[i] = append(m.threads[i], b.threads)
	// One line per sample: the medians hide a row whose samples differ
	// (a first sample that grows the heap, a sample that pays a GC).
	m.seq[i]++
	fmt.Fprintf(os.Stderr, "exec-bench: sample %s side %d #%d: cpu %.3f s/GB (user %.0f sys %.0f ticks), minflt %.1f/MiB, ctxsw %.1f/MiB (%.1f involuntary), reads %.1f/MiB, threads %.0f\n",
		m.label, i, m.seq[i], (b.cpu-a.cpu)/(bytes/1e9), b.utime-a.utime, b.stime-a.stime,
		(b.minflt-a.minflt)/mib, (b.ctxsw-a.ctxsw)/mib, (b.nvcsw-a.nvcsw)/mib, (b.syscr-a.syscr)/mib, b.threads)
}

func (m *procMeter) rows(w string, tr transportKind, sides []side) []*row {
	if m == nil {
		return nil
	}
	names := [4][2]string{{"reads", "n/MiB"}, {"read-size", "KiB"}, {"minflt", "n/MiB"}, {"ctxsw", "n/MiB"}}
	var out []*row
	for k, nm := range names {
		st := []*stats{summarize(m.runs[0][k], nil)}
		// /proc counts read(2), not the reference's recvfrom(2): no
		// reference column for the reads.
		if len(sides) > 1 && k >= 2 {
			st = append(st, summarize(m.runs[1][k], nil))
		}
		r := mkrow(w, nm[0], nm[1], k == 1, tr, st)
		if f := m.runs[2][k]; len(f) > 0 {
			v := summarize(f, nil).Median
			r.Limit = &v
		}
		out = append(out, r)
	}
	// User and system CPU per GB over all the samples (ticks of 10 ms);
	// threads after a sample. Ours and the reference; no floor.
	for k, nm := range [3][2]string{{"cpu-user", "s/GB"}, {"cpu-sys", "s/GB"}, {"threads", "n"}} {
		var st []*stats
		for i := range min(len(sides), 2) {
			var xs []float64
			switch {
			case k == 2:
				xs = m.threads[i]
			case m.by[i] > 0 && k == 0:
				xs = []float64{m.ut[i] / 100 / (m.by[i] / 1e9)}
			case m.by[i] > 0:
				xs = []float64{m.stt[i] / 100 / (m.by[i] / 1e9)}
			}
			st = append(st, summarize(xs, nil))
		}
		out = append(out, mkrow(w, nm[0], nm[1], false, tr, st))
	}
	return out
}

// newProcMeter is nil (no rows, no readings) without --proc-stats.
func newProcMeter() *procMeter {
	if !procStats {
		return nil
	}
	return &procMeter{}
}

// snap reads pid's counters when m is on.
func (m *procMeter) snap(pid int) procSnap {
	if m == nil {
		return procSnap{}
	}
	return readProc(pid)
}

// sideIndex is 0 for ours, 1 for the reference.
func sideIndex(sd side) int {
	if sd.ref {
		return 1
	}
	return 0
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/execgo/exec-server/remote/harness"
)

// admission measures issue 19's "new connections to other environments
// are admitted without interruption": across the node kill, a new
// harness stream (real /connect, Noise handshake, one echo, close) every
// admitInterval to an environment whose executor is not on the victim
// node, one attempt each (no retry), alternately through the affinity
// and the round-robin port.
type admission struct {
	mu       sync.Mutex
	attempts [2]int            // before, after the kill
	failures [2]map[string]int // by class
	lat      [2][]float64      // ms, successful attempts
	sample   map[string]string // class: its first error text (diagnosis only)
}

const (
	admitInterval = 50 * time.Millisecond
	admitMax      = 400 // bounded: 20 s at admitInterval
	admitTimeout  = 10 * time.Second
	admitAfter    = 5 * time.Second // the window after the kill
)

// admitProbe runs until killedAt (set once the kill happens) plus
// admitAfter, or admitMax attempts, or ctx ends. victim is the node
// index being killed; nExec the number of environments env-0..env-N-1.
func (b *fleetBench) admitProbe(ctx context.Context, a *admission, victim, nExec int, killedAt func() time.Time) {
	if nExec < 2 {
		return // env-0 is the latency probes' own; no other environment to admit to
	}
	msg := append(append([]byte(`{"jsonrpc":"2.0","method":"m","params":"`), bytes.Repeat([]byte("a"), 64)...), `"}`...)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(admitInterval)
	defer tick.Stop()
	next := 0
	for n := 0; n < admitMax; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k := killedAt()
		if !k.IsZero() && time.Since(k) > admitAfter {
			return
		}
		// The next environment homed on a survivor.
		env := ""
		for range nExec {
			next = next%(nExec-1) + 1
			if e := fmt.Sprint("env-", next); b.lb.execNode(e) != victim {
				env = e
				break
			}
		}
		if env == "" {
			continue
		}
		phase := 0
		if !k.IsZero() {
			phase = 1
		}
		port := n % 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			class, err := b.admitOnce(ctx, b.lb.url(port), env, msg)
			ms := float64(time.Since(t0).Microseconds()) / 1000
			if class != "" && phase == 0 && !killedAt().IsZero() {
				// Started before the kill, failed after it: on the
				// skew port its harness socket may have been on the
				// killed node itself.
				class += "_spanning_kill"
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			a.attempts[phase]++
			if class != "" {
				if a.failures[phase] == nil {
					a.failures[phase] = map[string]int{}
				}
				a.failures[phase][class]++
				if a.sample == nil {
					a.sample = map[string]string{}
				}
				if _, ok := a.sample[class]; !ok && err != nil {
					a.sample[class] = err.Error()
				}
				return
			}
			a.lat[phase] = append(a.lat[phase], ms)
		}()
	}
}

// admitOnce opens one stream, echoes msg once, and closes it: "" on
// success, else the failure's class and error.
func (b *fleetBench) admitOnce(ctx context.Context, base, env string, msg []byte) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, admitTimeout)
	defer cancel()
	d, err := harness.NewDialer(base, env, fleetHarnessToken, harness.Options{
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	})
	if err != nil {
		return "dialer", err
	}
	ch, err := d.Dial(ctx)
	if err != nil {
		return admitClass("dial", ctx, err), err
	}
	defer ch.Close()
	if err := ch.Write(ctx, msg, false); err != nil {
		return admitClass("write", ctx, err), err
	}
	got, err := ch.Read(ctx)
	if err != nil {
		return admitClass("read", ctx, err), err
	}
	if !bytes.Equal(got, msg) {
		return "echo_differs", nil
	}
	return "", nil
}

func admitClass(step string, ctx context.Context, err error) string {
	var re *harness.RegistryError
	switch {
	case ctx.Err() != nil:
		return step + "_timeout"
	case errors.As(err, &re):
		return fmt.Sprintf("%s_http_%d_%s", step, re.Status, re.Code)
	case errors.Is(err, harness.ErrStreamReset):
		return step + "_reset"
	case errors.Is(err, harness.ErrProtocol):
		return step + "_protocol"
	}
	return step + "_other"
}

// figures: the kill_timeline entries.
func (a *admission) figures(t map[string]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, ph := range []string{"before_kill", "5s_after_kill"} {
		t["admission_attempts_"+ph] = a.attempts[i]
		f := a.failures[i]
		if f == nil {
			f = map[string]int{}
		}
		t["admission_failures_"+ph] = f
		t["admission_ms_"+ph] = []float64{pct(a.lat[i], 50), pct(a.lat[i], 99), pct(a.lat[i], 100), float64(len(a.lat[i]))}
	}
	if a.sample != nil {
		t["admission_failure_samples"] = a.sample
	}
}

package relay

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/codexref"
	"github.com/execgo/exec-server/internal/test/syncbuf"
)

// These tests run the reference executor (codex exec-server --remote)
// against this relay: EXEC_SERVER_REFERENCE=$(bash scripts/reference.sh).

type refProc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan error
}

func startReference(t *testing.T, base, env, apiKey string) *refProc {
	t.Helper()
	cmd := exec.Command(codexref.Bin(t), "exec-server", "--remote", base, "--environment-id", env)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"CODEX_HOME=" + codexref.Scratch(t, "exec-server-relay", "home-"),
		"CODEX_API_KEY=" + apiKey,
		"RUST_LOG=info",
		"NO_PROXY=127.0.0.1",
	}
	p := &refProc{cmd: cmd, stderr: &syncbuf.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("reference stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// exited waits for the process to end and returns its error.
func (p *refProc) exited(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(d):
		t.Fatalf("reference still running after %s", d)
		return nil
	}
}

var requestID = regexp.MustCompile(`^req_[0-9a-f]{32}$`)

func isUpgrade(status int) func(Event) bool {
	return func(e Event) bool { return e.Kind == "upgrade" && e.Role == roleEnvironment && e.Status == status }
}

func TestReferenceExecutor(t *testing.T) {
	r := startRelay(t, Options{})
	startReference(t, r.base, "E", execToken)

	reg, i := r.rec.wait(t, 0, 20*time.Second, func(e Event) bool { return e.Kind == "register" })
	if reg.Status != 200 {
		t.Fatalf("register answered %d %s", reg.Status, reg.Code)
	}
	for h, want := range map[string]string{"Authorization": "Bearer " + execToken, "Content-Type": "application/json", "Accept": "*/*", "User-Agent": ""} {
		if got := reg.Header.Get(h); got != want {
			t.Errorf("register %s = %q, want %q", h, got, want)
		}
	}
	up, j := r.rec.wait(t, i, 10*time.Second, isUpgrade(101))
	if id := up.Header.Get("X-Request-Id"); !requestID.MatchString(id) {
		t.Errorf("upgrade X-Request-Id = %q", id)
	}
	if a := up.Header.Get("Authorization"); a != "" {
		t.Errorf("upgrade carries Authorization %q; the URL is the credential", a)
	}
	if up.Reg != reg.Reg {
		t.Errorf("dialled registration %q, registered %q", up.Reg, reg.Reg)
	}

	t.Run("holds its socket", func(t *testing.T) {
		time.Sleep(2 * time.Second)
		for _, e := range r.rec.all()[j:] {
			if e.Kind == "detach" || e.Kind == "register" {
				t.Fatalf("after attaching: %s", describe([]Event{e}))
			}
		}
		if _, cur, ok := r.router.Executor("E"); !ok || cur != reg.Reg {
			t.Fatal("executor not attached")
		}
	})

	t.Run("garbage handshake is reset", func(t *testing.T) {
		b := r.connect(t, "E", randomKey())
		h := dial(t, b["url"].(string))
		const sid = "3b2f6a4e-1c1d-4e5f-8a9b-0c1d2e3f4a5b"
		write(t, h, resumeFrame(sid))
		write(t, h, handshakeFrame(sid, bytes.Repeat([]byte{1}, 3600)))
		got := read(t, h)
		if s, _, _ := peek(got); s != sid || resetReason(got) != "noise_relay_protocol_error" {
			t.Fatalf("answer %q %q", s, resetReason(got))
		}
		// Data on a stream the executor does not know: Reset too.
		write(t, h, dataFrame("unknown-stream", 0, []byte("x")))
		got = read(t, h)
		if s, _, _ := peek(got); s != "unknown-stream" || resetReason(got) != "noise_relay_protocol_error" {
			t.Fatalf("answer to unknown-stream data %q %q", s, resetReason(got))
		}
	})

	// A cut: the executor redials the same URL, without registering.
	t.Run("redials after a cut", func(t *testing.T) {
		n := len(r.rec.all())
		start := time.Now()
		r.cutAttached(t, "E")
		again, k := r.rec.wait(t, n, 15*time.Second, isUpgrade(101))
		t.Logf("redialled after %s", time.Since(start).Round(10*time.Millisecond))
		if again.Query != up.Query {
			t.Errorf("redialled another URL")
		}
		if again.Header.Get("X-Request-Id") == up.Header.Get("X-Request-Id") {
			t.Errorf("X-Request-Id reused")
		}
		for _, e := range r.rec.all()[n:k] {
			if e.Kind == "register" {
				t.Fatal("registered again after a plain cut")
			}
		}
	})

	t.Run("5xx upgrade retries the same URL", func(t *testing.T) {
		n := len(r.rec.all())
		r.ForTest().SetFaults(Faults{Upgrade: Failure{Status: 502, Code: "route_unavailable", Times: 1}})
		r.cutAttached(t, "E")
		_, k := r.rec.wait(t, n, 40*time.Second, isUpgrade(502))
		ok, m := r.rec.wait(t, k, 40*time.Second, isUpgrade(101))
		if ok.Query != up.Query {
			t.Error("dialled another URL after a 502")
		}
		for _, e := range r.rec.all()[n:m] {
			if e.Kind == "register" {
				t.Fatal("registered again after a 502 upgrade")
			}
		}
	})

}

// Fresh process: the reconnect backoff grows with every cut above.
func TestReferenceReregistersOn4xx(t *testing.T) {
	r := startRelay(t, Options{})
	startReference(t, r.base, "E", execToken)
	first, _ := r.rec.wait(t, 0, 20*time.Second, isUpgrade(101))
	prev := first.Reg
	for _, status := range []int{403, 429} {
		n := len(r.rec.all())
		r.ForTest().SetFaults(Faults{Upgrade: Failure{Status: status, Code: "expired", Times: 1}})
		r.cutAttached(t, "E")
		_, k := r.rec.wait(t, n, 20*time.Second, isUpgrade(status))
		re, k2 := r.rec.wait(t, k, 5*time.Second, func(e Event) bool { return e.Kind == "register" })
		ok, _ := r.rec.wait(t, k2, 20*time.Second, isUpgrade(101))
		if re.Status != 200 || ok.Reg != re.Reg || ok.Reg == prev {
			t.Fatalf("%d: re-registered %q (status %d), then dialled %q (before: %q)", status, re.Reg, re.Status, ok.Reg, prev)
		}
		prev = ok.Reg
	}
}

func TestReferenceRegistrationRetries(t *testing.T) {
	r := startRelay(t, Options{})
	r.ForTest().SetFaults(Faults{Register: Failure{Status: 503, Code: "registration_conflict", Times: 2}})
	startReference(t, r.base, "E", execToken)
	r.rec.wait(t, 0, 30*time.Second, isUpgrade(101))
	var statuses []int
	for _, e := range r.rec.all() {
		if e.Kind == "register" {
			statuses = append(statuses, e.Status)
		}
	}
	if len(statuses) != 3 || statuses[0] != 503 || statuses[1] != 503 || statuses[2] != 200 {
		t.Fatalf("register answers %v, want [503 503 200]", statuses)
	}
}

func TestReferenceRegistrationFailures(t *testing.T) {
	cases := []struct {
		name   string
		faults Faults
		key    string
		stderr string
	}{
		{"500", Faults{Register: Failure{Status: 500, Code: "internal"}}, execToken, ""},
		{"plain 503", Faults{Register: Failure{Status: 503, Code: "unavailable"}}, execToken, ""},
		{"wrong token", Faults{}, "not-a-token", ""},
		{"other environment id", Faults{WrongEnvironmentID: true}, execToken, "different environment id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := startRelay(t, Options{})
			r.ForTest().SetFaults(c.faults)
			p := startReference(t, r.base, "E", c.key)
			if err := p.exited(t, 20*time.Second); err == nil {
				t.Fatal("exited 0")
			}
			n := 0
			for _, e := range r.rec.all() {
				if e.Kind == "register" {
					n++
				}
				if e.Kind == "upgrade" {
					t.Fatal("dialled the rendezvous after a failed registration")
				}
			}
			if n != 1 {
				t.Fatalf("%d register attempts, want 1 (no retry)", n)
			}
			if c.stderr != "" && !strings.Contains(p.stderr.String(), c.stderr) {
				t.Fatalf("stderr lacks %q:\n%s", c.stderr, p.stderr.String())
			}
		})
	}
}

// cutAttached cuts env's executor socket once it is attached (the upgrade
// event comes just before the attachment).
func (r *testRelay) cutAttached(t *testing.T, env string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !r.CutExecutor(env) {
		if time.Now().After(deadline) {
			t.Fatal("no executor attached to cut")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package hostile

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// orphanCases are process trees that try, in increasingly devious ways, to
// outlive their server: a plain child, a background grandchild in the same
// process group, a grandchild in its own session (out of reach of a
// process-group kill), and a double-forked daemon already reparented away
// from its parent before the server dies.
var orphanCases = []struct {
	name  string
	argv  []string
	procs int // marked processes this tree has once it is up
}{
	{"child", []string{"sleep", "1000"}, 1},
	{"grandchild", []string{"sh", "-c", "sleep 1000 & wait"}, 2},
	{"setsid-grandchild", []string{"sh", "-c", "setsid sleep 1000 & wait"}, 2},
	{"daemon", []string{"sh", "-c", "(sleep 1000 &); exec sleep 1000"}, 2},
}

// knownGaps are the (ending, case) pairs that children started directly
// (--contain-descendants=false) do not handle; see docs/security.md. They
// are still run: a survivor makes the subtest skip with the evidence
// instead of failing, unless HOSTILE_STRICT=1.
var knownGaps = map[string]string{
	"sigkill/grandchild":        "PR_SET_PDEATHSIG reaches only the direct child; its children are reparented to init",
	"sigkill/setsid-grandchild": "PR_SET_PDEATHSIG reaches only the direct child; its children are reparented to init",
	"sigkill/daemon":            "PR_SET_PDEATHSIG reaches only the direct child; its children are reparented to init",
	"sigterm/setsid-grandchild": "a descendant in its own session escapes the process-group kill",
	"session/setsid-grandchild": "a descendant in its own session escapes the process-group kill",
}

func strict() bool { return os.Getenv("HOSTILE_STRICT") != "" }

// TestNoOrphans ends a server or a session in each of three ways while each
// kind of process tree runs, and proves with a /proc scan that no process
// of the tree survives: SIGKILL of the server (which it cannot catch),
// SIGTERM of the server, and expiry of a detached session (server running).
func TestNoOrphans(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting for processes to end
	endings := []struct {
		name string
		args []string
		end  func(t *testing.T, s *server, cl *client)
	}{
		{"sigkill", nil, func(t *testing.T, s *server, _ *client) {
			if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-s.done
		}},
		{"sigterm", nil, func(t *testing.T, s *server, _ *client) {
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.done:
			case <-time.After(5 * time.Second):
				t.Errorf("server did not exit within 5s of SIGTERM")
			}
		}},
		{"session", []string{"--session-ttl", "1s"}, func(t *testing.T, s *server, cl *client) {
			cl.close()
			time.Sleep(time.Second) // the TTL
		}},
	}
	// The default server starts children through childinit's subreaper
	// and has no gaps: every case is strict. With --contain-descendants=false
	// (children started directly) it has the known gaps.
	for _, mode := range []string{"default", "direct"} {
		for _, e := range endings {
			for _, c := range orphanCases {
				name := e.name + "/" + c.name
				args := e.args
				if mode == "direct" {
					args = append([]string{"--contain-descendants=false"}, e.args...)
				}
				t.Run(mode+"/"+name, func(t *testing.T) {
					t.Parallel()
					gap, known := knownGaps[name]
					known = known && !strict() && mode == "direct"
					mark := marker()
					t.Cleanup(func() { killMarked(mark) })
					s := startServer(t, nil, args...)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					cl := dial(ctx, t, s.url)
					cl.handshake(ctx, t)
					if err := cl.startProcess(ctx, c.name, c.argv, map[string]string{"HOSTILE_MARK": mark}); err != nil {
						t.Fatalf("start: %v", err)
					}
					waitMarked(t, mark, c.procs, 5*time.Second)

					if known {
						// Keep the known gaps cheap: their outcome is already
						// known, only a change is news.
						e := e
						if e.name == "sigterm" {
							_ = s.cmd.Process.Signal(syscall.SIGTERM)
							select {
							case <-s.done:
							case <-time.After(2 * time.Second):
							}
						} else {
							e.end(t, s, cl)
						}
					} else {
						e.end(t, s, cl)
					}
					within := 5 * time.Second
					if known {
						within = 2 * time.Second
					}
					left := waitNoMarked(mark, within)
					if e.name == "session" {
						s.alive(t)
					}
					switch {
					case len(left) > 0 && known:
						t.Skipf("KNOWN GAP (%s): %d process(es) survived:%s", gap, len(left), describe(left))
					case len(left) > 0:
						t.Fatalf("%d process(es) survived %s by %v:%s", len(left), e.name, within, describe(left))
					case t.Failed():
					case known:
						t.Logf("known gap %q no longer reproduces: remove it from knownGaps", name)
					}
				})
			}
		}
	}
}

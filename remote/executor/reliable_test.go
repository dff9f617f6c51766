package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/internal/test/syncbuf"
	"github.com/execgo/exec-server/remote/relay"
)

// With the SDK's harness, which advertises the reliability extension, a
// stream survives a relay that drops frames and cuts the harness socket:
// output and files still arrive byte for byte.
func TestReliableThroughFaults(t *testing.T) {
	cases := []struct {
		name   string
		faults relay.Faults
	}{
		{"drop 10 percent", relay.Faults{Drop: 0.1, Duplicate: 0.05, Reorder: 0.1, ReorderDepth: 16, Seed: 5}},
		{"harness socket cut", relay.Faults{CutEvery: 40, CutRole: "harness", Seed: 6}},
		{"executor socket cut", relay.Faults{CutEvery: 40, CutRole: "environment", Seed: 7}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := startRig(t, "go", relay.Faults{}, nil)
			r.waitAttached()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cl, err := client.DialRemote(ctx, r.base, r.env, harnessToken, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			r.relay.ForTest().SetFaults(c.faults)
			name := filepath.Join(t.TempDir(), "f")
			data := make([]byte, 1<<20)
			for i := range data {
				data[i] = byte(i*7 + i>>9)
			}
			if err := cl.WriteFile(ctx, name, data); err != nil {
				t.Fatal(err)
			}
			if disk, err := os.ReadFile(name); err != nil || !bytes.Equal(disk, data) {
				t.Fatalf("file on disk: %v", err)
			}
			out, code, err := cl.Output(ctx, client.Cmd{Argv: []string{"/bin/cat", name}})
			if err != nil || code != 0 {
				t.Fatalf("Output: %v exit %d", err, code)
			}
			if !bytes.Equal(out, data) {
				t.Fatalf("stdout: %d bytes sha %x, want sha %x", len(out), sha256.Sum256(out), sha256.Sum256(data))
			}
			if c.faults.CutEvery > 0 {
				holds := r.events.count(func(e relay.Event) bool { return e.Kind == "hold" })
				if holds == 0 {
					t.Fatal("no socket was cut and its streams held")
				}
				t.Logf("%d socket cuts resumed", holds)
				// One stream throughout: no second handshake.
				if n := r.events.count(func(e relay.Event) bool { return e.Kind == "validate" }); n != 1 {
					t.Fatalf("%d handshakes validated, want 1", n)
				}
				if c.faults.CutRole == "environment" && r.events.count(isAttach) < 2 {
					t.Fatal("the executor never redialled")
				}
			}
		})
	}
}

// The control: an executor without the extension (as codex 0.169) loses
// the stream under the same drops.
func TestPlainExecutorLosesFrames(t *testing.T) {
	r := startRig(t, "go", relay.Faults{}, func(cfg *Config) { cfg.Plain = true })
	r.waitAttached()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	cl, err := client.DialRemote(ctx, r.base, r.env, harnessToken, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r.relay.ForTest().SetFaults(relay.Faults{Drop: 0.1, Seed: 5})
	// (Not Output: on a Wait error it returns its buffer while the
	// output pump may still write to it; reported to the client's owner.)
	var out syncbuf.Buffer
	p, err := cl.Start(ctx, client.Cmd{Argv: []string{"/bin/sh", "-c", "head -c 1000000 /dev/zero"}, Stdout: &out})
	if err != nil {
		return // the stream already broke
	}
	if _, err := p.Wait(ctx); err == nil && len(out.String()) == 1000000 {
		t.Fatal("1 MB arrived whole through 10 % drops without the extension")
	}
}

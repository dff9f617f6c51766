package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/remote/relay"
)

// The SDK's remote dialer (client.DialRemote over remote/harness) against
// both executors through exec-relay, with relay faults; output and files
// are compared byte for byte.
func TestDialRemote(t *testing.T) {
	cases := []struct {
		name   string
		faults relay.Faults
	}{
		{"clean", relay.Faults{}},
		{"duplicate reorder delay", relay.Faults{Duplicate: 0.2, Reorder: 0.2, ReorderDepth: 64, Delay: time.Millisecond, Seed: 11}},
	}
	forEachImpl(t, func(t *testing.T, impl string) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := startRig(t, impl, c.faults, nil)
				r.waitAttached()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cl, err := client.DialRemote(ctx, r.base, r.env, harnessToken, client.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				// Every byte value, 1 MiB: into a file, back through
				// ReadFile and through a command's stdout.
				name := t.TempDir() + "/f"
				data := make([]byte, 1<<20)
				for i := range data {
					data[i] = byte(i*31 + i>>8)
				}
				if err := cl.WriteFile(ctx, name, data); err != nil {
					t.Fatal(err)
				}
				back, err := cl.ReadFile(ctx, name)
				if err != nil || !bytes.Equal(back, data) {
					t.Fatalf("ReadFile: %v, %d bytes", err, len(back))
				}
				out, code, err := cl.Output(ctx, client.Cmd{Argv: []string{"/bin/cat", name}})
				if err != nil || code != 0 {
					t.Fatalf("Output: %v exit %d", err, code)
				}
				if !bytes.Equal(out, data) {
					t.Fatalf("stdout: %d bytes sha %x, want %d sha %x", len(out), sha256.Sum256(out), len(data), sha256.Sum256(data))
				}
			})
		}
	})
}

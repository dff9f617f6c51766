package executor

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/server"
)

// The same server reached directly over its websocket and through
// exec-relay (Noise, relay frames, two more hops), on loopback:
//
//	go test -run XXX -bench . ./remote/executor/

func benchClient(b *testing.B, viaRelay bool) *client.Client {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	srv := server.New(server.Config{})
	b.Cleanup(srv.Close)
	if !viaRelay {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go srv.Serve(ctx, l)
		cl, err := client.Dial(ctx, "ws://"+l.Addr().String(), client.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cl.Close() })
		return cl
	}
	_, base, ev := newRelayTB(b)
	go Run(ctx, Config{RegistryURL: base, EnvironmentID: "bench", Token: execToken, Server: srv})
	deadline := time.Now().Add(10 * time.Second)
	for ev.count(isAttach) == 0 {
		if time.Now().After(deadline) {
			b.Fatal("executor did not attach")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cl, err := client.DialRemote(ctx, base, "bench", harnessToken, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	return cl
}

var paths = []struct {
	name  string
	relay bool
}{{"direct", false}, {"relay", true}}

// BenchmarkTrue is a /bin/true start → closed round trip.
func BenchmarkTrue(b *testing.B) {
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			cl := benchClient(b, p.relay)
			ctx := context.Background()
			for b.Loop() {
				if _, code, err := cl.Output(ctx, client.Cmd{Argv: []string{"/bin/true"}}); err != nil || code != 0 {
					b.Fatal(err, code)
				}
			}
		})
	}
}

// BenchmarkStdout is a command's stdout of 16 MiB, read to the end.
func BenchmarkStdout(b *testing.B) {
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			cl := benchClient(b, p.relay)
			name := filepath.Join(b.TempDir(), "blob")
			data := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
			if err := os.WriteFile(name, data, 0o600); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				out, _, err := cl.Output(ctx, client.Cmd{Argv: []string{"/bin/cat", name}})
				if err != nil || len(out) != len(data) {
					b.Fatal(err, len(out))
				}
			}
		})
	}
}

// BenchmarkCall is one small request/response (environment/status).
func BenchmarkCall(b *testing.B) {
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			cl := benchClient(b, p.relay)
			ctx := context.Background()
			for b.Loop() {
				if _, err := cl.EnvironmentStatus(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

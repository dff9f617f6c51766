package harness

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/execgo/exec-server/remote/noise"
)

// BenchmarkEcho is one small message's round trip harness → test relay →
// Go executor → back, on loopback (two websocket hops each way, Noise
// records, the channel's framing).
func BenchmarkEcho(b *testing.B) {
	for _, plain := range []bool{true, false} {
		name := "reliable"
		if plain {
			name = "plain"
		}
		b.Run(name, func(b *testing.B) {
			d := newDouble(b, "env-bench")
			startEchoExecutorWith(b, d, &echoExecutor{key: mustKey(b), plain: plain})
			dl, _ := NewDialer(d.srv.URL, d.env, harnessToken, Options{Plain: plain})
			ctx := context.Background()
			ch, err := dl.Dial(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer ch.Close()
			msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"process/read","params":{"processId":"p"}}`)
			for b.Loop() {
				if err := ch.Write(ctx, msg, false); err != nil {
					b.Fatal(err)
				}
				got, err := ch.Read(ctx)
				if err != nil || !bytes.Equal(got, msg) {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDial is one stream's setup: /connect, the websocket, the
// handshake with the registry's /validate on the executor side.
func BenchmarkDial(b *testing.B) {
	d := newDouble(b, "env-bench-dial")
	startEchoExecutorWith(b, d, &echoExecutor{key: mustKey(b)})
	dl, _ := NewDialer(d.srv.URL, d.env, harnessToken, Options{})
	for b.Loop() {
		ch, err := dl.Dial(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		ch.Close()
	}
}

// BenchmarkBulk moves 1 MiB messages through the same path.
func BenchmarkBulk(b *testing.B) {
	d := newDouble(b, "env-bench-bulk")
	startEchoExecutorWith(b, d, &echoExecutor{key: mustKey(b)})
	dl, _ := NewDialer(d.srv.URL, d.env, harnessToken, Options{})
	ctx := context.Background()
	ch, err := dl.Dial(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	msg := []byte(`"` + strings.Repeat("x", 1<<20-2) + `"`)
	b.SetBytes(int64(2 * len(msg)))
	for b.Loop() {
		if err := ch.Write(ctx, msg, false); err != nil {
			b.Fatal(err)
		}
		if _, err := ch.Read(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func mustKey(tb testing.TB) *noise.Keypair {
	tb.Helper()
	k, err := noise.GenerateKeypair()
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

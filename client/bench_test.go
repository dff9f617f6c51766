package client_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"testing"

	"github.com/execgo/exec-server/client"
)

// BenchmarkTransfer measures Upload and Download of 16 MiB over a
// websocket, per server.
func BenchmarkTransfer(b *testing.B) {
	data := make([]byte, 16<<20)
	rand.Read(data)
	for _, s := range benchServers(b) {
		b.Run(s.name, func(b *testing.B) {
			ctx := testCtx(b)
			c, err := client.Dial(ctx, s.listen(b), client.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			name := b.TempDir() + "/f"
			b.Run("upload", func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if _, err := c.Upload(ctx, name, bytes.NewReader(data), nil); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("download", func(b *testing.B) {
				if err := c.WriteFile(ctx, name, data); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if _, err := c.Download(ctx, name, io.Discard, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("output", func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					p, err := c.Start(ctx, client.Cmd{Argv: []string{"head", "-c", "16777216", "/dev/zero"}})
					if err != nil {
						b.Fatal(err)
					}
					if n, err := io.Copy(io.Discard, p.Stdout()); err != nil || n != int64(len(data)) {
						b.Fatal(n, err)
					}
				}
			})
		})
	}
}

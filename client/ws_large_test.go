package client_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/execgo/exec-server/client"
)

// A 20 MiB fs/writeFile over websocket is one message of about 28 MB: the
// transport sends it in frames the reference accepts (it refuses a frame
// over 16 MiB, and used to drop the connection here).
func TestLargeWriteFileOverWebsocket(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 20 MiB each way")
	}
	defer client.SetStreamThreshold(64 << 20)()
	data := make([]byte, 20<<20)
	r := rand.NewChaCha8([32]byte{1})
	_, _ = r.Read(data)
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		c, err := client.Dial(ctx, s.listen(t), client.Options{ReconnectTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		name := filepath.Join(t.TempDir(), "big")
		if err := c.WriteFile(ctx, name, data); err != nil {
			t.Fatalf("WriteFile 20 MiB: %v", err)
		}
		got, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("file on disk: %d bytes, %v; want the 20 MiB written", len(got), err)
		}
	})
}

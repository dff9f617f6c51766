package channel

import (
	"context"
	"testing"

	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
)

// BenchmarkThroughput moves messages from one channel to another with no
// relay in between: framing, sealing, frame encoding and decoding,
// opening, cutting and (unless nojsoncheck) JSON validation.
func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{100, 64 << 10, 1 << 20} {
		for _, skip := range []bool{false, true} {
			name := byteSize(size)
			if skip {
				name += "/nojsoncheck"
			}
			b.Run(name, func(b *testing.B) { throughput(b, size, skip) })
		}
	}
}

func throughput(b *testing.B, size int, skip bool) {
	ctx := context.Background()
	var recv *Channel
	sender := SenderFunc(func(ctx context.Context, f *frame.Frame) error {
		g, err := frame.Unmarshal(f.Marshal())
		if err != nil {
			return err
		}
		return recv.Deliver(ctx, g)
	})
	send := New("s", sender, noise.NewCipherState([32]byte{1}), noise.NewCipherState([32]byte{2}), Options{})
	recv = New("s", &recorder{}, noise.NewCipherState([32]byte{2}), noise.NewCipherState([32]byte{1}), Options{SkipJSONCheck: skip})
	defer send.Close()
	defer recv.Close()
	msg := jsonOf(size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if err := send.Write(ctx, msg, false); err != nil {
			b.Fatal(err)
		}
		if _, err := recv.Read(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return string(rune('0'+n>>20)) + "MiB"
	case n >= 1<<10:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

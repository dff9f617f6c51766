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

// BenchmarkReliableStream sends 60 KiB messages one way between two
// reliable channels; each direction's frames cross a goroutine (a queue
// of 64 frames, as a socket would), so that the window, the receiver's
// acks and the retransmission timer all play their part. Reported:
// records resent per op (0 on this lossless link: any is spurious).
func BenchmarkReliableStream(b *testing.B) {
	ctx := context.Background()
	type link struct {
		q  chan []byte
		to *Channel
	}
	mk := func() *link { return &link{q: make(chan []byte, 64)} }
	ab, ba := mk(), mk()
	send := func(l *link) SenderFunc {
		return func(ctx context.Context, f *frame.Frame) error {
			select {
			case l.q <- f.Marshal():
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	a := New("s", send(ab), noise.NewCipherState([32]byte{1}), noise.NewCipherState([32]byte{2}), Options{Reliable: true, WaitWhenFull: true})
	bc := New("s", send(ba), noise.NewCipherState([32]byte{2}), noise.NewCipherState([32]byte{1}), Options{Reliable: true, WaitWhenFull: true, SkipJSONCheck: true})
	ab.to, ba.to = bc, a
	defer a.Close()
	defer bc.Close()
	for _, l := range []*link{ab, ba} {
		go func() {
			for {
				select {
				case m := <-l.q:
					f, err := frame.Unmarshal(m)
					if err != nil {
						panic(err)
					}
					if l.to.Deliver(ctx, f) != nil {
						return
					}
				case <-l.to.Done():
					return
				}
			}
		}()
	}
	msg := jsonOf(MaxRecordPlaintext - 4)
	// Both ends learn the peer is reliable before timing starts.
	if err := a.Write(ctx, msg, false); err != nil {
		b.Fatal(err)
	}
	if _, err := bc.Read(ctx); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for range b.N {
			if _, err := bc.Read(ctx); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	r0 := a.Retransmitted()
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := a.Write(ctx, msg, false); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(a.Retransmitted()-r0)/float64(b.N), "resent/op")
}

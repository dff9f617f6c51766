package hostile

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentPartialMessages opens a dozen websocket connections and on
// each sends 45 MiB of one message (under the 64 MiB limit) without ever
// finishing it. Every such connection is allowed on its own; together they
// must not make the server hold 540 MiB: the server-wide budget for
// incoming message bytes (--max-incoming-bytes, 256 MiB here) stops reading
// the ones that do not fit (TCP back-pressure), while small messages from
// a well-behaved client never wait for it.
func TestConcurrentPartialMessages(t *testing.T) {
	const (
		conns    = 12
		frames   = 3
		frameLen = 15 << 20
		bound    = 512 << 20
		stall    = 3 * time.Second
	)
	s := startServer(t, nil, hostileArgs("HOSTILE_PARTIAL_ARGS", "--max-incoming-bytes", "268435456")...)
	base, _ := s.memory()
	mem := sampleMemory(s)
	stopProbe := startProbe(t, s)

	// Masked payload bytes that unmask to 'a' (mask 1, 2, 3, 4).
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = 'a' ^ byte(i%4+1)
	}
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		upgrade(t, c, s.addr)
	}
	// All connections send at once, as a real attack would: the ones the
	// budget stops end on their write deadline together, not one by one.
	var sent atomic.Int64
	var wg sync.WaitGroup
	for _, c := range open {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := 0; f < frames; f++ {
				op := byte(0x01) // text, not final
				if f > 0 {
					op = 0x00 // continuation, not final
				}
				n := frameLen
				hdr := []byte{op, 0x80 | 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), 1, 2, 3, 4}
				_ = c.SetWriteDeadline(time.Now().Add(stall))
				if _, err := c.Write(hdr); err != nil {
					return
				}
				for k := 0; k < frameLen/len(chunk); k++ {
					// No progress for this long is the server's
					// back-pressure; less cuts off connections that a
					// server under -race reads slowly but does read.
					_ = c.SetWriteDeadline(time.Now().Add(stall))
					if _, err := c.Write(chunk); err != nil {
						return // the server stopped reading us: back-pressure
					}
					sent.Add(int64(len(chunk)))
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Second)
	p := stopProbe()
	peak, hwm := mem()
	s.alive(t)
	t.Logf("partial messages: %d connections, %s sent without finishing a message", conns, mib(sent.Load()))
	p.check(t, "partial messages", livenessBound)
	t.Logf("partial messages: server memory: baseline RSS %s, peak RSS %s, VmHWM %s", mib(base), mib(peak), mib(hwm))
	if hwm > bound {
		t.Fatalf("server memory high-water %s over %s with a 256 MiB budget for incoming messages", mib(hwm), mib(bound))
	}
}

package policy

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

type chunk struct{ stream, data string }

// TestDenialMatchesReference: every row with "(ref)" was run on the
// reference (codex exec-server 0.169.0, process/start of /bin/sh -c under a
// read-only sandbox) and gave the same sandboxDenied.
func TestDenialMatchesReference(t *testing.T) {
	for _, c := range []struct {
		name   string
		chunks []chunk
		exit   int
		want   bool
	}{
		{"keyword on stdout (ref)", []chunk{{"stdout", "Permission Denied\n"}}, 1, true},
		{"keyword on stderr (ref)", []chunk{{"stderr", "Permission Denied\n"}}, 1, true},
		{"keyword on a pty (ref)", []chunk{{"pty", "Permission Denied\r\n"}}, 1, true},
		{"no keyword, exit 1 (ref)", []chunk{{"stdout", "hi\n"}}, 1, false},
		{"keyword wins over exit 2 (ref)", []chunk{{"stderr", "sandbox\n"}}, 2, true},
		{"exit 127 without keyword (ref)", nil, 127, false},
		{"exit 159 (ref)", nil, 159, true},
		{"killed by SIGSYS (ref)", nil, 128 + 31, true},
		{"keyword split across chunks (ref)", []chunk{{"stdout", "Permission De"}, {"stdout", "nied\n"}}, 1, true},
		{"Kelvin sign lower-cases to k (ref)", []chunk{{"stdout", "landloc\u212a"}}, 1, true},
		{"exit 3, no output (ref)", nil, 3, false},
		{"exit 0 with keyword (ref)", []chunk{{"stdout", "sandbox\n"}}, 0, false},
		{"Kelvin sign split across chunks", []chunk{{"stdout", "landloc\xe2\x84"}, {"stdout", "\xaa"}}, 1, true},
		{"read-only file system", []chunk{{"stderr", "touch: cannot touch '../x': Read-only file system\n"}}, 1, true},
		{"operation not permitted", []chunk{{"stderr", "socket: OPERATION NOT PERMITTED"}}, 1, true},
		{"seccomp", []chunk{{"stdout", "seccomp"}}, 5, true},
		{"failed to write file", []chunk{{"stdout", "Failed to write file x"}}, 1, true},
		{"exit 2 without keyword", []chunk{{"stderr", "Directory nonexistent"}}, 2, false},
		{"exit 126 without keyword", nil, 126, false},
		{"keyword split across streams does not count", []chunk{{"stdout", "Permission "}, {"stderr", "denied"}}, 1, false},
		{"keyword split by another stream's chunk", []chunk{{"stdout", "sand"}, {"stderr", "x"}, {"stdout", "box"}}, 1, true},
		{"keyword after a long output", []chunk{{"stdout", strings.Repeat("x", 1<<16)}, {"stdout", strings.Repeat("y", 100) + "landl"}, {"stdout", "ock"}}, 1, true},
		{"near miss", []chunk{{"stdout", "permission deni"}, {"stdout", "al"}}, 1, false},
		{"signal other than SIGSYS", nil, 128 + 9, false},
	} {
		var d Denial
		for _, ch := range c.chunks {
			d.Write(ch.stream, []byte(ch.data))
		}
		if got := d.Denied(c.exit); got != c.want {
			t.Errorf("%s: Denied(%d) = %v, want %v", c.name, c.exit, got, c.want)
		}
	}
}

// TestDenialSplitsEveryWay: a keyword is found wherever the chunk boundary
// falls, and the tail kept per stream stays bounded.
func TestDenialSplitsEveryWay(t *testing.T) {
	for _, k := range denialKeywords {
		text := "prefix " + strings.ToUpper(k) + " suffix"
		for i := 0; i <= len(text); i++ {
			var d Denial
			d.Write("stderr", []byte(text[:i]))
			d.Write("stderr", []byte(text[i:]))
			if !d.Denied(1) {
				t.Errorf("%q split at %d not found", text, i)
			}
		}
	}
	var d Denial
	for i := 0; i < 100; i++ {
		d.Write("stdout", []byte(strings.Repeat("z", 1000)))
	}
	if n := len(d.tails["stdout"]); n > tailLen {
		t.Errorf("tail is %d bytes, want at most %d", n, tailLen)
	}
}

func TestDenialConcurrentWriters(t *testing.T) {
	var d Denial
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := fmt.Sprint("s", i%2)
			for j := 0; j < 200; j++ {
				d.Write(s, []byte("no keyword here "))
			}
			if i == 5 {
				d.Write(s, []byte("read-only file system"))
			}
		}(i)
	}
	wg.Wait()
	if !d.Denied(1) {
		t.Error("keyword written concurrently not found")
	}
}

func BenchmarkDenialWrite(b *testing.B) {
	chunk := []byte(strings.Repeat("an ordinary line of build output\n", 256))
	b.SetBytes(int64(len(chunk)))
	var d Denial
	for b.Loop() {
		d.Write("stdout", chunk)
	}
}

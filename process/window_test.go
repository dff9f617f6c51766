package process

import (
	"bytes"
	"fmt"
	"testing"
)

func seqs(cs []chunk) []uint64 {
	out := make([]uint64, len(cs))
	for i, c := range cs {
		out[i] = c.seq
	}
	return out
}

func TestWindowEvictsOldestWholeChunks(t *testing.T) {
	w := window{maxBytes: 10, maxChunks: 100}
	for i, n := range []int{4, 4, 4} {
		w.append(chunk{seq: uint64(i + 1), stream: "stdout", data: bytes.Repeat([]byte{'a' + byte(i)}, n)})
	}
	// 12 bytes > 10: chunk 1 goes, whole.
	if got := seqs(w.after(0, -1)); fmt.Sprint(got) != "[2 3]" {
		t.Errorf("retained %v, want [2 3]", got)
	}
	if w.bytes != 8 {
		t.Errorf("bytes = %d, want 8", w.bytes)
	}
	// A chunk larger than the whole window evicts everything else but is
	// itself kept: a read must always have something to return.
	w.append(chunk{seq: 4, data: make([]byte, 25)})
	if got := seqs(w.after(0, -1)); fmt.Sprint(got) != "[4]" {
		t.Errorf("after an oversize chunk: %v, want [4]", got)
	}
	w.append(chunk{seq: 5, data: []byte("x")})
	if got := seqs(w.after(0, -1)); fmt.Sprint(got) != "[5]" {
		t.Errorf("after a chunk behind an oversize one: %v, want [5]", got)
	}
}

func TestWindowChunkLimit(t *testing.T) {
	w := window{maxBytes: 1 << 20, maxChunks: 3}
	for i := 1; i <= 5; i++ {
		w.append(chunk{seq: uint64(i), data: []byte("x")})
	}
	if got := seqs(w.after(0, -1)); fmt.Sprint(got) != "[3 4 5]" {
		t.Errorf("retained %v, want [3 4 5]", got)
	}
}

func TestWindowCompactionBoundsMemory(t *testing.T) {
	w := window{maxBytes: 100, maxChunks: 1000}
	for i := 1; i <= 100000; i++ {
		w.append(chunk{seq: uint64(i), data: []byte("0123456789")})
		if cap(w.chunks) > 1000 {
			t.Fatalf("after %d appends the slice has capacity %d for %d live chunks", i, cap(w.chunks), w.len())
		}
	}
	got := w.after(0, -1)
	if fmt.Sprint(seqs(got)) != fmt.Sprint([]uint64{99991, 99992, 99993, 99994, 99995, 99996, 99997, 99998, 99999, 100000}) {
		t.Errorf("retained %v", seqs(got))
	}
	// Evicted slots are cleared so their data can be collected.
	for i := 0; i < w.head; i++ {
		if w.chunks[i].data != nil {
			t.Fatalf("evicted slot %d still references its data", i)
		}
	}
}

func TestWindowAfter(t *testing.T) {
	w := window{maxBytes: 1 << 20, maxChunks: 100}
	// Seqs with gaps: exit and close events take seqs too.
	for _, c := range []struct {
		seq uint64
		n   int
	}{{1, 5}, {2, 3}, {4, 10}, {5, 2}, {7, 1}} {
		w.append(chunk{seq: c.seq, data: make([]byte, c.n)})
	}
	tests := []struct {
		after  uint64
		budget int
		want   string
	}{
		{0, -1, "[1 2 4 5 7]"},
		{1, -1, "[2 4 5 7]"},
		{3, -1, "[4 5 7]"},
		{6, -1, "[7]"},
		{7, -1, "[]"},
		{100, -1, "[]"},
		{0, 0, "[1]"},        // the first chunk always comes
		{0, 1, "[1]"},        // even when larger than the budget
		{0, 5, "[1]"},        // budget reached exactly
		{0, 6, "[1]"},        // the next would exceed it
		{0, 8, "[1 2]"},      // 5+3
		{0, 17, "[1 2]"},     // 5+3+10 = 18 > 17
		{0, 18, "[1 2 4]"},   // exactly
		{0, 20, "[1 2 4 5]"}, // 20 reached
		{0, 1 << 30, "[1 2 4 5 7]"},
		{2, 0, "[4]"},
		{2, 11, "[4]"},
		{2, 12, "[4 5]"},
	}
	for _, tt := range tests {
		if got := fmt.Sprint(seqs(w.after(tt.after, tt.budget))); got != tt.want {
			t.Errorf("after(%d, %d) = %s, want %s", tt.after, tt.budget, got, tt.want)
		}
	}
	// after returns a copy: appending later does not change it.
	got := w.after(0, -1)
	w.append(chunk{seq: 8, data: []byte("y")})
	if len(got) != 5 {
		t.Errorf("earlier result changed to %v", seqs(got))
	}
}

func TestWindowEmpty(t *testing.T) {
	w := window{maxBytes: 10, maxChunks: 10}
	if got := w.after(0, -1); len(got) != 0 {
		t.Errorf("empty window returned %v", got)
	}
	if got := w.after(0, 0); len(got) != 0 {
		t.Errorf("empty window with budget 0 returned %v", got)
	}
}

// With reuse, an evicted whole-buffer chunk goes back to the chunk
// buffers, unless a Read returned it: its bytes may still be encoded.
func TestWindowReuseSkipsLentChunks(t *testing.T) {
	for len(spareBufs) > 0 {
		<-spareBufs
	}
	defer func() {
		for len(spareBufs) > 0 {
			<-spareBufs
		}
	}()
	w := &window{maxBytes: 2 * chunkBufSize, maxChunks: 100, reuse: true}
	lent := make([]byte, chunkBufSize)
	kept := make([]byte, chunkBufSize)
	w.append(chunk{seq: 1, stream: "stdout", data: lent, spare: true})
	if got := w.after(0, -1); len(got) != 1 {
		t.Fatalf("after: %d chunks", len(got))
	}
	w.append(chunk{seq: 2, stream: "stdout", data: kept, spare: true})
	w.append(chunk{seq: 3, stream: "stdout", data: make([]byte, 10)})           // evicts 1
	w.append(chunk{seq: 4, stream: "stdout", data: make([]byte, chunkBufSize)}) // evicts 2
	var back [][]byte
	for len(spareBufs) > 0 {
		back = append(back, <-spareBufs)
	}
	if len(back) != 1 || &back[0][:1][0] != &kept[0] {
		t.Fatalf("%d buffers came back; want only the chunk no Read returned", len(back))
	}
}

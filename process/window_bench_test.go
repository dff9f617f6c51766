package process

import (
	"strconv"
	"testing"
)

// The retained window sits on the output path of every chunk (append) and
// of every process/read (after); both must stay cheap and allocation-light
// when the window is full and evicting.

func fullWindow(chunkSize int) (*window, uint64) {
	w := &window{maxBytes: 1 << 20, maxChunks: 50000}
	data := make([]byte, chunkSize)
	var seq uint64
	for w.bytes < w.maxBytes && w.len() < w.maxChunks {
		seq++
		w.append(chunk{seq: seq, stream: "stdout", data: data})
	}
	return w, seq
}

func BenchmarkWindowAppend(b *testing.B) {
	for _, size := range []int{1, 4096, 64 << 10} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			w, seq := fullWindow(size)
			data := make([]byte, size)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				seq++
				w.append(chunk{seq: seq, stream: "stdout", data: data})
			}
			if w.bytes > w.maxBytes {
				b.Fatalf("window holds %d bytes, over its %d", w.bytes, w.maxBytes)
			}
		})
	}
}

func BenchmarkWindowAfter(b *testing.B) {
	for _, size := range []int{1, 4096, 64 << 10} {
		w, last := fullWindow(size)
		first := w.chunks[w.head].seq
		mid := first + (last-first)/2
		for _, tt := range []struct {
			name   string
			after  uint64
			budget int
		}{
			{"all", 0, -1},
			{"half", mid, -1},
			{"budget64k", mid, 64 << 10},
			{"none", last, -1},
		} {
			b.Run(strconv.Itoa(size)+"/"+tt.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_ = w.after(tt.after, tt.budget)
				}
			})
		}
	}
}

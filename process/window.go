package process

import "sort"

// chunk is one output event as it was pushed: retained chunks are exactly
// the pushed chunks, never merged or split.
type chunk struct {
	seq    uint64
	stream string
	data   []byte
}

// window is the retained output of one process: the newest chunks whose
// sizes add up to at most maxBytes (and at most maxChunks of them). Oldest
// whole chunks are evicted first. It is not safe for concurrent use.
type window struct {
	chunks    []chunk
	head      int // chunks[:head] are evicted and wait for compaction
	bytes     int
	maxBytes  int
	maxChunks int
}

func (w *window) append(c chunk) {
	w.chunks = append(w.chunks, c)
	w.bytes += len(c.data)
	for w.len() > 1 && (w.bytes > w.maxBytes || w.len() > w.maxChunks) {
		w.bytes -= len(w.chunks[w.head].data)
		w.chunks[w.head] = chunk{}
		w.head++
	}
	// Compact once half the slice is dead, so memory stays proportional
	// to what is retained.
	if w.head > 64 && w.head*2 >= len(w.chunks) {
		n := copy(w.chunks, w.chunks[w.head:])
		clear(w.chunks[n:])
		w.chunks = w.chunks[:n]
		w.head = 0
	}
}

func (w *window) len() int { return len(w.chunks) - w.head }

// after returns the retained chunks with seq > afterSeq, in seq order,
// within a byte budget: the first chunk is always included, and no chunk
// is split. budget < 0 means no budget.
func (w *window) after(afterSeq uint64, budget int) []chunk {
	live := w.chunks[w.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].seq > afterSeq })
	if i == len(live) {
		return nil
	}
	end := len(live)
	if budget >= 0 {
		total := 0
		for j := i; j < len(live); j++ {
			n := len(live[j].data)
			if j > i && total+n > budget {
				end = j
				break
			}
			total += n
			if total >= budget {
				end = j + 1
				break
			}
		}
	}
	out := make([]chunk, end-i)
	copy(out, live[i:end])
	return out
}

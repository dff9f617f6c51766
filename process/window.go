package process

import (
	"sort"

	"github.com/execgo/exec-server/internal/budget"
)

// chunk is one output event as it was pushed: retained chunks are exactly
// the pushed chunks, never merged or split.
type chunk struct {
	seq    uint64
	stream string
	data   []byte
	// spare: data is a whole chunk buffer (chunkBuf), reusable once the
	// chunk is evicted; lent: a Read returned it, so it is not.
	spare, lent bool
}

// window is the retained output of one process: the newest chunks whose
// sizes add up to at most maxBytes (and at most maxChunks of them). Oldest
// whole chunks are evicted first. Its bytes are also taken from a budget
// shared by every window of the server: when that is spent, the window
// gives up its own oldest chunks, down to the newest one, which it always
// keeps (so the budget may be exceeded by at most one chunk per window).
// It is not safe for concurrent use.
type window struct {
	chunks    []chunk
	head      int // chunks[:head] are evicted and wait for compaction
	bytes     int
	maxBytes  int
	maxChunks int
	budget    *budget.Bytes // nil: unlimited
	// reuse: evicted spare chunks that no Read returned go back to the
	// chunk buffers (Options.ReuseOutput). Eviction happens only in
	// append, which the process's emitter calls after the previous
	// chunk's delivery returned, so no sink is still reading them.
	reuse bool
}

func (w *window) append(c chunk) {
	n := len(c.data)
	for !w.budget.TryAcquire(int64(n)) {
		if w.len() == 0 {
			w.budget.Force(int64(n)) // the newest chunk is always kept
			break
		}
		w.evict()
	}
	w.chunks = append(w.chunks, c)
	w.bytes += n
	for w.len() > 1 && (w.bytes > w.maxBytes || w.len() > w.maxChunks) {
		w.evict()
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

// evict drops the oldest retained chunk.
func (w *window) evict() {
	c := &w.chunks[w.head]
	n := len(c.data)
	w.bytes -= n
	w.budget.Release(int64(n))
	if w.reuse && c.spare && !c.lent {
		putChunkBuf(c.data)
	}
	w.chunks[w.head] = chunk{}
	w.head++
}

// free drops every chunk and gives their bytes back to the budget; the
// window is empty afterwards.
func (w *window) free() {
	w.budget.Release(int64(w.bytes))
	w.chunks, w.head, w.bytes = nil, 0, 0
}

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
	for j := i; j < end; j++ {
		live[j].lent = true // the caller encodes them after the lock
	}
	return out
}

package process

// Output chunk buffers. Each chunk of bulk output is a whole read buffer
// handed to the retained window (see pump); allocating a new one per chunk
// made the server allocate a byte per byte of output, and garbage
// collection a fifth of its CPU for streamed output. With
// Options.ReuseOutput, a buffer comes back here when its chunk leaves the
// window (window.evict), and the pump takes its next buffer from here.
// At most spareChunks buffers wait (1 MiB).

const (
	chunkBufSize = 64 << 10 // the default ReadSize; other sizes are not kept
	spareChunks  = 16
)

var spareBufs = make(chan []byte, spareChunks)

// chunkBuf returns a read buffer of ReadSize bytes, a spare one when there
// is one (its bytes are not cleared: the pump hands over only what it
// read).
func (p *Proc) chunkBuf() []byte {
	size := p.m.opts.ReadSize
	if size == chunkBufSize {
		select {
		case b := <-spareBufs:
			return b[:size]
		default:
		}
	}
	return make([]byte, size)
}

// putChunkBuf keeps b for reuse when it is a whole chunk buffer and fewer
// than spareChunks wait.
func putChunkBuf(b []byte) {
	if cap(b) != chunkBufSize {
		return
	}
	select {
	case spareBufs <- b[:0]:
	default:
	}
}

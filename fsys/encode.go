package fsys

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/execgo/exec-server/internal/b64codec"
	"github.com/execgo/exec-server/jsonrpc"
)

// fs/readFile of a regular file encodes while it reads: the file goes
// through a few pooled chunk buffers straight into one buffer that already
// has the shape of the reply, {"dataBase64":"..."}, with room in front for
// the frame's own prefix ({"id":N,"result":). The reply is then handed to the
// transport without another copy. Chunks are encoded in parallel, so a big
// file costs about one read plus base64 time divided by the cores.

// encChunk is a multiple of 3, so each chunk's base64 lands at an exact
// offset with no padding except in the last one. A variable so tests can
// make files of many chunks cheaply.
var encChunk = 3 << 19 // 1.5 MiB

const (
	// frameReserve is the room kept in front of the reply for the frame
	// prefix; a longer prefix (a very long request id) costs one copy.
	frameReserve = 128
)

var chunkPool = sync.Pool{New: func() any { b := make([]byte, encChunk); return &b }}

// getChunk returns a pooled buffer of n bytes (n <= encChunk).
func getChunk(n int) *[]byte {
	bp := chunkPool.Get().(*[]byte)
	if cap(*bp) < n {
		b := make([]byte, encChunk)
		bp = &b
	}
	return bp
}

// errChanged reports that the file's size changed while it was read; the
// caller falls back to reading to EOF.
var errChanged = errors.New("file changed size while being read")

// encodedReply is a reply built in place: buf[start:end] is the JSON of the
// result; buf[:start] is free room for the frame prefix and buf[end:cap] for
// its suffix.
type encodedReply struct {
	buf        []byte
	start, end int
	data       int // bytes of file data the reply carries
}

// DataLen reports the bytes of file data the reply carries (for metrics).
func (r *encodedReply) DataLen() int { return r.data }

// AppendJSON implements jsonrpc.Appender. When the frame so far fits in the
// reserved room, the frame becomes the reply's own buffer (no copy of the
// payload); otherwise the reply is appended to dst.
func (r *encodedReply) AppendJSON(dst []byte) []byte {
	if len(dst) <= r.start {
		s := r.start - len(dst)
		copy(r.buf[s:], dst)
		return r.buf[s:r.end]
	}
	return append(dst, r.buf[r.start:r.end]...)
}

// MarshalJSON makes the reply usable with encoding/json too.
func (r *encodedReply) MarshalJSON() ([]byte, error) {
	return append([]byte(nil), r.buf[r.start:r.end]...), nil
}

// readEncoded reads exactly size bytes of file and returns the encoded
// reply. It returns errChanged if the file turned out shorter or longer.
func readEncoded(ctx context.Context, file *os.File, size int64) (*encodedReply, error) {
	const head, tail = `{"dataBase64":"`, `"}`
	encLen := base64.StdEncoding.EncodedLen(int(size))
	end := frameReserve + len(head) + encLen + len(tail)
	// Every byte from frameReserve to end is written below; the frame
	// prefix goes in front (AppendJSON).
	buf := jsonrpc.GetLargeBuffer(end, end+frameSlack)
	copy(buf[frameReserve:], head)
	out := buf[frameReserve+len(head) : frameReserve+len(head)+encLen]
	copy(buf[end-len(tail):], tail)

	workers := min(runtime.GOMAXPROCS(0), 4)
	if size <= int64(encChunk) {
		workers = 1
	}
	var wg sync.WaitGroup
	// sem bounds the chunks in flight, and with them the memory.
	sem := make(chan struct{}, workers)
	defer wg.Wait()
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := int(min(int64(encChunk), size-off))
		var bp *[]byte
		var chunk []byte
		if workers > 1 {
			sem <- struct{}{}
		}
		if size < 64<<10 {
			chunk = make([]byte, n)
		} else {
			bp = getChunk(n)
			chunk = (*bp)[:n]
		}
		if _, err := io.ReadFull(file, chunk); err != nil {
			if bp != nil {
				chunkPool.Put(bp)
			}
			if workers > 1 {
				<-sem
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil, errChanged
			}
			return nil, err
		}
		dst := out[off/3*4:]
		if workers == 1 {
			b64codec.Encode(dst, chunk)
			if bp != nil {
				chunkPool.Put(bp)
			}
		} else {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b64codec.Encode(dst, chunk)
				if bp != nil {
					chunkPool.Put(bp)
				}
				<-sem
			}()
		}
		off += int64(n)
	}
	wg.Wait()
	// One more byte means the file grew after fstat.
	var probe [1]byte
	if n, _ := file.Read(probe[:]); n > 0 {
		return nil, errChanged
	}
	return &encodedReply{buf: buf, start: frameReserve, end: end, data: int(size)}, nil
}

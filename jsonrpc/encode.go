package jsonrpc

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Appender is implemented by results that can write their own JSON
// encoding straight into an outgoing frame, skipping reflection and an
// intermediate copy (large base64 payloads use it).
type Appender interface {
	AppendJSON(dst []byte) []byte
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// LargeBufferMin is the capacity above which a buffer counts as large:
// PutBuffer keeps it (keepLarge) instead of pooling it, GetLargeBuffer
// looks for the kept one, and the transports hand a large message's buffer
// back (Recycler) and take the kept one for a large incoming message. One
// home, so that what is kept and what is looked for agree.
const LargeBufferMin = 256 << 10

// GetBuffer returns an empty buffer from the frame pool.
func GetBuffer() []byte { return (*bufPool.Get().(*[]byte))[:0] }

// PutBuffer returns a frame buffer to the pool. A very large one is kept
// for a moment instead (keepLarge), one at a time, so that a burst of large
// replies does not allocate (and clear) a new one for each.
func PutBuffer(b []byte) {
	if cap(b) > LargeBufferMin {
		keepLarge(b)
		return
	}
	b = b[:0]
	bufPool.Put(&b)
}

// Large frames. An fs/readFile reply of 8 MiB is an 11 MB buffer; a new
// one each time cost its clearing and page faults, a quarter of the
// server's CPU for the call (page faults alone: ~1.2 s per GB of a fresh
// 89 MB reply on this machine's VM, as much as the rest of a 64 MiB read).
// The last large frame written is kept and handed to the next
// GetLargeBuffer that it fits. Memory stays bounded: one buffer of at most
// largeKeepMax (the reply to a 64 MiB file fits in it) and the block-sized
// spares below, kept until the
// reclaim of large messages (reclaim.go), which drops it before it returns
// the heap to the OS. Keeping it until then costs no memory: a dropped
// buffer stays in the process's RSS until that reclaim all the same. It
// was kept for one second: a client reading a large file every second or
// two (the bench's interleaved rounds) paid for a fresh buffer each time.
const largeKeepMax = 96 << 20

// Block-sized frames (fs/readBlock's 1.4 MB replies) are also kept, a few
// of them, beside the latest: a client with several blocks in flight (the
// SDK's Download keeps 4) otherwise had a fresh frame allocated and cleared
// for all but one of them, 23-60 page faults per MiB and ~25 % more server
// CPU than one block at a time (docs/performance.md, "Tenth round").
// Incoming block messages take them too (TakeLargeBuffer): with Upload's 4
// fs/writeBlock calls in flight, a fifth message is read while the four
// before it are still being written, so five spares beside the latest
// (three left ~20 page faults per MiB in some runs). Bounded: at most
// blockSpares frames of at most blockKeepMax (~10 MiB), dropped with the
// latest.
const (
	blockKeepMax = 2 << 20
	blockSpares  = 5
)

var large struct {
	sync.Mutex
	buf    []byte
	spares [][]byte // block-sized frames the latest replaced
	timer  *time.Timer
}

func keepLarge(b []byte) {
	if cap(b) > largeKeepMax {
		return
	}
	large.Lock()
	defer large.Unlock()
	// The latest, not the largest: the next large message or frame is
	// most likely the same size as the last one (a run of 1 MiB blocks
	// after one large file must not find only a buffer too large to take,
	// TakeLargeBuffer).
	if old := large.buf; cap(old) <= blockKeepMax && cap(old) > 0 && !sameArray(old, b) {
		if len(large.spares) < blockSpares {
			large.spares = append(large.spares, old)
		} else if i := smallest(large.spares); cap(large.spares[i]) < cap(old) {
			// Each trip through the pool loses ~100 bytes of a frame's
			// capacity (its prefix), so spares grow too small in a long
			// transfer: the larger one takes the smallest one's place
			// rather than being dropped.
			large.spares[i] = old
		}
	}
	large.buf = b[:0]
	if large.timer == nil {
		large.timer = time.AfterFunc(reclaimDelay(), dropLarge)
	} else {
		large.timer.Reset(reclaimDelay())
	}
}

// sameArray reports whether a and b end in the same array (a buffer
// returned twice must not be kept twice).
func sameArray(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:cap(a)][cap(a)-1] == &b[:cap(b)][cap(b)-1]
}

func smallest(bs [][]byte) int {
	k := 0
	for i, b := range bs {
		if cap(b) < cap(bs[k]) {
			k = i
		}
	}
	return k
}

func dropLarge() {
	large.Lock()
	large.buf = nil
	clear(large.spares)
	large.spares = large.spares[:0]
	large.Unlock()
}

// GetLargeBuffer returns a buffer of length n and capacity at least c
// (c >= n), the kept large frame when it is big enough; its bytes are not
// cleared. For callers that overwrite all of buf[:n] (fs/readFile builds
// its reply in one) and end it as a frame given to the connection, which
// returns it through PutBuffer once written.
func GetLargeBuffer(n, c int) []byte {
	if c <= LargeBufferMin {
		return make([]byte, n, c)
	}
	large.Lock()
	if b := large.buf; cap(b) >= c {
		large.buf = nil
		large.Unlock()
		return b[:n]
	}
	if b := takeSpare(c, math.MaxInt); b != nil {
		large.Unlock()
		return b[:n]
	}
	large.Unlock()
	// Headroom: the frame that comes back starts a little into the
	// buffer (fs/readFile's and fs/readBlock's replies leave 128 bytes for
	// the frame's prefix and use ~20), so each trip loses ~100 bytes of
	// capacity, and the buffer must still hold c many trips later. With
	// 512 bytes a run of 1 MiB fs/readBlock replies allocated (and
	// cleared) a new 1.4 MB frame every fifth block.
	return make([]byte, n, c+largeHeadroom)
}

const largeHeadroom = 64 << 10

// TakeLargeBuffer returns the kept large frame (PutBuffer) as a buffer of
// length n when its capacity is at least c and at most limit, else nil;
// its bytes are not cleared. For a stream reading a large incoming
// message, which must not hold (and count in its budget) a buffer far
// larger than the message; it gives the buffer back with PutBuffer once
// the message is done with (jsonrpc.Recycler).
//
// The spares serve it too: a client with several fs/writeBlock calls in
// flight (the SDK's Upload keeps 4) has that many block messages held at
// once, and all but one were allocated afresh for every block (36-50 page
// faults per MiB, ~1.6x fs/writeBlock's server CPU one at a time;
// docs/performance.md, "The lead's runs after the thirteenth round").
func TakeLargeBuffer(n, c, limit int) []byte {
	large.Lock()
	defer large.Unlock()
	if b := large.buf; cap(b) >= c && cap(b) <= limit {
		large.buf = nil
		return b[:n]
	}
	if b := takeSpare(c, limit); b != nil {
		return b[:n]
	}
	return nil
}

// takeSpare removes and returns the smallest spare whose capacity is in
// [c, limit], or nil: best fit, so a smaller request does not take a
// block-sized frame another block needs. large is locked.
func takeSpare(c, limit int) []byte {
	best := -1
	for i, b := range large.spares {
		if cap(b) >= c && cap(b) <= limit && (best < 0 || cap(b) < cap(large.spares[best])) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := large.spares[best]
	last := len(large.spares) - 1
	large.spares[best] = large.spares[last]
	large.spares[last] = nil
	large.spares = large.spares[:last]
	return b
}

// AppendResponse appends {"id":ID,"result":RESULT}.
func AppendResponse(dst []byte, id json.RawMessage, result any) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	dst, err := AppendValue(dst, result)
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// AppendError appends {"error":{"code":C,"message":M},"id":ID}, with
// "data" between "code" and "message" when e has any: the reference's
// order ({"code":…,"data":{"kind":…},"message":…}, its keys sorted).
func AppendError(dst []byte, id json.RawMessage, e *Error) []byte {
	dst = append(dst, `{"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(e.Code), 10)
	if len(e.Data) > 0 {
		dst = append(dst, `,"data":`...)
		dst = append(dst, e.Data...)
	}
	dst = append(dst, `,"message":`...)
	dst = AppendString(dst, e.Message)
	dst = append(dst, `},"id":`...)
	dst = append(dst, id...)
	return append(dst, '}')
}

// AppendNotification appends {"method":M,"params":P}.
func AppendNotification(dst []byte, method string, params any) ([]byte, error) {
	dst = append(dst, `{"method":`...)
	dst = AppendString(dst, method)
	dst = append(dst, `,"params":`...)
	dst, err := AppendValue(dst, params)
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// AppendRequest appends {"id":ID,"method":M,"params":P} (used by clients).
func AppendRequest(dst []byte, id json.RawMessage, method string, params any) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"method":`...)
	dst = AppendString(dst, method)
	if params != nil {
		dst = append(dst, `,"params":`...)
		var err error
		if dst, err = AppendValue(dst, params); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// AppendValue appends the JSON encoding of v, using Appender when v has it.
func AppendValue(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case Appender:
		return x.AppendJSON(dst), nil
	case json.RawMessage:
		return append(dst, x...), nil
	case nil:
		return append(dst, "null"...), nil
	}
	buf := bytes.NewBuffer(dst)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return dst, err
	}
	out := buf.Bytes()
	return out[:len(out)-1], nil // Encode adds a newline
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/protocol"
)

// spawn: /bin/true, Start → Wait (process/start → process/closed), one
// at a time.
func runSpawn(cfg *config, sides []side, tr transportKind) []*row {
	st := interleave(cfg, sides, tr, cfg.spawnN, 6, func(ctx context.Context, sd side) (*runner, error) {
		srv, c, err := conn(ctx, sd, tr)
		if err != nil {
			return nil, err
		}
		var next int
		r := &runner{close: srv.close}
		r.take = func(n int) ([]float64, error) {
			ctx := timeout(2 * time.Minute)
			return r.timed(n, &next, func(int) error {
				return roundTrip(ctx, cfg, c, "/bin/true")
			})
		}
		return r, nil
	})
	return []*row{mkrow("spawn", "latency", "ms", false, tr, st)}
}

// concurrent: concConns connections × concProcs processes in flight. Over
// stdio every connection is its own server process (stdio has one).
// Samples are processes per second, one per round.
func runConcurrent(cfg *config, sides []side, tr transportKind) []*row {
	var lat [2][]float64
	st := interleave(cfg, sides, tr, cfg.concRounds, cfg.concRounds, func(ctx context.Context, sd side) (*runner, error) {
		var servers []*server
		var clients []*client.Client
		closeAll := func() {
			var wg sync.WaitGroup
			for _, s := range servers {
				wg.Add(1)
				go func() { defer wg.Done(); s.close() }()
			}
			wg.Wait()
		}
		idx := 0
		if sd.ref {
			idx = 1
		}
		for i := 0; i < cfg.concConns; i++ {
			if tr == stdio || i == 0 {
				srv, err := sd.start(ctx, tr)
				if err != nil {
					closeAll()
					return nil, err
				}
				servers = append(servers, srv)
			}
			c, err := servers[len(servers)-1].dial(ctx)
			if err != nil {
				closeAll()
				return nil, err
			}
			clients = append(clients, c)
		}
		return &runner{
			take: func(n int) ([]float64, error) {
				var xs []float64
				for range n {
					ctx := timeout(2 * time.Minute)
					var wg sync.WaitGroup
					var mu sync.Mutex
					var firstErr error
					t0 := time.Now()
					for _, c := range clients {
						for range cfg.concProcs {
							wg.Add(1)
							go func() {
								defer wg.Done()
								p0 := time.Now()
								err := roundTrip(ctx, cfg, c, "/bin/true")
								mu.Lock()
								defer mu.Unlock()
								if err != nil && firstErr == nil {
									firstErr = err
								}
								lat[idx] = append(lat[idx], ms(time.Since(p0)))
							}()
						}
					}
					wg.Wait()
					if firstErr != nil {
						return xs, firstErr
					}
					xs = append(xs, float64(cfg.concConns*cfg.concProcs)/time.Since(t0).Seconds())
				}
				return xs, nil
			},
			close: closeAll,
		}, nil
	})
	rows := []*row{mkrow("concurrent", "rate", "proc/s", true, tr, st)}
	lst := []*stats{summarize(lat[0], nil)}
	if len(sides) > 1 {
		lst = append(lst, summarize(lat[1], nil))
	}
	rows = append(rows, mkrow("concurrent", "latency", "ms", false, tr, lst))
	return rows
}

// zeroCounter counts the bytes written to it and checks they are all zero.
type zeroCounter struct {
	n   int64
	bad bool
}

func (z *zeroCounter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), len(zeros))
		if !bytes.Equal(p[:k], zeros[:k]) {
			z.bad = true
		}
		z.n += int64(k)
		p = p[k:]
	}
	return n, nil
}

var zeros = make([]byte, 64<<10)

// zeroSink counts the bytes of processID's output from a rawConn and
// checks they are all zero without decoding: zero bytes encode to 'A's
// (plus '=' padding).
type zeroSink struct {
	id    string
	bytes atomic.Int64
	bad   atomic.Bool
	seq   atomic.Uint64 // last output seq seen
	gaps  atomic.Int64  // output seqs skipped (dropped pushes)
	first chan struct{}
	once  sync.Once
}

func newZeroSink(id string) *zeroSink { return &zeroSink{id: id, first: make(chan struct{})} }

func (z *zeroSink) sink(id string, seq uint64, b64 []byte) {
	if id != z.id {
		return
	}
	if prev := z.seq.Load(); prev != 0 && seq != prev+1 {
		z.gaps.Add(int64(seq - prev - 1))
	}
	z.seq.Store(seq)
	n := len(b64)
	for n > 0 && b64[n-1] == '=' {
		n--
	}
	if len(b64)-n > 2 || n > len(allA) || !bytes.Equal(b64[:n], allA[:n]) {
		z.bad.Store(true)
	}
	z.bytes.Add(int64(base64.StdEncoding.DecodedLen(len(b64)) - (len(b64) - n)))
	z.once.Do(func() { close(z.first) })
}

// allA is the base64 text of 3 MiB of zero bytes (longer than any chunk):
// comparing with it is a memcmp.
var allA = bytes.Repeat([]byte{'A'}, 4<<20)

func zeroCmd(n int64) []string { return []string{"head", "-c", fmt.Sprint(n), "/dev/zero"} }

// stream: head -c N /dev/zero, Start → every byte of Stdout read and
// checked → Wait. Samples are MB/s (10^6 bytes).
func runStream(cfg *config, sides []side, tr transportKind) []*row {
	return streamRows("stream", false, cfg, sides, tr)
}

// stream-tty: the stream workload with the command on a PTY (tty: true),
// so PTY output can be set against pipe output. NUL bytes pass the line
// discipline unchanged (only newlines are rewritten), so the check is the
// same. Its floor reads a PTY master (floor.go).
func runStreamTTY(cfg *config, sides []side, tr transportKind) []*row {
	return streamRows("stream-tty", true, cfg, sides, tr)
}

func streamRows(name string, tty bool, cfg *config, sides []side, tr transportKind) []*row {
	cm := &cpuMeter{}
	st := interleave(cfg, sides, tr, cfg.streamRuns, cfg.streamRuns, func(ctx context.Context, sd side) (*runner, error) {
		srv, c, err := conn(ctx, sd, tr)
		if err != nil {
			return nil, err
		}
		return &runner{
			take: func(n int) ([]float64, error) {
				var xs []float64
				for range n {
					ctx := timeout(2 * time.Minute)
					c0 := cpuSeconds(srv.pid())
					t0 := time.Now()
					var z zeroCounter
					cmd := command(cfg, zeroCmd(cfg.streamBytes)...)
					cmd.TTY = tty
					p, err := c.Start(ctx, cmd)
					if err == nil {
						_, err = io.Copy(&z, p.Output())
					}
					if err == nil {
						_, err = p.Wait(ctx)
					}
					el := time.Since(t0)
					if err != nil {
						return xs, err
					}
					if z.n != cfg.streamBytes || z.bad {
						return xs, fmt.Errorf("%s: got %d bytes (want %d), non-zero bytes: %v", name, z.n, cfg.streamBytes, z.bad)
					}
					xs = append(xs, float64(cfg.streamBytes)/el.Seconds()/1e6)
					cm.add(sd, cpuSeconds(srv.pid())-c0, float64(cfg.streamBytes))
				}
				return xs, nil
			},
			close: srv.close,
		}, nil
	})
	cr := cm.row(name, tr, sides)
	rows := []*row{mkrow(name, "throughput", "MB/s", true, tr, st), cr}
	what := "stream"
	if tty {
		what = "stream-tty"
	}
	return append(rows, floorRows(name, tr, what, cfg.streamBytes, "", cfg.streamRuns, cr, nil)...)
}

// ttyEcho: one byte written to a raw-mode cat on a PTY, until it comes back.
func runTTY(cfg *config, sides []side, tr transportKind) []*row {
	st := interleave(cfg, sides, tr, cfg.ttyN, 5, func(ctx context.Context, sd side) (*runner, error) {
		srv, c, err := conn(ctx, sd, tr)
		if err != nil {
			return nil, err
		}
		r, err := startTTYEcho(ctx, cfg, c)
		if err != nil {
			srv.close()
			return nil, err
		}
		r.close = srv.close
		return r, nil
	})
	return []*row{mkrow("tty-echo", "latency", "ms", false, tr, st)}
}

// startTTYEcho starts a raw-mode cat on a PTY through c and returns a
// runner whose samples are 1-byte echo round trips.
func startTTYEcho(ctx context.Context, cfg *config, c *client.Client) (*runner, error) {
	cmd := command(cfg, "sh", "-c", "stty raw -echo; echo ready; exec cat")
	cmd.TTY = true
	p, err := c.Start(ctx, cmd)
	if err != nil {
		return nil, err
	}
	out := make(chan []byte, 64)
	go func() {
		for {
			b := make([]byte, 4096)
			n, err := p.Output().Read(b)
			if n > 0 {
				out <- b[:n]
			}
			if err != nil {
				close(out)
				return
			}
		}
	}()
	var seen []byte
	for !bytes.Contains(seen, []byte("ready\n")) {
		select {
		case b := <-out:
			seen = append(seen, b...)
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("tty: no ready from the shell (got %q)", seen)
		}
	}
	var next int
	r := &runner{}
	r.take = func(n int) ([]float64, error) {
		ctx := timeout(time.Minute)
		return r.timed(n, &next, func(int) error {
			if err := p.Write(ctx, []byte("x")); err != nil {
				return err
			}
			select {
			case b := <-out:
				if !bytes.Equal(b, []byte("x")) {
					return fmt.Errorf("tty echo: got %q, want \"x\"", b)
				}
			case <-ctx.Done():
				return errors.New("tty echo: no output")
			}
			return nil
		})
	}
	return r, nil
}

// fsFile makes a file of n random bytes in the scratch dir once.
func fsFile(cfg *config, name string, n int) (string, []byte, error) {
	path := filepath.Join(cfg.dir, name)
	data := make([]byte, n)
	_, _ = rand.Read(data)
	return path, data, os.WriteFile(path, data, 0o644)
}

// The fs rows (readFile, writeFile, readBlock, download, writeBlock) each
// do their operation once, untimed, on a fresh server before its samples:
// the first call grows the server's heap, and fs-writeFile's first sample
// paid ~880 minor faults per MiB (5-13 s/GB against ~1.3 for the others)
// where fs-writeBlock's paid ~80, so with a few samples the medians, and
// the block rows' ratios to the whole-file rows, moved with it
// (docs/performance.md, "Thirteenth round").

// fs-readFile: a whole file through fs/readFile. MB/s.
func runReadFile(cfg *config, sides []side, tr transportKind) []*row {
	cm := &cpuMeter{}
	pm := newProcMeter().named("fs-readFile", tr)
	path, data, err := fsFile(cfg, "read.bin", cfg.fsFileBytes)
	if err != nil {
		return []*row{mkrow("fs-readFile", "rate", "MB/s", true, tr, errStats(sides, err))}
	}
	st := interleave(cfg, sides, tr, cfg.fsRuns, cfg.fsRuns, func(ctx context.Context, sd side) (*runner, error) {
		srv, c, err := conn(ctx, sd, tr)
		if err != nil {
			return nil, err
		}
		if _, err := c.ReadFile(timeout(time.Minute), path); err != nil { // warm-up
			srv.close()
			return nil, err
		}
		return &runner{take: func(n int) ([]float64, error) {
			var xs []float64
			for range n {
				p0 := pm.snap(srv.pid())
				c0 := cpuSeconds(srv.pid())
				t0 := time.Now()
				got, err := c.ReadFile(timeout(time.Minute), path)
				if err != nil {
					return xs, err
				}
				el := time.Since(t0)
				if !bytes.Equal(got, data) {
					return xs, fmt.Errorf("fs/readFile: %d bytes differ from the file's %d", len(got), len(data))
				}
				xs = append(xs, float64(len(data))/el.Seconds()/1e6)
				cm.add(sd, cpuSeconds(srv.pid())-c0, float64(len(data)))
				pm.add(sideIndex(sd), p0, pm.snap(srv.pid()), float64(len(data)))
			}
			return xs, nil
		}, close: srv.close}, nil
	})
	cr := cm.row("fs-readFile", tr, sides)
	rows := []*row{mkrow("fs-readFile", "rate", "MB/s", true, tr, st), cr}
	rows = append(rows, floorRows("fs-readFile", tr, "read", int64(len(data)), path, cfg.fsRuns, cr, nil)...)
	return append(rows, pm.rows("fs-readFile", tr, sides)...)
}

// fs-writeFile: a whole file through one fs/writeFile (Client.WriteFile,
// which sends files up to 16 MiB in one message). MB/s.
func runWriteFile(cfg *config, sides []side, tr transportKind) []*row {
	cm := &cpuMeter{}
	pm := newProcMeter().named("fs-writeFile", tr)
	data := make([]byte, cfg.fsWriteBytes)
	_, _ = rand.Read(data)
	path := filepath.Join(cfg.dir, "write.bin")
	st := interleave(cfg, sides, tr, cfg.fsRuns, cfg.fsRuns, func(ctx context.Context, sd side) (*runner, error) {
		srv, c, err := conn(ctx, sd, tr)
		if err != nil {
			return nil, err
		}
		_ = os.Remove(path)
		if err := c.WriteFile(timeout(30*time.Second), path, data); err != nil { // warm-up
			srv.close()
			return nil, err
		}
		return &runner{take: func(n int) ([]float64, error) {
			var xs []float64
			for range n {
				_ = os.Remove(path)
				p0 := pm.snap(srv.pid())
				c0 := cpuSeconds(srv.pid())
				t0 := time.Now()
				if err := c.WriteFile(timeout(30*time.Second), path, data); err != nil {
					return xs, err
				}
				el := time.Since(t0)
				if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(data)) {
					return xs, fmt.Errorf("fs/writeFile: file on disk: %v", err)
				}
				xs = append(xs, float64(len(data))/el.Seconds()/1e6)
				cm.add(sd, cpuSeconds(srv.pid())-c0, float64(len(data)))
				pm.add(sideIndex(sd), p0, pm.snap(srv.pid()), float64(len(data)))
			}
			return xs, nil
		}, close: srv.close}, nil
	})
	cr := cm.row("fs-writeFile", tr, sides)
	rows := []*row{mkrow("fs-writeFile", "rate", "MB/s", true, tr, st), cr}
	rows = append(rows, floorRows("fs-writeFile", tr, "write", int64(len(data)), path, cfg.fsRuns, cr, pm)...)
	return append(rows, pm.rows("fs-writeFile", tr, sides)...)
}

const blockLen = 1 << 20

// fs-readBlock: fs/open + 1 MiB fs/readBlock calls, one at a time, through
// a file of random bytes the size of fs-readFile's (fsFileBytes), fsRuns
// samples: the row compares like for like with fs-readFile, so the ratio
// between them is the cost of the block path alone. (Until the fifth round
// it read a 1 GiB file of zeros once; the 1 GiB limit lives in
// limits.go.) MB/s.
func runReadBlocks(cfg *config, sides []side, tr transportKind) []*row {
	return readBlockRows(cfg, sides, tr, "fs-readBlock", readBlocksOneAtATime)
}

// fs-download: the same file read with the SDK's Download, 1 MiB
// fs/readBlock calls with 4 in flight (client.Download's window): what a
// client moving a large file does, where fs-readBlock is its worst case (the
// server goes idle between every two blocks; docs/performance.md, "Tenth
// round"). MB/s.
func runDownload(cfg *config, sides []side, tr transportKind) []*row {
	return readBlockRows(cfg, sides, tr, "fs-download", func(ctx context.Context, c *client.Client, path string, _ []byte, _ func() bool) (int64, error) {
		return c.Download(ctx, path, io.Discard, nil)
	})
}

// readBlocksOneAtATime reads path with 1 MiB fs/readBlock calls, one at a
// time (the SDK's File.ReadAt), until the end or over (budget spent).
func readBlocksOneAtATime(ctx context.Context, c *client.Client, path string, buf []byte, over func() bool) (int64, error) {
	f, err := c.Open(ctx, path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	for off := int64(0); ; off += blockLen {
		k, err := f.ReadAtContext(ctx, buf, off)
		total += int64(k)
		if err == io.EOF || k == 0 {
			break
		}
		if err != nil {
			return total, err
		}
		// A slow server gets the budget, not the whole file.
		if over() {
			break
		}
	}
	return total, nil
}

// readBlockRows measures read, a way of reading the whole fs-readFile-sized
// file in blocks, as the rows named name.
func readBlockRows(cfg *config, sides []side, tr transportKind, name string, read func(ctx context.Context, c *client.Client, path string, buf []byte, over func() bool) (int64, error)) []*row {
	cm := &cpuMeter{}
	pm := newProcMeter().named(name, tr)
	path, data, err := fsFile(cfg, "blocks-src.bin", cfg.fsFileBytes)
	if err != nil {
		return []*row{mkrow(name, "rate", "MB/s", true, tr, errStats(sides, err))}
	}
	want := int64(len(data))
	st := interleave(cfg, sides, tr, cfg.fsRuns, cfg.fsRuns, func(ctx context.Context, sd side) (*runner, error) {
		srv, c, err := conn(ctx, sd, tr)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, blockLen)
		if _, err := read(timeout(2*time.Minute), c, path, buf, func() bool { return false }); err != nil { // warm-up
			srv.close()
			return nil, err
		}
		return &runner{take: func(n int) ([]float64, error) {
			var xs []float64
			for range n {
				ctx := timeout(2 * time.Minute)
				p0 := pm.snap(srv.pid())
				c0 := cpuSeconds(srv.pid())
				t0 := time.Now()
				total, err := read(ctx, c, path, buf, func() bool { return time.Since(t0) > cfg.budget })
				if err != nil {
					return xs, err
				}
				el := time.Since(t0)
				if total != want && el <= cfg.budget {
					return xs, fmt.Errorf("%s: read %d bytes of %d", name, total, want)
				}
				xs = append(xs, float64(total)/el.Seconds()/1e6)
				cm.add(sd, cpuSeconds(srv.pid())-c0, float64(total))
				pm.add(sideIndex(sd), p0, pm.snap(srv.pid()), float64(total))
			}
			return xs, nil
		}, close: srv.close}, nil
	})
	rows := []*row{mkrow(name, "rate", "MB/s", true, tr, st), cm.row(name, tr, sides)}
	return append(rows, pm.rows(name, tr, sides)...)
}

// fs-writeBlock: fs/open replace + 1 MiB fs/writeBlock calls making a file
// the size of fs-writeFile's (fsWriteBytes), removed before each of fsRuns
// samples as fs-writeFile's is: both rows write into fresh page cache, so
// the ratio between them is the cost of the block path alone. (Until the
// fifth round it wrote 1 GiB once, whose page-cache cost alone was ~1.7
// s/GB against writeFile's ~0.3.) MB/s.
func runWriteBlocks(cfg *config, sides []side, tr transportKind) []*row {
	return writeBlockRows(cfg, sides, tr, "fs-writeBlock", writeBlocksOneAtATime)
}

// fs-upload: the same file written with the SDK's Upload, 1 MiB
// fs/writeBlock calls with 4 in flight (client.Upload's window): what a
// client moving a large file does, where fs-writeBlock is its worst case
// (the server idle between every two blocks; docs/performance.md,
// "Thirteenth round"). MB/s.
func runUpload(cfg *config, sides []side, tr transportKind) []*row {
	return writeBlockRows(cfg, sides, tr, "fs-upload", func(ctx context.Context, c *client.Client, path string, chunk []byte, size int64, _ func() bool) (int64, error) {
		return c.Upload(ctx, path, &repeatReader{chunk: chunk, left: size}, nil)
	})
}

// writeBlocksOneAtATime makes path, size bytes of chunk over and over, with
// fs/open, 1 MiB fs/writeBlock calls one at a time (the SDK's File.WriteAt)
// and fs/close, or fewer bytes when over (budget spent).
func writeBlocksOneAtATime(ctx context.Context, c *client.Client, path string, chunk []byte, size int64, over func() bool) (int64, error) {
	f, err := c.Create(ctx, path)
	if err != nil {
		return 0, err
	}
	var total int64
	for off := int64(0); off < size; off += blockLen {
		if _, err := f.WriteAtContext(ctx, chunk, off); err != nil {
			f.Close()
			return total, err
		}
		total += blockLen
		if over() {
			break
		}
	}
	return total, f.Close()
}

// repeatReader reads chunk over and over, left bytes in all.
type repeatReader struct {
	chunk []byte
	off   int
	left  int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n := copy(p, r.chunk[r.off:])
	r.off = (r.off + n) % len(r.chunk)
	r.left -= int64(n)
	return n, nil
}

// writeBlockRows measures write, which makes the file at path (size bytes
// of chunk), as the row name.
func writeBlockRows(cfg *config, sides []side, tr transportKind, name string, write func(ctx context.Context, c *client.Client, path string, chunk []byte, size int64, over func() bool) (int64, error)) []*row {
	cm := &cpuMeter{}
	pm := newProcMeter().named(name, tr)
	path := filepath.Join(cfg.dir, "blocks-dst.bin")
	chunk := make([]byte, blockLen)
	_, _ = rand.Read(chunk)
	size := int64(cfg.fsWriteBytes)
	st := interleave(cfg, sides, tr, cfg.fsRuns, cfg.fsRuns, func(ctx context.Context, sd side) (*runner, error) {
		srv, c, err := conn(ctx, sd, tr)
		if err != nil {
			return nil, err
		}
		once := func(ctx context.Context, t0 time.Time) (int64, error) {
			return write(ctx, c, path, chunk, size, func() bool { return time.Since(t0) > cfg.budget })
		}
		_ = os.Remove(path)
		if _, err := once(timeout(2*time.Minute), time.Now()); err != nil { // warm-up
			srv.close()
			return nil, err
		}
		return &runner{take: func(n int) ([]float64, error) {
			var xs []float64
			for range n {
				ctx := timeout(2 * time.Minute)
				_ = os.Remove(path)
				p0 := pm.snap(srv.pid())
				c0 := cpuSeconds(srv.pid())
				t0 := time.Now()
				total, err := once(ctx, t0)
				if err != nil {
					return xs, err
				}
				el := time.Since(t0)
				if fi, err := os.Stat(path); err != nil || fi.Size() != total {
					return xs, fmt.Errorf("%s: file on disk: %v (want %d bytes)", name, err, total)
				}
				xs = append(xs, float64(total)/el.Seconds()/1e6)
				cm.add(sd, cpuSeconds(srv.pid())-c0, float64(total))
				pm.add(sideIndex(sd), p0, pm.snap(srv.pid()), float64(total))
			}
			return xs, nil
		}, close: func() { srv.close(); _ = os.Remove(path) }}, nil
	})
	rows := []*row{mkrow(name, "rate", "MB/s", true, tr, st), cm.row(name, tr, sides)}
	return append(rows, pm.rows(name, tr, sides)...)
}

func writeZeros(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for w := int64(0); w < n; w += int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), n-w)]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func errStats(sides []side, err error) []*stats {
	var out []*stats
	for range sides {
		out = append(out, summarize(nil, err))
	}
	return out
}

// idle-conns: idleConns websocket connections, each initialized, then
// left idle. Server RSS before (idle), after, and peak (VmHWM). Each side
// runs on its own fresh server, one after the other.
func runIdle(cfg *config, sides []side, tr transportKind) []*row {
	var idle, per, peak, setup []*stats
	for _, sd := range sides {
		i, p, k, s, err := idleOne(cfg, sd)
		one := func(v float64) *stats {
			if err != nil {
				return summarize(nil, err)
			}
			return summarize([]float64{v}, nil)
		}
		idle, per, peak, setup = append(idle, one(i)), append(per, one(p)), append(peak, one(k)), append(setup, one(s))
	}
	return []*row{
		mkrow("idle-conns", "idle-rss", "MiB", false, tr, idle),
		mkrow("idle-conns", "rss-per-c", "KiB", false, tr, per),
		mkrow("idle-conns", "peak-rss", "MiB", false, tr, peak),
		mkrow("idle-conns", "conn-rate", "conn/s", true, tr, setup),
	}
}

func idleOne(cfg *config, sd side) (idleMiB, perKiB, peakMiB, connRate float64, err error) {
	ctx := timeout(3 * time.Minute)
	var extra []string
	if !sd.ref {
		// Our --max-sessions (default 10240) would refuse the sessions
		// of a larger --idle-conns run; the reference has no such limit.
		extra = []string{"--max-sessions", fmt.Sprint(cfg.idleConns + 64)}
	}
	srv, err := sd.start(ctx, webSocket, extra...)
	if err != nil {
		return
	}
	defer srv.close()
	// One connection first, so lazily built state is part of "idle".
	c0, err := srv.dial(ctx)
	if err != nil {
		return
	}
	defer c0.Close()
	time.Sleep(300 * time.Millisecond)
	before, _, err := rssKiB(srv.pid())
	if err != nil {
		return
	}
	clients := make([]*client.Client, 0, cfg.idleConns)
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	t0 := time.Now()
	// A few dialers at once: the point is the server's memory, not how fast
	// one client can dial.
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	var next atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(cfg.idleConns) {
				c, err := srv.dial(ctx)
				mu.Lock()
				if c != nil {
					clients = append(clients, c)
				}
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		err = fmt.Errorf("after %d connections: %w", len(clients), firstErr)
		return
	}
	connRate = float64(cfg.idleConns) / time.Since(t0).Seconds()
	time.Sleep(500 * time.Millisecond)
	after, hwm, err := rssKiB(srv.pid())
	if err != nil {
		return
	}
	srv.close()
	return before / 1024, (after - before) / float64(cfg.idleConns), hwm / 1024, connRate, nil
}

// stall: a client stops reading for stallFor during a streamBytes stream;
// the server's RSS growth over its pre-stream RSS must stay bounded.
// Afterwards every byte arrives, or a seq gap shows and process/read
// reports the process closed.
func runStall(cfg *config, sides []side, tr transportKind) []*row {
	var growth []*stats
	for _, sd := range sides {
		g, err := stallOne(cfg, sd, tr)
		if err != nil {
			growth = append(growth, summarize(nil, err))
		} else {
			growth = append(growth, summarize([]float64{g}, nil))
		}
	}
	return []*row{mkrow("stall", "rss-growth", "MiB", false, tr, growth)}
}

func stallOne(cfg *config, sd side, tr transportKind) (float64, error) {
	ctx := timeout(3 * time.Minute)
	srv, err := sd.start(ctx, tr)
	if err != nil {
		return 0, err
	}
	defer srv.close()
	// The SDK never stops reading its connection (it drops what its
	// caller does not read, and recovers it with process/read): the
	// stalled client is a protocol-level one.
	c, err := srv.dialRaw(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	time.Sleep(200 * time.Millisecond)
	base, _, err := rssKiB(srv.pid())
	if err != nil {
		return 0, err
	}
	z := newZeroSink("stall")
	c.setSink(z.sink)
	if err := c.call(ctx, protocol.MethodProcessStart, startParams(cfg, "stall", false, zeroCmd(cfg.streamBytes)...), nil); err != nil {
		return 0, err
	}
	select {
	case <-z.first:
	case <-ctx.Done():
		return 0, errors.New("stall: no output")
	}
	c.pause()
	peak := base
	deadline := time.Now().Add(cfg.stallFor)
	for time.Now().Before(deadline) {
		if rss, _, err := rssKiB(srv.pid()); err == nil && rss > peak {
			peak = rss
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.resume()
	if _, err := c.waitClosed(ctx, "stall"); err != nil {
		return 0, err
	}
	if got := z.bytes.Load(); got != cfg.streamBytes || z.bad.Load() {
		if z.gaps.Load() == 0 {
			return 0, fmt.Errorf("stall: %d of %d bytes arrived and no seq gap shows", got, cfg.streamBytes)
		}
		var r struct {
			Closed bool `json:"closed"`
		}
		if err := c.call(ctx, protocol.MethodProcessRead, map[string]any{"processId": "stall", "afterSeq": z.seq.Load()}, &r); err != nil || !r.Closed {
			return 0, fmt.Errorf("stall: bytes lost (%d gaps) and process/read does not say closed: %v", z.gaps.Load(), err)
		}
	}
	return (peak - base) / 1024, nil
}

// cpuMeter adds up the server's own CPU time (utime+stime of the server
// process, not its children) per byte moved: a figure that, unlike MB/s,
// hardly moves when other jobs share the machine.
type cpuMeter struct {
	mu   sync.Mutex
	runs [2][]float64
}

func (m *cpuMeter) add(sd side, cpu, bytes float64) {
	i := 0
	if sd.ref {
		i = 1
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if bytes > 0 {
		m.runs[i] = append(m.runs[i], cpu/(bytes/1e9))
	}
}

func (m *cpuMeter) row(w string, tr transportKind, sides []side) *row {
	st := []*stats{summarize(m.runs[0], nil)}
	if len(sides) > 1 {
		st = append(st, summarize(m.runs[1], nil))
	}
	return mkrow(w, "server-cpu", "s/GB", false, tr, st)
}

// cpuSeconds is the CPU time pid has used itself (user+system, all its
// threads, not its children). It reads the process's CPU clock, in
// nanoseconds: /proc/PID/stat counts in 10 ms ticks, a step of 0.6 s/GB
// on a 16 MiB fs call, as large as the differences being looked for.
func cpuSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	var ts unix.Timespec
	if unix.ClockGettime(processCPUClock(pid), &ts) == nil {
		return float64(ts.Nano()) / 1e9
	}
	return statCPUSeconds(pid)
}

// processCPUClock is the clock id of pid's CPU time (what glibc's
// clock_getcpuclockid returns): the pid's complement shifted past the
// clock type, CPUCLOCK_SCHED (2), the precise one.
func processCPUClock(pid int) int32 {
	return int32(^uint32(pid)<<3 | 2)
}

// statCPUSeconds is utime+stime from /proc/PID/stat, in clock ticks.
func statCPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line, in clock ticks (100 per second).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

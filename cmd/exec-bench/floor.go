package main

// The floor of the bulk data paths: the same bytes as stream, fs-readFile
// and fs-writeFile through the least a server must do, in a separate
// process (this binary again, EXEC_BENCH_FLOOR=ws|stdio) whose CPU time is
// measured as the servers' is. Out: os.File reads (a pipe from head, or
// the file), base64 (the project's encoder), a JSON envelope and a
// websocket (or stdio) write. In: the server's own websocket listener and
// message reads (transport: socket reads, unmasking, the reused message
// buffer), a scan for the payload's closing quote, base64-decoding (in
// place) and the server's file write (a fresh file, its blocks reserved).
// No JSON-RPC engine, validation, sessions, processes, budgets or metrics:
// each server's server-cpu row reads as "× the floor".

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/internal/b64codec"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/transport"
)

const floorEnv = "EXEC_BENCH_FLOOR"

// floorMsgs is one message stream of the floor server: whole messages in,
// whole messages out.
type floorMsgs interface {
	read() ([]byte, error)
	write(msg []byte) error
}

// floorMain runs the floor server on the transport named by mode.
func floorMain(mode string) int {
	if dir := os.Getenv(floorEnv + "_PROFILE"); dir != "" {
		f, err := os.CreateTemp(dir, "floor-"+mode+"-*.pprof")
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	if mode == "stdio" {
		br := bufio.NewReaderSize(os.Stdin, 1<<20)
		bw := bufio.NewWriterSize(os.Stdout, 1<<20)
		serveFloor(&stdioMsgs{r: br, w: bw})
		return 0
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ws://%s\n", ln.Addr())
	done := make(chan struct{})
	// The server's own websocket listener and message reads (the socket
	// reads, unmasking, the message buffer and its reuse): the floor
	// leaves out what comes after the bytes are in.
	srv := &http.Server{Handler: transport.NewHandler(transport.HandlerOptions{
		MaxMessageBytes: 1 << 30,
		StallTimeout:    -1,
		Serve: func(ctx context.Context, s *transport.WebSocket) {
			serveFloor(&wsMsgs{ctx: ctx, s: s})
			close(done)
		},
	})}
	go func() { _ = srv.Serve(ln) }()
	<-done
	return 0
}

type stdioMsgs struct {
	r   *bufio.Reader
	w   *bufio.Writer
	buf []byte
}

func (s *stdioMsgs) read() ([]byte, error) {
	s.buf = s.buf[:0]
	for {
		line, err := s.r.ReadSlice('\n')
		s.buf = append(s.buf, line...)
		if err == nil {
			return s.buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

func (s *stdioMsgs) write(msg []byte) error {
	if _, err := s.w.Write(msg); err != nil {
		return err
	}
	if err := s.w.WriteByte('\n'); err != nil {
		return err
	}
	return s.w.Flush()
}

type wsMsgs struct {
	ctx  context.Context
	s    *transport.WebSocket
	last []byte
}

// read reads a message as the server does; the previous one's buffer is
// recycled first, as the server recycles fs/writeFile's (a message nothing
// refers to any more is read into again).
func (m *wsMsgs) read() ([]byte, error) {
	if m.last != nil {
		m.s.Recycle(m.last)
		m.last = nil
	}
	msg, err := m.s.Read(m.ctx)
	m.last = msg
	return msg, err
}

func (m *wsMsgs) write(msg []byte) error { return m.s.Write(m.ctx, msg, false) }

// floorReq is the floor server's request; fs/writeFile's payload is found
// by a scan, not decoded.
type floorReq struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	N    int64  `json:"n"`
}

func serveFloor(m floorMsgs) {
	var out []byte
	chunk := make([]byte, 3<<16) // 192 KiB, a multiple of 3
	for {
		msg, err := m.read()
		if err != nil {
			return
		}
		if i := bytes.Index(msg, []byte(`"dataBase64":"`)); i >= 0 {
			// fs/writeFile: the JSON scan a server needs (the string's end,
			// no decoding of the rest), base64 in place, a file write.
			s := msg[i+len(`"dataBase64":"`):]
			end := jsonscan.ClosingQuote(s, 0)
			data, err := b64codec.DecodeInPlace(s[:end])
			if err == nil {
				err = floorWrite(floorPath(msg[:i]), data)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "floor write:", err)
				return
			}
			if m.write([]byte(`{"id":1,"result":{}}`)) != nil {
				return
			}
			continue
		}
		var req floorReq
		if json.Unmarshal(msg, &req) != nil {
			return
		}
		switch req.Op {
		case "read":
			f, err := os.Open(req.Path)
			if err != nil {
				return
			}
			fi, _ := f.Stat()
			const head, tail = `{"id":1,"result":{"dataBase64":"`, `"}}`
			n := int(fi.Size())
			// The buffer is kept across requests and never cleared.
			out = slices.Grow(out[:0], len(head)+(n+2)/3*4+len(tail))
			out = append(out, head...)
			out = out[:len(head)+(n+2)/3*4]
			at := len(head)
			for {
				k, err := io.ReadFull(f, chunk)
				if k > 0 {
					b64codec.Encode(out[at:], chunk[:k])
					at += (k + 2) / 3 * 4
				}
				if err != nil {
					break
				}
			}
			f.Close()
			out = append(out[:at], tail...)
			if m.write(out) != nil {
				return
			}
		case "stream", "stream-tty":
			// The output of head read from its pipe in 64 KiB reads
			// (blocking, outside the poller: the cheapest way), each
			// sent as a process/output notification. On a PTY (stream-tty)
			// the master returns at most the line discipline's 4 KiB per
			// read: blocking reads (no poller at all, the cheapest way to
			// wait) fill each 64 KiB chunk.
			cmd := exec.Command("head", "-c", strconv.FormatInt(req.N, 10), "/dev/zero")
			var src io.Reader
			var closer io.Closer
			if req.Op == "stream-tty" {
				master, err := pty.Start(cmd)
				if err != nil {
					return
				}
				// Fd puts the master in blocking mode, out of the poller.
				_ = master.Fd()
				src, closer = master, master
			} else {
				// A blocking pipe, never in the runtime's poller: the
				// read waits in the kernel, and the child's writes wake
				// no epoll watcher (as the server's pipes, see
				// process/quiet.go).
				var p [2]int
				if syscall.Pipe2(p[:], syscall.O_CLOEXEC) != nil {
					return
				}
				r, w := os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
				cmd.Stdout = w
				err := cmd.Start()
				w.Close()
				if err != nil {
					r.Close()
					return
				}
				src, closer = r, r
			}
			buf := make([]byte, 64<<10)
			stream := "stdout"
			if req.Op == "stream-tty" {
				stream = "pty"
			}
			for seq := 1; ; seq++ {
				var k int
				var err error
				if req.Op == "stream-tty" {
					// A PTY master ends with EIO once the child is gone.
					for k < len(buf) && err == nil {
						var r int
						r, err = src.Read(buf[k:])
						k += r
					}
				} else {
					k, err = src.Read(buf)
				}
				if k > 0 {
					out = append(out[:0], `{"method":"`+protocol.NotifyProcessOutput+`","params":{"processId":"p","seq":`...)
					out = strconv.AppendInt(out, int64(seq), 10)
					out = append(out, `,"stream":"`+stream+`","chunk":"`...)
					out = b64codec.AppendEncode(out, buf[:k])
					out = append(out, `"}}`...)
					if m.write(out) != nil {
						return
					}
				}
				if err != nil {
					break
				}
			}
			_ = cmd.Wait()
			if closer != nil {
				_ = closer.Close()
			}
			if m.write([]byte(`{"method":"`+protocol.NotifyProcessClosed+`"}`)) != nil {
				return
			}
		}
	}
}

// floorWrite writes data to a new file as the server does (fsys.writeWhole:
// its blocks reserved first, which spares ext4 its per-page
// delayed-allocation work), in one write.
func floorWrite(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_ = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, int64(len(data)))
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// floorPath is the "path" member of a write request (before its payload).
func floorPath(head []byte) string {
	v := jsonscan.Member(append(bytes.TrimRight(head, ", "), '}'), "path")
	s, _ := strconv.Unquote(string(v))
	return s
}

// floorClient drives a floor server: it sends requests and reads whole
// replies without decoding them (the floor is the server's side).
type floorClient struct {
	cmd  *exec.Cmd
	ws   *websocket.Conn
	out  jsonrpc.Stream // ws: for large writes in 1 MiB frames, as the SDK
	in   *bufio.Reader
	inw  io.WriteCloser
	done chan struct{}
}

func startFloor(tr transportKind) (*floorClient, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), floorEnv+"="+string(tr))
	if serverProfileDir != "" {
		cmd.Env = append(cmd.Env, floorEnv+"_PROFILE="+serverProfileDir)
	}
	cmd.Stderr = os.Stderr
	fc := &floorClient{cmd: cmd, done: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if tr == stdio {
		if fc.inw, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); close(fc.done) }()
	fc.in = bufio.NewReaderSize(stdout, 1<<20)
	if tr == stdio {
		return fc, nil
	}
	line, err := fc.in.ReadString('\n')
	if err != nil {
		fc.close()
		return nil, err
	}
	url := strings.TrimSpace(line)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		fc.close()
		return nil, err
	}
	ws.SetReadLimit(1 << 30)
	fc.ws = ws
	fc.out = transport.NewWebSocket(ws, url)
	return fc, nil
}

func (fc *floorClient) pid() int { return fc.cmd.Process.Pid }

func (fc *floorClient) send(msg []byte) error {
	if fc.ws != nil {
		return fc.out.Write(context.Background(), msg, false)
	}
	if _, err := fc.inw.Write(msg); err != nil {
		return err
	}
	_, err := fc.inw.Write([]byte{'\n'})
	return err
}

// recv reads one whole message and returns its length and its first
// bytes (enough to tell a notification from the end).
func (fc *floorClient) recv() (int64, []byte, error) {
	var head [64]byte
	if fc.ws != nil {
		_, r, err := fc.ws.Reader(context.Background())
		if err != nil {
			return 0, nil, err
		}
		k, _ := io.ReadFull(r, head[:])
		n, err := io.Copy(io.Discard, r)
		return int64(k) + n, head[:k], err
	}
	var n int64
	var h []byte
	for {
		line, err := fc.in.ReadSlice('\n')
		if h == nil {
			h = append([]byte(nil), line[:min(len(line), len(head))]...)
		}
		n += int64(len(line))
		if err == nil {
			return n, h, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return n, h, err
		}
	}
}

func (fc *floorClient) close() {
	if fc.ws != nil {
		_ = fc.ws.Close(websocket.StatusNormalClosure, "")
	}
	if fc.inw != nil {
		_ = fc.inw.Close()
	}
	select {
	case <-fc.done:
	case <-time.After(3 * time.Second):
		_ = fc.cmd.Process.Kill()
		<-fc.done
	}
}

// floorRun measures the floor of one workload on tr: runs samples of
// server CPU s/GB and MB/s. what is "stream", "read" or "write"; n the
// bytes per sample; path the file read or written.
func floorRun(tr transportKind, what string, n int64, path string, runs int, pm *procMeter) (cpu, rate []float64, err error) {
	fc, err := startFloor(tr)
	if err != nil {
		return nil, nil, err
	}
	defer fc.close()
	var payload []byte
	if what == "write" {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i * 7)
		}
		req, _ := json.Marshal(map[string]any{"op": "write", "path": path})
		payload = append(req[:len(req)-1], `,"dataBase64":"`...)
		payload = b64codec.AppendEncode(payload, data)
		payload = append(payload, `"}`...)
	}
	// The least a server can do is its steady state: one unmeasured
	// round first, so that the floor's buffers (its message buffer, the
	// read reply) already have their size, as a long-running server's
	// have. Without it the first sample grows the message buffer through
	// a series of copies and GC cycles (22 s/GB), and with --runs 3 the
	// median was the worse of the two others. (Stream buffers are 64 KiB:
	// no warm-up.)
	warm := what == "read" || what == "write"
	for i := range runs + 1 {
		if i == 0 && !warm {
			continue
		}
		if what == "write" {
			// A fresh file, as each server's sample writes (runWriteFile
			// removes it first): rewriting the floor's own file from the
			// previous sample made every write truncate 16 MiB of page
			// cache first, and made ext4 start its writeback at close
			// (auto_da_alloc).
			_ = os.Remove(path)
		}
		p0 := pm.snap(fc.pid())
		c0 := cpuSeconds(fc.pid())
		t0 := time.Now()
		switch what {
		case "read":
			req, _ := json.Marshal(floorReq{Op: "read", Path: path})
			if err = fc.send(req); err == nil {
				_, _, err = fc.recv()
			}
		case "write":
			// The payload is decoded in place by the server, not here:
			// the same bytes each time.
			if err = fc.send(payload); err == nil {
				_, _, err = fc.recv()
			}
		case "stream", "stream-tty":
			req, _ := json.Marshal(floorReq{Op: what, N: n})
			if err = fc.send(req); err != nil {
				break
			}
			for {
				_, h, rerr := fc.recv()
				if rerr != nil {
					err = rerr
					break
				}
				if bytes.Contains(h, []byte(protocol.NotifyProcessClosed)) {
					break
				}
			}
		}
		if err != nil {
			return cpu, rate, err
		}
		if i == 0 {
			continue
		}
		el := time.Since(t0)
		cpu = append(cpu, (cpuSeconds(fc.pid())-c0)/(float64(n)/1e9))
		pm.add(2, p0, pm.snap(fc.pid()), float64(n))
		rate = append(rate, float64(n)/el.Seconds()/1e6)
	}
	return cpu, rate, nil
}

// floorRows measures the floor of workload w on tr and returns its rows;
// the server-cpu row sr gets the floor's median in its machine column.
func floorRows(w string, tr transportKind, what string, n int64, path string, runs int, sr *row, pm *procMeter) []*row {
	cpu, rate, err := floorRun(tr, what, n, path, runs, pm)
	c, r := summarize(cpu, err), summarize(rate, err)
	if c.N > 0 && sr != nil {
		v := c.Median
		sr.Limit = &v
	}
	return []*row{
		{Workload: w, Transport: string(tr), Metric: "floor-cpu", Unit: "s/GB", Ours: c},
		{Workload: w, Transport: string(tr), Metric: "floor-rate", Unit: "MB/s", HigherBetter: true, Ours: r},
	}
}

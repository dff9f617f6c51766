package fsys

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
)

const benchSize = 64 << 20

// cpuTime is the process's user+system CPU time so far. Benchmarks report
// it per operation (cpu-ms/op) next to wall time: on a shared, loaded
// machine it is the steadier figure.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// BenchmarkReadFile64MiB: fs/readFile through Call and the response frame
// encoder, as the server runs it (file read, base64 straight into the frame).
func BenchmarkReadFile64MiB(b *testing.B) {
	dir := b.TempDir()
	writeTestFile(b, dir+"/big", pattern(benchSize))
	f := New(Options{})
	params := json.RawMessage(`{"path":` + string(mustJSON(uri(dir+"/big"))) + `}`)
	id := json.RawMessage("7")
	b.SetBytes(benchSize)
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		res, err := f.Call(context.Background(), nil, protocol.MethodFsReadFile, params)
		if err != nil {
			b.Fatal(err)
		}
		frame, err := jsonrpc.AppendResponse(jsonrpc.GetBuffer(), id, res)
		if err != nil || len(frame) < benchSize {
			b.Fatal(err, len(frame))
		}
		jsonrpc.PutBuffer(frame)
	}
}

// BenchmarkWriteFile64MiB: fs/writeFile through Call from the raw params of
// a request (params scan, base64 decode, write).
func BenchmarkWriteFile64MiB(b *testing.B) {
	dir := b.TempDir()
	params := json.RawMessage(`{"path":` + string(mustJSON(uri(dir+"/big"))) + `,"dataBase64":"` + b64(pattern(benchSize)) + `"}`)
	f := New(Options{})
	b.SetBytes(benchSize)
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		res, err := f.Call(context.Background(), nil, protocol.MethodFsWriteFile, params)
		if err != nil {
			b.Fatal(err)
		}
		frame, _ := jsonrpc.AppendResponse(jsonrpc.GetBuffer(), json.RawMessage("8"), res)
		jsonrpc.PutBuffer(frame)
	}
}

// BenchmarkReadBlock1MiB: one fs/readBlock of 1 MiB with its frame.
func BenchmarkReadBlock1MiB(b *testing.B) {
	dir := b.TempDir()
	writeTestFile(b, dir+"/big", pattern(4<<20))
	f := New(Options{})
	h := f.NewHandles()
	defer h.CloseAll()
	mustCall(b, f, h, protocol.MethodFsOpen, obj("handleId", "r", "path", uri(dir+"/big")))
	params := json.RawMessage(`{"handleId":"r","offset":1048576,"len":1048576}`)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		res, err := f.Call(context.Background(), h, protocol.MethodFsReadBlock, params)
		if err != nil {
			b.Fatal(err)
		}
		frame, _ := jsonrpc.AppendResponse(jsonrpc.GetBuffer(), json.RawMessage("9"), res)
		jsonrpc.PutBuffer(frame)
	}
}

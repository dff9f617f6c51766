package fsys

import (
	"bytes"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/protocol"
)

// A file written block by block through a replace handle: while it is open
// blocks are reserved past its end (the size stays what was written); after
// fs/close (or the connection's CloseAll) its size, contents, allocated
// blocks and modification time are those of the same file written plainly.
func TestWriteBlockReservesAndGivesBack(t *testing.T) {
	for _, closeAll := range []bool{false, true} {
		dir := t.TempDir()
		const block = protocol.FsMaxBlockLen
		data := pattern(5*block + 17)
		// A plain copy: what the client must see.
		if err := os.WriteFile(dir+"/plain", data, 0o644); err != nil {
			t.Fatal(err)
		}
		f := New(Options{})
		h := f.NewHandles()
		mustCall(t, f, h, protocol.MethodFsOpen, obj("handleId", "w", "path", uri(dir+"/dst"), "mode", "replace"))
		for off := 0; off < len(data); off += block {
			chunk := data[off:min(off+block, len(data))]
			mustCall(t, f, h, protocol.MethodFsWriteBlock, protocol.FsWriteBlockParams{HandleID: "w", Offset: uint64(off), Chunk: chunk})
		}
		open := stat(t, dir+"/dst")
		if open.Size != int64(len(data)) {
			t.Fatalf("size while open: %d, want %d", open.Size, len(data))
		}
		plain := stat(t, dir+"/plain")
		if open.Blocks <= plain.Blocks {
			t.Fatalf("nothing reserved ahead while open: %d blocks, a plain write has %d", open.Blocks, plain.Blocks)
		}
		// A close a little later must not move the modification time.
		time.Sleep(20 * time.Millisecond)
		if closeAll {
			h.CloseAll()
		} else {
			mustCall(t, f, h, protocol.MethodFsClose, obj("handleId", "w"))
			h.CloseAll()
		}
		after := stat(t, dir+"/dst")
		if after.Size != plain.Size || after.Blocks != plain.Blocks {
			t.Errorf("closeAll=%v: after close size %d blocks %d, a plain write: size %d blocks %d", closeAll, after.Size, after.Blocks, plain.Size, plain.Blocks)
		}
		if after.Mtim != open.Mtim {
			t.Errorf("closeAll=%v: close moved the modification time: %v -> %v", closeAll, open.Mtim, after.Mtim)
		}
		if got, _ := os.ReadFile(dir + "/dst"); !bytes.Equal(got, data) {
			t.Errorf("closeAll=%v: contents differ (%d bytes)", closeAll, len(got))
		}
	}
}

// Small files and overwrites inside the file reserve nothing: no extra
// system calls, and nothing to give back.
func TestWriteBlockSmallReservesNothing(t *testing.T) {
	dir := t.TempDir()
	f := New(Options{})
	h := f.NewHandles()
	defer h.CloseAll()
	mustCall(t, f, h, protocol.MethodFsOpen, obj("handleId", "w", "path", uri(dir+"/dst"), "mode", "replace"))
	mustCall(t, f, h, protocol.MethodFsWriteBlock, protocol.FsWriteBlockParams{HandleID: "w", Offset: 0, Chunk: pattern(4096)})
	h.mu.Lock()
	fh := h.files["w"]
	h.mu.Unlock()
	if fh.reserved != 0 {
		t.Fatalf("a 4 KiB file reserved up to %d", fh.reserved)
	}
}

func stat(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

package fsys

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reserving ahead on a handle opened to replace a file. A client writing a
// file block by block (fs/writeBlock, 1 MiB at a time) grows it one block at
// a time, and each pwrite that extends a file on ext4 pays for allocating
// its blocks page by page: that pwrite was a third of the server's CPU in
// fs/writeBlock, where fs/writeFile reserves the whole file first
// (preallocate). So when a write reaches past what is reserved, the handle
// reserves a window ahead (FALLOC_FL_KEEP_SIZE: the size the client sees
// still grows only as it writes), the window doubling from reserveFirst up
// to reserveMax; on close what was reserved past the end of the file is
// given back.
const (
	reserveFirst = 2 << 20
	reserveMax   = 64 << 20
)

// writeAt writes data at off, reserving ahead first when the write reaches
// past what the handle has reserved.
func (fh *handle) writeAt(data []byte, off int64) error {
	fh.mu.Lock()
	defer fh.mu.Unlock()
	end := off + int64(len(data))
	if fh.grows && end > fh.reserved && end >= preallocMin {
		fh.window = min(max(2*fh.window, reserveFirst), reserveMax)
		from := max(off, fh.reserved)
		if reserveRange(fh.file, from, end+fh.window-from) {
			fh.reserved = end + fh.window
		} else {
			// Not a filesystem that reserves (or no room): write as
			// before, and do not ask again.
			fh.grows = false
		}
	}
	_, err := fh.file.WriteAt(data, off)
	return err
}

// close gives back the blocks reserved past the end of the file, then
// closes it.
func (fh *handle) close() error {
	fh.mu.Lock()
	defer fh.mu.Unlock()
	if fh.reserved > 0 {
		giveBack(fh.file)
		fh.reserved = 0
	}
	return fh.file.Close()
}

// reserveRange reserves n bytes of blocks from off without changing the
// file's size; false when the filesystem or the descriptor cannot.
func reserveRange(file *os.File, off, n int64) bool {
	c, err := file.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	_ = c.Control(func(fd uintptr) {
		ok = unix.Fallocate(int(fd), unix.FALLOC_FL_KEEP_SIZE, off, n) == nil
	})
	return ok
}

// giveBack frees the blocks a file has reserved past its end. Punching a
// hole past the end (FALLOC_FL_PUNCH_HOLE|KEEP_SIZE) frees nothing on ext4,
// which stops at i_size; a truncate to the current size frees them and
// keeps every byte, but it also moves the modification time, which a plain
// write would have left at the last write: that time is put back. Best
// effort: on failure the blocks stay reserved past the end, which the
// client cannot see in the size or the contents.
func giveBack(file *os.File) {
	c, err := file.SyscallConn()
	if err != nil {
		return
	}
	_ = c.Control(func(fd uintptr) {
		var st unix.Stat_t
		if unix.Fstat(int(fd), &st) != nil {
			return
		}
		if unix.Ftruncate(int(fd), st.Size) != nil {
			return
		}
		// futimens(fd, {UTIME_OMIT, mtime}): utimensat with a NULL path.
		ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, st.Mtim}
		_, _, _ = unix.Syscall6(unix.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	})
}

// Package rawsock reads and writes TCP sockets with raw syscalls, so that
// a process that goes idle between small messages does not keep the Go
// runtime's sysmon thread awake.
//
// A goroutine's read(2) or write(2) through the net package enters the
// scheduler's syscall state (runtime.entersyscall), and the first one after
// the process was idle wakes sysmon, which then polls every 20 µs for at
// least 1 ms before it backs off (the sysmon loop in the Go runtime's
// proc.go). A relay goes idle between frames thousands of times a second,
// so its sysmon never backed off: in a perf profile of exec-relay nodes
// carrying one cross-node stream, sysmon's sleeps and wake-ups were 18 % of
// their CPU. Sockets from the net package are non-blocking, so their reads
// and writes never wait in the kernel: here they are raw syscalls, which
// skip that state, and wait for the socket through the runtime's poller
// (syscall.RawConn) as the net package does.
//
// Built for Linux; elsewhere Wrap returns the connection as it is.
package rawsock

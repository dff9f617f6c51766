package hostile

// probeSource is a small static program the escape suite builds and runs
// inside the sandbox (process/start): one raw operation per run, so each
// has its own exit code and sandboxDenied. It prints "ok OP" and exits 0,
// or "OP: STEP: error" and exits 1; the errno text is the kernel's (Go
// prints "read-only file system", "operation not permitted", ...), which
// the sandboxDenied heuristic keys on. Standard library only, so that it
// builds anywhere the server does.
const probeSource = `package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

func fail(op, step string, err error) {
	fmt.Printf("%s: %s: %v (errno %d)\n", op, step, err, errnoOf(err))
	os.Exit(1)
}

func errnoOf(err error) int {
	for err != nil {
		if e, ok := err.(syscall.Errno); ok {
			return int(e)
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return 0
		}
		err = u.Unwrap()
	}
	return 0
}

func check(op, step string, err error) {
	if err != nil {
		fail(op, step, err)
	}
}

func sysRenameat2() uintptr {
	if runtime.GOARCH == "arm64" {
		return 276
	}
	return 316
}

func inet(addr string) *syscall.SockaddrInet4 {
	host, port, _ := strings.Cut(addr, ":")
	p, _ := strconv.Atoi(port)
	sa := &syscall.SockaddrInet4{Port: p}
	for i, part := range strings.Split(host, ".") {
		n, _ := strconv.Atoi(part)
		sa.Addr[i] = byte(n)
	}
	return sa
}

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: probe OP ARGS...")
		os.Exit(2)
	}
	op, a := os.Args[1], os.Args[2:]
	arg := func(i int) string {
		if i < len(a) {
			return a[i]
		}
		return ""
	}
	switch op {
	case "write":
		f, err := os.OpenFile(arg(0), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		check(op, "open", err)
		_, err = f.WriteString("probe was here")
		check(op, "write", err)
		check(op, "close", f.Close())
	case "mkdir":
		check(op, "mkdir", syscall.Mkdir(arg(0), 0o755))
	case "link":
		check(op, "link", syscall.Link(arg(0), arg(1)))
	case "rename":
		check(op, "rename", syscall.Rename(arg(0), arg(1)))
	case "exchange":
		o, _ := syscall.BytePtrFromString(arg(0))
		n, _ := syscall.BytePtrFromString(arg(1))
		const renameExchange = 2
		_, _, e := syscall.Syscall6(sysRenameat2(), uintptr(0xffffff9c), uintptr(unsafe.Pointer(o)), uintptr(0xffffff9c), uintptr(unsafe.Pointer(n)), renameExchange, 0)
		if e != 0 {
			fail(op, "renameat2", e)
		}
	case "mknod-c":
		check(op, "mknod", syscall.Mknod(arg(0), syscall.S_IFCHR|0o666, 1<<8|3))
	case "mknod-b":
		check(op, "mknod", syscall.Mknod(arg(0), syscall.S_IFBLK|0o666, 8<<8|0))
	case "chmod":
		check(op, "chmod", syscall.Chmod(arg(0), 0o777))
	case "chown":
		check(op, "chown", syscall.Chown(arg(0), 1234, 1234))
	case "utime":
		check(op, "utimes", syscall.UtimesNano(arg(0), []syscall.Timespec{{Sec: 1}, {Sec: 1}}))
	case "setxattr":
		check(op, "setxattr", syscall.Setxattr(arg(0), "user.escape", []byte("x"), 0))
	case "truncate":
		check(op, "truncate", syscall.Truncate(arg(0), 0))
	case "unlink":
		check(op, "unlink", syscall.Unlink(arg(0)))
	case "fds":
		// One line per descriptor: "N -> target"; the directory fd this
		// listing itself uses is marked.
		d, err := os.Open("/proc/self/fd")
		check(op, "open", err)
		names, err := d.Readdirnames(-1)
		check(op, "readdir", err)
		self := strconv.Itoa(int(d.Fd()))
		sort.Strings(names)
		for _, n := range names {
			target, _ := os.Readlink("/proc/self/fd/" + n)
			mark := ""
			if n == self {
				mark = " (the listing's own)"
			}
			fmt.Printf("%s -> %s%s\n", n, target, mark)
		}
	case "tcp", "mptcp":
		proto := 0
		if op == "mptcp" {
			proto = 262 // IPPROTO_MPTCP
		}
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, proto)
		check(op, "socket", err)
		check(op, "connect", syscall.Connect(fd, inet(arg(0))))
	case "tcp6":
		_, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM, 0)
		check(op, "socket", err)
	case "listen":
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
		check(op, "socket", err)
		check(op, "bind", syscall.Bind(fd, inet("127.0.0.1:0")))
		check(op, "listen", syscall.Listen(fd, 1))
	case "udp":
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
		check(op, "socket", err)
		check(op, "sendto", syscall.Sendto(fd, []byte("escape"), 0, inet(arg(0))))
	case "raw":
		_, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP)
		check(op, "socket", err)
	case "netlink":
		fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW, syscall.NETLINK_ROUTE)
		check(op, "socket", err)
		check(op, "bind", syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}))
	case "vsock":
		_, err := syscall.Socket(40, syscall.SOCK_STREAM, 0) // AF_VSOCK
		check(op, "socket", err)
	case "abstract":
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		check(op, "socket", err)
		check(op, "connect", syscall.Connect(fd, &syscall.SockaddrUnix{Name: "@" + arg(0)}))
	case "socketpair":
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		check(op, "socketpair", err)
		_, err = syscall.Write(fds[0], []byte("x"))
		check(op, "write", err)
		buf := make([]byte, 1)
		_, err = syscall.Read(fds[1], buf)
		check(op, "read", err)
	case "iouring":
		var params [120]byte
		r, _, e := syscall.Syscall(425, 1, uintptr(unsafe.Pointer(&params[0])), 0) // io_uring_setup
		if e != 0 {
			fail(op, "io_uring_setup", e)
		}
		syscall.Close(int(r))
	case "kill":
		pid, _ := strconv.Atoi(arg(0))
		sig, _ := strconv.Atoi(arg(1))
		check(op, "kill", syscall.Kill(pid, syscall.Signal(sig)))
	case "ptrace":
		pid, _ := strconv.Atoi(arg(0))
		const ptraceSeize = 0x4206 // does not stop the tracee; detached at exit
		_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, ptraceSeize, uintptr(pid), 0, 0, 0, 0)
		if e != 0 {
			fail(op, "ptrace", e)
		}
	case "mem":
		f, err := os.OpenFile("/proc/"+arg(0)+"/mem", os.O_RDWR, 0)
		check(op, "open", err)
		f.Close()
	case "deep":
		// deep N NAME: mkdir NAME and chdir into it N times, relatively
		// (no path ever exceeds one component), then write f.
		n, _ := strconv.Atoi(arg(0))
		for i := 0; i < n; i++ {
			check(op, "mkdir", syscall.Mkdir(arg(1), 0o755))
			check(op, "chdir", syscall.Chdir(arg(1)))
		}
		check(op, "write", os.WriteFile("f", []byte("deep"), 0o644))
	case "userns":
		// Whether this (unprivileged) user may create a user namespace:
		// a child in a new one, mapped to ourselves.
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		}
		check(op, "clone", cmd.Run())
	case "unshare-user":
		check(op, "unshare", syscall.Unshare(syscall.CLONE_NEWUSER))
	case "setuid":
		// setuid FILE: chmod 4755, then a fresh 04755 file by open(2).
		check(op, "chmod", syscall.Chmod(arg(0), 0o4755))
		fd, err := syscall.Open(arg(0)+".new", syscall.O_CREAT|syscall.O_WRONLY, 0o4755)
		check(op, "open", err)
		syscall.Close(fd)
		var st syscall.Stat_t
		check(op, "stat", syscall.Stat(arg(0)+".new", &st))
		if st.Mode&(syscall.S_ISUID|syscall.S_ISGID) == 0 {
			fail(op, "open", syscall.EPERM)
		}
	case "unix-connect":
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		check(op, "socket", err)
		check(op, "connect", syscall.Connect(fd, &syscall.SockaddrUnix{Name: arg(0)}))
		_, err = syscall.Write(fd, []byte("x"))
		check(op, "write", err)
	case "unix-dgram":
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
		check(op, "socketpair", err)
		check(op, "sendmsg", syscall.Sendmsg(fds[0], []byte("escape"), nil, &syscall.SockaddrUnix{Name: arg(0)}, 0))
	case "caps":
		// caps: every task of the init (pid 1) and of this process without
		// a capability.
		for _, pid := range []string{"1", "self"} {
			ents, err := os.ReadDir("/proc/" + pid + "/task")
			check(op, "readdir", err)
			for _, e := range ents {
				b, err := os.ReadFile("/proc/" + pid + "/task/" + e.Name() + "/status")
				if err != nil {
					continue
				}
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "CapEff:") && strings.TrimSpace(l[7:]) != "0000000000000000" {
						fmt.Printf("task %s/%s has %s\n", pid, e.Name(), l)
						os.Exit(3)
					}
				}
			}
		}
	case "lease":
		fd, err := syscall.Open(arg(0), syscall.O_RDONLY, 0)
		check(op, "open", err)
		_, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), 1024, 0) // F_SETLEASE, F_RDLCK
		if e != 0 {
			fail(op, "F_SETLEASE", e)
		}
	case "loop-create":
		// loop-create N: N times create d/f exclusively and remove it
		// (or remove one a rename back left).
		n, _ := strconv.Atoi(arg(0))
		made := 0
		for i := 0; i < n; i++ {
			fd, err := syscall.Open("d/f", syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644)
			if err == nil {
				made++
				syscall.Close(fd)
			}
			syscall.Unlink("d/f")
		}
		fmt.Printf("loop-create: made %d\n", made)
	case "loop-rename":
		// loop-rename N: N times d -> secrets, look for secrets/f, back;
		// exit 3 when secrets/f was there.
		n, _ := strconv.Atoi(arg(0))
		moved, seen := 0, 0
		for i := 0; i < n; i++ {
			if syscall.Rename("d", "secrets") != nil {
				continue
			}
			moved++
			var st syscall.Stat_t
			if syscall.Lstat("secrets/f", &st) == nil {
				seen++
			}
			syscall.Rename("secrets", "d")
		}
		fmt.Printf("loop-rename: moved %d, secrets/f seen %d\n", moved, seen)
		if seen > 0 {
			os.Exit(3)
		}
	case "core-limit":
		var r syscall.Rlimit
		check(op, "getrlimit", syscall.Getrlimit(4, &r)) // RLIMIT_CORE
		if r.Max != 0 {
			fmt.Printf("core-limit: RLIMIT_CORE hard %d\n", r.Max)
			os.Exit(3)
		}
	default:
		fmt.Println("unknown op", op)
		os.Exit(2)
	}
	fmt.Println("ok", op)
}
`

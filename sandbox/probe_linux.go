package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/internal/reexec"
	"github.com/execgo/exec-server/sandbox/policy"
)

// Probe: what the running kernel offers the sandbox, probed once by
// starting one helper (fail closed).

var (
	probeOnce sync.Once
	probed    Support
)

// Probe reports what the kernel offers. The real probe (which starts one
// helper) runs once; SimulateEnv is applied on every call.
func Probe() Support {
	if !reexec.Ready() {
		// The kernel probe starts a helper: in a program whose main did not
		// call reexec.Main, that would be main again.
		return Support{Missing: "a re-executable binary (main does not call reexec.Main)"}
	}
	probeOnce.Do(func() { probed = probeKernel() })
	return simulate(probed, os.Getenv(SimulateEnv))
}

func simulate(s Support, list string) Support {
	for _, f := range strings.Split(list, ",") {
		var what string
		switch strings.TrimSpace(f) {
		case "userns":
			s.UserNS = false
			if os.Getuid() == 0 {
				continue // root does not use one
			}
			what = "user namespaces"
		case "mountns":
			what = "mount namespaces"
		case "landlock":
			s.LandlockABI, what = 0, "Landlock"
		case "seccomp":
			s.Seccomp, what = false, "seccomp"
		default:
			continue
		}
		s.Available = false
		if s.Missing != "" {
			s.Missing += ", "
		}
		s.Missing += what + " (simulated by " + SimulateEnv + ")"
	}
	return s
}

func readSysctl(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

func probeKernel() Support {
	s := Support{LandlockABI: landlockABI()}
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err == nil && seccompArch != 0 {
		s.Seccomp = true
	}
	var missing []string
	userns := os.Getuid() != 0
	if userns {
		if n, ok := readSysctl("/proc/sys/user/max_user_namespaces"); ok && n == 0 {
			missing = append(missing, "user namespaces (user.max_user_namespaces=0)")
		}
		if n, ok := readSysctl("/proc/sys/kernel/unprivileged_userns_clone"); ok && n == 0 {
			missing = append(missing, "user namespaces (kernel.unprivileged_userns_clone=0)")
		}
	}
	if s.LandlockABI == 0 {
		missing = append(missing, "Landlock")
	}
	if !s.Seccomp {
		missing = append(missing, "seccomp filters ("+runtime.GOARCH+")")
	}
	if len(missing) == 0 {
		// The only proof that counts: build a real view and lock down.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		reply, f, err := runHelper(ctx, &policy.Plan{Root: policy.AccessRead}, probeOp, nil)
		if f != nil {
			f.Close()
		}
		switch {
		case err == nil && string(reply) == "ok":
			s.UserNS = userns
		case err == nil:
			missing = append(missing, fmt.Sprintf("a working sandbox helper (reply %q)", reply))
		default:
			missing = append(missing, classify(err, userns))
		}
	}
	if len(missing) == 0 {
		s.Available = true
	} else {
		s.Missing = strings.Join(missing, ", ")
	}
	return s
}

// classify names the kernel feature a failed trial points at.
func classify(err error, userns bool) string {
	var se *stepError
	if errors.As(err, &se) && se.step == "start the helper" {
		if userns {
			why := ""
			if n, ok := readSysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); ok && n == 1 {
				why = "kernel.apparmor_restrict_unprivileged_userns=1: "
			}
			return "user namespaces (" + why + err.Error() + ")"
		}
		return "namespaces (" + err.Error() + ")"
	}
	msg := err.Error()
	for _, s := range []string{"make / private", "clone /", "attach the view", "pivot_root", "/proc", "/dev", "empty root", "masks"} {
		if strings.Contains(msg, s+":") {
			return "mount namespaces (" + msg + ")"
		}
	}
	return "a working sandbox helper (" + msg + ")"
}

func unavailable(s Support) error {
	return fmt.Errorf("%w: missing %s", ErrUnavailable, s.Missing)
}

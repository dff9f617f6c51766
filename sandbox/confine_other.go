//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"os"

	"github.com/execgo/exec-server/internal/reexec"
	"github.com/execgo/exec-server/sandbox/policy"
)

var errUnsupported = errors.New("sandbox: not supported on this system")

func probe() Support { return Support{Missing: "a Linux kernel"} }

// Probe reports what the kernel offers.
func Probe() Support { return probe() }

func registerOp(string, OpFunc) {}

func run(context.Context, *policy.Plan, string, []byte) ([]byte, *os.File, error) {
	return nil, nil, errUnsupported
}

func command(*policy.Plan, string, []string, []string, string) (*Spec, error) {
	return nil, errUnsupported
}

// MaybeMain is reexec.Main: no sandbox helper runs here.
func MaybeMain() { reexec.Main() }

// CleanStale does nothing: no mount points are made here.
func CleanStale() []string { return nil }

// Quiesce does nothing: no helpers or mount points are made here.
func Quiesce(context.Context) {}

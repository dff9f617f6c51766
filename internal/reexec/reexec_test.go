package reexec

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

const testArg = "--reexec-test-mode"

func init() {
	Register(testArg, func() {
		os.Stdout.WriteString("helper ran\n")
		os.Exit(7)
	})
}

func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

// TestReexec: the binary re-executed with a registered argument runs the
// registered function (and its exit code), not main.
func TestReexec(t *testing.T) {
	if !Ready() {
		t.Fatal("Ready is false after Main returned")
	}
	out, err := exec.Command(os.Args[0], testArg).Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 7 || string(out) != "helper ran\n" {
		t.Fatalf("re-executed: %q, %v; want the helper's output and exit code 7", out, err)
	}
	if !slices.Contains(Args(), testArg) {
		t.Fatalf("Args() = %q", Args())
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	Register(testArg, func() {})
}

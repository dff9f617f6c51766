//go:build unix

package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tmuxSession is a local shell in a detached tmux session: a real
// terminal that the test types into and reads back, as a user would.
type tmuxSession struct {
	t    *testing.T
	tmux string
	sock string
	dir  string // the local shell's working directory
}

func newTmux(t *testing.T) *tmuxSession {
	t.Helper()
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed (apt-get install tmux): the terminal tests of exec -it need it")
	}
	dir := t.TempDir()
	s := &tmuxSession{t: t, tmux: tmux, sock: filepath.Join(dir, "sock"), dir: dir}
	s.run("new-session", "-d", "-s", "t", "-x", "100", "-y", "30", "-c", dir, "env", "PS1=$ ", "HISTFILE=/dev/null", "sh")
	t.Cleanup(func() { exec.Command(tmux, "-S", s.sock, "kill-server").Run() })
	return s
}

func (s *tmuxSession) run(args ...string) string {
	s.t.Helper()
	out, err := exec.Command(s.tmux, append([]string{"-S", s.sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// typeLine types text and Enter into the shell.
func (s *tmuxSession) typeLine(text string) {
	s.run("send-keys", "-t", "t", "-l", text)
	s.run("send-keys", "-t", "t", "Enter")
}

func (s *tmuxSession) keys(keys ...string) {
	s.run(append([]string{"send-keys", "-t", "t"}, keys...)...)
}

func (s *tmuxSession) screen() string {
	return s.run("capture-pane", "-p", "-J", "-t", "t", "-S", "-200")
}

func (s *tmuxSession) waitScreen(want string) {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(s.screen(), want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("%q never appeared on the screen:\n%s", want, s.screen())
}

// waitFile waits for a file the shell writes and returns its contents.
func (s *tmuxSession) waitFile(name string) string {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(s.dir, name)); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("the shell never wrote %s; screen:\n%s", name, s.screen())
	return ""
}

// exec -it in a real terminal (tmux): the window size and its changes
// reach the remote terminal; Ctrl-C and Ctrl-D reach the remote program;
// a background job that keeps the remote terminal open does not trap the
// user (a notice, Ctrl-C stops waiting) and nothing typed meanwhile
// reaches the local shell; the detach keys detach; and the local
// terminal's settings are restored each time (stty -g before and after).
func TestExecTmux(t *testing.T) {
	needServer(t)
	s := newTmux(t)
	t0 := t
	cases := []struct {
		name   string
		remote string
		act    func()
		code   string
		screen string
	}{
		{
			name:   "resize",
			remote: `trap 'stty size; echo resized' WINCH; stty size; echo ready-$N; while :; do sleep 0.1; done`,
			act: func() {
				s.waitScreen("ready-0")
				if !strings.Contains(s.screen(), "30 100") { // the pane's size, sent with the start
					s.t.Errorf("the remote terminal did not start with the pane's size (30 100):\n%s", s.screen())
				}
				s.run("resize-window", "-t", "t", "-x", "120", "-y", "40")
				s.waitScreen("40 120")
				s.keys("C-c")
			},
			code: "130",
		},
		{
			name:   "ctrl-c",
			remote: `trap 'echo got-int-$N; exit 3' INT; echo ready-$N; while :; do sleep 0.1; done`,
			act:    func() { s.waitScreen("ready-1"); s.keys("C-c") },
			code:   "3", screen: "got-int-1",
		},
		{
			name:   "ctrl-d",
			remote: `echo ready-$N; cat; echo eof-seen-$N; exit 5`,
			act:    func() { s.waitScreen("ready-2"); s.keys("C-d") },
			code:   "5", screen: "eof-seen-2",
		},
		{
			name: "background job",
			// With job control (as in an interactive shell) the job is
			// in its own process group: the SIGHUP the terminal sends
			// when sh exits does not reach it, and it keeps the
			// terminal open for 8 s.
			remote: `set -m; sleep 8 & echo ready-$N; exit 4`,
			act: func() {
				s.waitScreen("waiting for it to close")
				// Typed while exec waits: must not reach the local shell.
				s.typeLine("touch LEAKED")
				s.keys("C-c")
			},
			code: "4", screen: "stopped waiting",
		},
		{
			name:   "detach keys",
			remote: `echo ready-$N; sleep 20`,
			act:    func() { s.waitScreen("ready-4"); s.keys("C-p", "C-q") },
			code:   "0", screen: "detached; the remote command goes on in session",
		},
	}
	// The cases run one after the other in the same shell; t is the one
	// of the case running.
	for i, tc := range cases {
		t0.Run(tc.name, func(t *testing.T) {
			s.t = t
			line := fmt.Sprintf("clear; stty -g > before%d; %s exec --url %s -it -e N=%d -- sh -c %s; echo $? > rc%d; stty -g > after%d",
				i, shellQuote(bin), serverURL, i, shellQuote(tc.remote), i, i)
			s.typeLine(line)
			tc.act()
			if code := s.waitFile(fmt.Sprintf("rc%d", i)); code != tc.code {
				t.Errorf("exit %s, want %s; screen:\n%s", code, tc.code, s.screen())
			}
			before, after := s.waitFile(fmt.Sprintf("before%d", i)), s.waitFile(fmt.Sprintf("after%d", i))
			if before != after {
				t.Errorf("terminal settings not restored:\nbefore %s\nafter  %s", before, after)
			}
			if tc.screen != "" && !strings.Contains(s.screen(), tc.screen) {
				t.Errorf("screen lacks %q:\n%s", tc.screen, s.screen())
			}
			// Whatever the shell was left to read runs before this.
			s.typeLine(fmt.Sprintf("echo synced > sync%d", i))
			s.waitFile(fmt.Sprintf("sync%d", i))
			if _, err := os.Stat(filepath.Join(s.dir, "LEAKED")); err == nil {
				t.Errorf("keys typed while exec ran reached the local shell; screen:\n%s", s.screen())
			}
			s.run("clear-history", "-t", "t")
		})
	}
}

// Without -t, a command that exits while a background job holds its
// output open: the first Ctrl-C is forwarded (and says so), the second
// ends exec with 130. Before, exec waited for as long as the job ran and
// ignored every Ctrl-C.
func TestExecSecondCtrlCTmux(t *testing.T) {
	needServer(t)
	s := newTmux(t)
	s.typeLine(fmt.Sprintf("%s exec --url %s -- sh -c 'sleep 300 & echo \"re\"ady'; echo \"rc=$?\" > rc", bin, serverURL))
	s.waitScreen("ready")
	s.keys("C-c")
	s.waitScreen("again stops waiting")
	s.keys("C-c")
	if got := s.waitFile("rc"); got != "rc=130" {
		t.Errorf("%s; want rc=130\n%s", got, s.screen())
	}
}

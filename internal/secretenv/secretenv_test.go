package secretenv

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

const childEnv = "SCRUB_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		child()
		return
	}
	os.Exit(m.Run())
}

// child scrubs, reports what it still sees, and waits for stdin to close.
func child() {
	names, err := Scrub()
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	v, ok := LookupEnv("CODEX_API_KEY")
	inEnviron := false
	for _, kv := range Environ() {
		inEnviron = inEnviron || kv == "CODEX_API_KEY="+v
	}
	fmt.Printf("ready scrubbed=%s getenv=%q lookup=%q,%v environ=%v keep=%q\n", strings.Join(names, ","), os.Getenv("CODEX_API_KEY"), v, ok, inEnviron, os.Getenv("KEEP_ME"))
	bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0)
}

func TestIsSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"CODEX_API_KEY": true, "OPENAI_API_KEY": true, "GITHUB_TOKEN": true, "AWS_SECRET_ACCESS_KEY": true,
		"DB_PASSWORD": true, "my_token": true, "PATH": false, "HOME": false, "EXEC_SERVER_WS_TOKEN_FILE": false,
		"EXEC_SERVER_WS_TOKEN_SHA256": false, "SSH_KEY_PATH": false, "GNUPG_KEY_DIR": false, "KEYBOARD": true,
	} {
		if got := IsSecretName(name); got != want {
			t.Errorf("IsSecretName(%s) = %v, want %v", name, got, want)
		}
	}
}

// #17 item 3: after Scrub, /proc/PID/environ of the running process no
// longer holds the secret, while the process itself can still look it up.
func TestScrubClearsProcEnviron(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	const marker = "sk-secretenv-marker-0123456789"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{childEnv + "=1", "CODEX_API_KEY=" + marker, "OPENAI_API_KEY=" + marker + "2", "KEEP_ME=visible", "PATH=/usr/bin:/bin"}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`ready scrubbed=CODEX_API_KEY,OPENAI_API_KEY getenv="" lookup=%q,true environ=true keep="visible"`, marker)
	if strings.TrimSpace(line) != want {
		t.Fatalf("child said %q\nwant        %q", strings.TrimSpace(line), want)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(environ, []byte(marker)) || bytes.Contains(environ, []byte("CODEX_API_KEY")) {
		t.Fatalf("/proc/PID/environ still shows the secret: %q", environ)
	}
	if !bytes.Contains(environ, []byte("KEEP_ME=visible")) || !bytes.Contains(environ, []byte("PATH=/usr/bin:/bin")) {
		t.Fatalf("/proc/PID/environ lost other variables: %q", environ)
	}
}

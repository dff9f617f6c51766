package cli_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// Completion scripts and the man page come from the subcommands' own flag
// sets: every flag -h lists is in each, and the scripts parse.
func TestCompletionAndMan(t *testing.T) {
	scripts := map[string]string{}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := mainOut(t, "", "completion", shell)
		if code != 0 || out == "" {
			t.Fatalf("completion %s: exit %d %s", shell, code, errOut)
		}
		scripts[shell] = out
	}
	code, man, _ := mainOut(t, "", "man")
	if code != 0 || !strings.HasPrefix(man, ".TH EXEC-SERVER 1") {
		t.Fatalf("man: exit %d\n%s", code, man)
	}
	flagRe := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	for _, sub := range []string{"exec", "cp", "ls", "cat", "ps", "watch", "rm", "mkdir", "mv"} {
		_, help, _ := mainOut(t, "", sub, "-h")
		for _, m := range flagRe.FindAllStringSubmatch(help, -1) {
			f := m[1]
			if !strings.Contains(scripts["bash"], "--"+f) || !strings.Contains(scripts["fish"], "-l "+f) || !strings.Contains(man, `\-\-`+strings.ReplaceAll(f, "-", `\-`)) {
				t.Errorf("%s --%s is missing from a completion script or the man page", sub, f)
			}
		}
	}
	if code, _, _ := mainOut(t, "", "completion", "tcsh"); code != 2 {
		t.Errorf("completion tcsh: exit %d, want 2", code)
	}
	for shell, check := range map[string][]string{"bash": {"bash", "-n"}, "fish": {"fish", "-n"}, "zsh": {"zsh", "-n"}} {
		if _, err := exec.LookPath(check[0]); err != nil {
			continue
		}
		cmd := exec.Command(check[0], check[1:]...)
		cmd.Stdin = strings.NewReader(scripts[shell])
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s does not parse its completion script: %v\n%s", shell, err, out)
		}
	}
	if _, err := exec.LookPath("groff"); err == nil {
		cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z")
		cmd.Stdin = strings.NewReader(man)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("groff warns about the man page: %v\n%s", err, out)
		}
	}
}

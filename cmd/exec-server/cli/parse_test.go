package cli

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func lookupFrom(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseEnvFile(t *testing.T) {
	local := lookupFrom(map[string]string{"HOME": "/home/u", "EMPTY": ""})
	cases := []struct {
		name string
		in   string
		want map[string]string
		err  string
	}{
		{"plain", "A=1\nB=two words\n", map[string]string{"A": "1", "B": "two words"}, ""},
		{"comments and blanks", "# c\n\n   \nA=1\n  # indented comment\n", map[string]string{"A": "1"}, ""},
		{"value verbatim", `Q="quoted" # not a comment` + "\nE=a=b\n", map[string]string{"Q": `"quoted" # not a comment`, "E": "a=b"}, ""},
		{"leading space ignored", "  \tA=1\n", map[string]string{"A": "1"}, ""},
		{"crlf", "A=1\r\nB=2\r\n", map[string]string{"A": "1", "B": "2"}, ""},
		{"bare name takes local value", "HOME\nEMPTY\nUNSET\n", map[string]string{"HOME": "/home/u", "EMPTY": ""}, ""},
		{"empty value", "A=\n", map[string]string{"A": ""}, ""},
		{"last wins", "A=1\nA=2\n", map[string]string{"A": "2"}, ""},
		{"no final newline", "A=1", map[string]string{"A": "1"}, ""},
		{"empty name", "A=1\n=x\n", nil, "line 2: empty variable name"},
		{"space in name", "MY VAR=1\n", nil, "line 1: variable name \"MY VAR\" holds white space"},
		{"nul in value", "A=x\x00y\n", nil, "line 1: the value of A holds a NUL byte"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{}
			err := parseEnvFile([]byte(tc.in), got, local)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// Whatever the file holds, every variable set has a name the server can
// pass on: non-empty, no '=', no white space, no NUL (nor a NUL value).
func FuzzParseEnvFile(f *testing.F) {
	for _, s := range []string{"A=1\n# c\nB\n", "  X=y\r\n", "=", "A B=1", "A=\x00"} {
		f.Add([]byte(s))
	}
	local := lookupFrom(map[string]string{"B": "b"})
	f.Fuzz(func(t *testing.T, data []byte) {
		env := map[string]string{}
		if err := parseEnvFile(data, env, local); err != nil {
			return
		}
		for k, v := range env {
			if k == "" || strings.ContainsAny(k, "= \t\v\f\r\n\x00") || strings.ContainsRune(v, 0) {
				t.Fatalf("accepted %q=%q from %q", k, v, data)
			}
		}
	})
}

func TestParseDetachKeys(t *testing.T) {
	cases := []struct {
		spec string
		want []byte
		err  bool
	}{
		{"ctrl-p,ctrl-q", []byte{16, 17}, false},
		{"", nil, false},
		{"ctrl-a", []byte{1}, false},
		{"ctrl-Z", []byte{26}, false},
		{"ctrl-@,ctrl-[,ctrl-\\,ctrl-],ctrl-^,ctrl-_", []byte{0, 27, 28, 29, 30, 31}, false},
		{"x,ctrl-x", []byte{'x', 24}, false},
		{"ctrl-1", nil, true},
		{"ctrl-", nil, true},
		{"ab", nil, true},
		{"ctrl-p,", nil, true},
		{" ", nil, true},
	}
	for _, tc := range cases {
		got, err := parseDetachKeys(tc.spec)
		if (err != nil) != tc.err || !bytes.Equal(got, tc.want) {
			t.Errorf("parseDetachKeys(%q) = %v, %v; want %v (error %v)", tc.spec, got, err, tc.want, tc.err)
		}
	}
}

func TestEscapeMatcher(t *testing.T) {
	pq := []byte{16, 17}
	cases := []struct {
		name   string
		seq    []byte
		chunks []string
		want   string // bytes passed on
		hit    bool
	}{
		{"plain", pq, []string{"abc"}, "abc", false},
		{"sequence", pq, []string{"ab\x10\x11cd"}, "ab", true},
		{"split across reads", pq, []string{"ab\x10", "\x11"}, "ab", true},
		{"broken sequence passed on", pq, []string{"\x10x"}, "\x10x", false},
		{"held until broken", pq, []string{"a\x10"}, "a", false},
		{"repeated first key", pq, []string{"\x10\x10\x11"}, "\x10", true},
		{"self-overlapping", []byte("aab"), []string{"aaab"}, "a", true},
		{"none", nil, []string{"\x10\x11"}, "\x10\x11", false},
	}
	for _, tc := range cases {
		m := &escapeMatcher{seq: tc.seq}
		var out []byte
		hit := false
		for _, c := range tc.chunks {
			o, h := m.feed([]byte(c))
			out = append(out, o...)
			if h {
				hit = true
				break
			}
		}
		if string(out) != tc.want || hit != tc.hit {
			t.Errorf("%s: passed on %q, hit %v; want %q, %v", tc.name, out, hit, tc.want, tc.hit)
		}
	}
}

// The matcher passes on exactly what was typed before the first complete
// sequence, however the input is split into reads; bytes still held back
// at the end are a prefix of the sequence.
func FuzzEscapeMatcher(f *testing.F) {
	f.Add([]byte("ab\x10\x11c"), []byte{16, 17}, uint8(2))
	f.Add([]byte("aaab"), []byte("aab"), uint8(1))
	f.Fuzz(func(t *testing.T, in, seq []byte, split uint8) {
		if len(seq) == 0 || len(seq) > 8 {
			return
		}
		m := &escapeMatcher{seq: seq}
		var out []byte
		hit := false
		step := int(split%7) + 1
		for i := 0; i < len(in) && !hit; i += step {
			o, h := m.feed(in[i:min(i+step, len(in))])
			out = append(out, o...)
			hit = h
		}
		idx := bytes.Index(in, seq)
		if hit != (idx >= 0) {
			t.Fatalf("hit %v, sequence at %d in %q", hit, idx, in)
		}
		if hit {
			if !bytes.Equal(out, in[:idx]) {
				t.Fatalf("passed on %q, want %q", out, in[:idx])
			}
			return
		}
		held := seq[:m.n]
		if !bytes.Equal(append(out, held...), in) {
			t.Fatalf("passed on %q + held %q, want %q", out, held, in)
		}
	})
}

func TestParseModeString(t *testing.T) {
	cases := []struct {
		in   string
		kind byte
		mode fs.FileMode
		err  bool
	}{
		{"-rw-r--r--", '-', 0o644, false},
		{"drwxr-x---", 'd', 0o750, false},
		{"lrwxrwxrwx", 'l', 0o777, false},
		{"-rwsr-xr-x", '-', 0o755 | fs.ModeSetuid, false},
		{"-rwSr--r--", '-', 0o644 | fs.ModeSetuid, false},
		{"drwxrwsr-x", 'd', 0o775 | fs.ModeSetgid, false},
		{"drwxrwxrwt", 'd', 0o777 | fs.ModeSticky, false},
		{"drwxrwxrwT", 'd', 0o776 | fs.ModeSticky, false},
		{"-rw-r--r", 0, 0, true},
		{"-rw-r--r-+", 0, 0, true},
		{"-rwtr--r--", 0, 0, true},
	}
	for _, tc := range cases {
		kind, mode, err := parseModeString(tc.in)
		if (err != nil) != tc.err || kind != tc.kind || mode != tc.mode {
			t.Errorf("parseModeString(%q) = %c, %v, %v; want %c, %v (error %v)", tc.in, kind, mode, err, tc.kind, tc.mode, tc.err)
		}
		// What modeString writes for chmod round-trips what ls shows.
		if err == nil && tc.kind != 'l' {
			if got := (&copier{archive: true}).modeString(mode); got != octal(tc.mode) {
				t.Errorf("modeString(%v) = %s, want %s", mode, got, octal(tc.mode))
			}
		}
	}
}

func octal(m fs.FileMode) string {
	bits := uint32(m.Perm())
	for flag, b := range map[fs.FileMode]uint32{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
		if m&flag != 0 {
			bits |= b
		}
	}
	return fmt.Sprintf("%04o", bits)
}

func TestParseListing(t *testing.T) {
	out := "/r\x00drwxr-xr-x\x00/r/a b\x00-rw-------\x00/r/ln\x00lrwxrwxrwx\x00../x\ny\x00/r/p\x00prw-r--r--\x00"
	got, err := parseListing([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []remoteEntry{
		{path: "/r", kind: 'd', mode: 0o755},
		{path: "/r/a b", kind: '-', mode: 0o600},
		{path: "/r/ln", kind: 'l', mode: 0o777, target: "../x\ny"},
		{path: "/r/p", kind: 'p', mode: 0o644},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"/r\x00", "/r\x00lrwxrwxrwx\x00", "/r\x00bogus\x00"} {
		if _, err := parseListing([]byte(bad)); err == nil {
			t.Errorf("parseListing(%q) accepted", bad)
		}
	}
}

func FuzzParseListing(f *testing.F) {
	f.Add([]byte("/r\x00drwxr-xr-x\x00/r/ln\x00lrwxrwxrwx\x00t\x00"))
	f.Add([]byte("/r\x00-rwsr-S--T\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ents, err := parseListing(data)
		if err != nil {
			return
		}
		for _, e := range ents {
			if e.mode&^(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
				t.Fatalf("mode %v of %q has bits ls cannot show", e.mode, e.path)
			}
		}
	})
}

func TestOldSpellings(t *testing.T) {
	newSet := func() *pflag.FlagSet {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.String("url", "", "")
		fs.StringP("workdir", "w", "", "")
		fs.String("cwd", "", "")
		fs.StringArrayP("env", "e", nil, "")
		fs.BoolP("interactive", "i", false, "")
		fs.BoolP("tty", "t", false, "")
		fs.Bool("q", false, "")
		return fs
	}
	cases := []struct {
		args         []string
		interspersed bool
		want         []string
	}{
		{[]string{"-url", "ws://x", "-cwd", "/d", "sh"}, false, []string{"--url", "ws://x", "--cwd", "/d", "sh"}},
		{[]string{"-url=ws://x", "sh"}, false, []string{"--url=ws://x", "sh"}},
		{[]string{"-it", "-e", "-url", "sh", "-url"}, false, []string{"-it", "-e", "-url", "sh", "-url"}},
		{[]string{"-ieK=V", "-w", "-cwd", "sh"}, false, []string{"-ieK=V", "-w", "-cwd", "sh"}},
		{[]string{"--url", "-cwd", "-cwd", "/d"}, false, []string{"--url", "-cwd", "--cwd", "/d"}},
		{[]string{"--", "-url"}, false, []string{"--", "-url"}},
		{[]string{"a", "-url", "u", "-q"}, true, []string{"a", "--url", "u", "-q"}},
		{[]string{"-x", "-url"}, false, []string{"-x", "--url"}},
	}
	for _, tc := range cases {
		if got := oldSpellings(newSet(), tc.args, tc.interspersed); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("oldSpellings(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// oldSpellings only ever turns a "-name" into "--name": nothing is
// added, dropped or reordered, whatever the arguments.
func FuzzOldSpellings(f *testing.F) {
	f.Add("-url\x00u\x00-it\x00-e\x00-cwd\x00sh\x00-url", false)
	f.Add("a\x00-url=x\x00--\x00-cwd", true)
	f.Fuzz(func(t *testing.T, joined string, interspersed bool) {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.String("url", "", "")
		fs.StringP("workdir", "w", "", "")
		fs.StringArrayP("env", "e", nil, "")
		fs.BoolP("interactive", "i", false, "")
		args := strings.Split(joined, "\x00")
		out := oldSpellings(fs, args, interspersed)
		if len(out) != len(args) {
			t.Fatalf("%q became %q", args, out)
		}
		for i := range args {
			if out[i] != args[i] && out[i] != "-"+args[i] {
				t.Fatalf("%q became %q", args, out)
			}
		}
	})
}

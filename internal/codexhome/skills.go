package codexhome

import (
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Skill is one SKILL.md found under the codex home's skills directory.
type Skill struct {
	Name             string
	Description      string
	ShortDescription *string
	Path             string // the SKILL.md file
}

// Bounds of one skills scan: the reference rescans on every request too,
// and a client must not be able to make the server walk a huge tree.
const (
	maxSkillDepth = 8
	maxSkillDirs  = 4096
	maxSkillBytes = 1 << 20
)

// SkillsWarning is the reference's one warning when a SKILL.md could not be
// used (no front matter, no description, unreadable).
const SkillsWarning = "some capability metadata could not be loaded; discovery may be incomplete"

// Skills scans root (the codex home's "skills" directory) recursively,
// hidden directories included, for SKILL.md files, sorted by path. bad is
// true when some SKILL.md was left out.
func Skills(root string) (skills []Skill, bad bool) {
	dirs := 0
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if depth > maxSkillDepth || dirs >= maxSkillDirs {
			return
		}
		dirs++
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			st, err := os.Stat(p) // a link to a skill directory counts
			if err != nil {
				continue
			}
			switch {
			case st.IsDir():
				walk(p, depth+1)
			case e.Name() == "SKILL.md" && st.Mode().IsRegular():
				if sk, ok := readSkill(p); ok {
					skills = append(skills, sk)
				} else {
					bad = true
				}
			}
		}
	}
	walk(root, 0)
	sort.Slice(skills, func(i, j int) bool { return skills[i].Path < skills[j].Path })
	return skills, bad
}

func readSkill(path string) (Skill, bool) {
	f, err := os.Open(path)
	if err != nil {
		return Skill{}, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSkillBytes))
	if err != nil {
		return Skill{}, false
	}
	fm, ok := frontMatter(string(b))
	if !ok {
		return Skill{}, false
	}
	sk := Skill{Path: path, Name: oneLine(fm["name"]), Description: oneLine(fm["description"])}
	if sk.Name == "" {
		sk.Name = filepath.Base(filepath.Dir(path))
	}
	if sk.Description == "" {
		return Skill{}, false
	}
	if s, ok := fm["metadata.short-description"]; ok {
		s = oneLine(s)
		sk.ShortDescription = &s
	}
	return sk, true
}

// oneLine collapses whitespace runs to one space, as the reference shows
// multi-line descriptions.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// frontMatter reads the YAML block between the leading "---" lines: the
// subset SKILL.md files use, top-level "key: value" (plain, quoted, or a
// | or > block) and one level of nested mapping, flattened as
// "parent.key".
func frontMatter(doc string) (map[string]string, bool) {
	doc = strings.TrimPrefix(doc, "\ufeff")
	lines := strings.Split(strings.ReplaceAll(doc, "\r\n", "\n"), "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != "---" {
		return nil, false
	}
	end := -1
	for i := 1; i < len(lines); i++ {
		if strings.TrimRight(lines[i], " \t") == "---" {
			end = i
			break
		}
	}
	if end < 0 {
		return nil, false
	}
	out := map[string]string{}
	lines = lines[1:end]
	parent := ""
	plain := "" // the key whose plain scalar an indented line may continue
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		key, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if indent > 0 && plain != "" && (!ok || val != "" && val[0] != ' ') {
			// A plain scalar continued on an indented line (folded).
			out[plain] += " " + strings.TrimSpace(line)
			continue
		}
		plain = ""
		if !ok {
			return nil, false
		}
		key = strings.TrimSpace(key)
		val = strings.TrimSpace(val)
		if indent == 0 {
			parent = ""
		} else if parent == "" {
			return nil, false
		}
		full := key
		if indent > 0 {
			full = parent + "." + key
		}
		switch {
		case val == "":
			if indent == 0 {
				parent = key
			}
			continue
		case val[0] == '|' || val[0] == '>':
			var block []string
			for i+1 < len(lines) {
				next := lines[i+1]
				if strings.TrimSpace(next) != "" && len(next)-len(strings.TrimLeft(next, " ")) <= indent {
					break
				}
				block = append(block, strings.TrimSpace(next))
				i++
			}
			if val[0] == '|' {
				out[full] = strings.Join(block, "\n")
			} else {
				out[full] = strings.Join(block, " ")
			}
		case val[0] == '"':
			s, ok := unquoteDouble(val)
			if !ok {
				return nil, false
			}
			out[full] = s
		case val[0] == '\'':
			if len(val) < 2 || !strings.HasSuffix(val, "'") {
				return nil, false
			}
			out[full] = strings.ReplaceAll(val[1:len(val)-1], "''", "'")
		default:
			if j := strings.Index(val, " #"); j >= 0 {
				val = strings.TrimSpace(val[:j])
			}
			out[full] = val
			plain = full
		}
	}
	return out, true
}

func unquoteDouble(v string) (string, bool) {
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", false
	}
	v = v[1 : len(v)-1]
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(v) {
			return "", false
		}
		switch v[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '"', '\\', '/':
			b.WriteByte(v[i])
		default:
			b.WriteByte('\\')
			b.WriteByte(v[i])
		}
	}
	return b.String(), true
}

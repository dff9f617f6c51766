package policy

import (
	"bufio"
	"errors"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/execgo/exec-server/protocol"
)

// Limits of the scan that expands deny glob patterns.
const (
	// Without glob_scan_max_depth the scan has no depth limit, as the
	// reference masks matches at any depth (a depth of 32 used to leave a
	// deeper match readable): the entry cap, not the depth, is what keeps
	// a huge tree from stalling the server.
	// MaxGlobScanEntries is how many directory entries one Resolve may
	// read for its deny globs. Past it the request fails (-32603) rather
	// than run with matches left unmasked.
	MaxGlobScanEntries = 200_000
	// maxGlobAlternatives bounds brace expansion ({a,b}) per pattern.
	maxGlobAlternatives = 64
)

// globScanBudget is MaxGlobScanEntries, lowered by tests.
var globScanBudget = MaxGlobScanEntries

// ProtectedNames are the subpaths kept read-only under every writable root.
var ProtectedNames = [...]string{".git", ".agents", ".codex", ".aws"}

// MountPointMarker is in every mount point an exec-server made on the host
// for a missing protected path (hidden in every view by the mask).
const MountPointMarker = ".exec-server-sandbox-made"

// isServerMountPoint reports whether p is a directory (not a symlink)
// holding the marker: a missing protected path that a concurrent sandbox
// made its mount point.
func isServerMountPoint(p string) bool {
	fi, err := os.Lstat(p)
	if err != nil || !fi.IsDir() {
		return false
	}
	_, err = os.Lstat(path.Join(p, MountPointMarker))
	return err == nil
}

// minimalPaths are what the "minimal" special path stands for.
var minimalPaths = [...]string{"/bin", "/sbin", "/lib", "/lib64", "/usr", "/etc"}

// Resolve turns a parsed policy into the Plan of host paths it allows
// (docs/sandbox.md, "The model"). A nil policy (no sandbox parameter) gives a nil Plan.
//
// Paths: every Mount.Path is canonical, with symlinks resolved (a missing
// path's longest existing prefix is resolved and the rest appended). A
// writable root given through a symlink (an alias) is thus mounted where it
// really is, and mounts apply shallowest first in the real tree: with
// lexical paths, a deny mask under the real directory could be applied
// before, and hidden by, the bind of a deeper alias. Two exceptions keep
// their last component unresolved, as the link itself is what must not
// change: a protected path that is a symlink, and a deny glob match that
// is one. Plan.Cwd stays as the context gave it.
//
// Missing paths: an entry with missing_path_behavior "skip" is dropped
// when its path does not exist; any other missing path is kept with
// Missing set, and the kernel side skips it (the reference accepts a
// missing writable root without error and grants nothing there: observed).
// A skipped path has its parent's access, never more. A missing protected
// path is kept, masked by the kernel side.
func Resolve(p *Policy, env Env) (*Plan, error) {
	if p == nil {
		return nil, nil
	}
	plan := &Plan{Network: NetworkRestricted}
	if p.Permissions.Network == "enabled" || p.Permissions.Type == "disabled" {
		plan.Network = NetworkEnabled
	}
	if cwd := p.EffectiveCwd(); cwd != nil && !cwd.Foreign {
		plan.Cwd = cwd.Path
	}
	if p.Permissions.Type != "managed" || p.Permissions.FileSystemType != "restricted" {
		unrestricted(plan)
		maskSecrets(plan, env.Secrets)
		return plan, nil
	}
	r := resolver{policy: p, env: env, access: map[string]Access{}, budget: globScanBudget}
	if err := r.entries(); err != nil {
		return nil, err
	}
	rootAccess, hasRoot := r.access["/"]
	if hasRoot {
		plan.Root = rootAccess
	}
	plan.DenyGlobs = r.globs
	plan.FullRead = hasRoot && rootAccess != AccessNone && !r.anyDeny
	plan.FullWrite = hasRoot && rootAccess == AccessWrite && !r.anyDeny
	for _, a := range r.access {
		plan.FullWrite = plan.FullWrite && a == AccessWrite
	}
	if plan.FullWrite {
		// Nothing is narrower than "/": the same as unrestricted, also for
		// the protected subpaths (the reference runs such fs calls
		// in-process, unprotected).
		unrestricted(plan)
		maskSecrets(plan, env.Secrets)
		return plan, nil
	}
	r.protect()
	plan.Mounts = r.mounts(plan.Root)
	maskSecrets(plan, env.Secrets)
	return plan, nil
}

func unrestricted(plan *Plan) {
	plan.Root = AccessWrite
	plan.FullRead, plan.FullWrite = true, true
	plan.Mounts, plan.DenyGlobs = nil, nil
}

type resolver struct {
	policy *Policy
	env    Env
	// access: canonical path -> combined access of the entries naming it.
	access  map[string]Access
	info    map[string]Mount // canonical path -> Missing, Dir
	prot    map[string]Mount // protected paths
	globs   []string
	anyDeny bool
	evals   map[string]evalResult
	budget  int // directory entries the glob scan may still read (from globScanBudget)
}

// combine is the access of two entries naming the same path: deny wins,
// then write, then read.
func combine(a, b Access) Access {
	if a == AccessNone || b == AccessNone {
		return AccessNone
	}
	return max(a, b)
}

func (r *resolver) add(canon string, a Access, m Mount) {
	if old, ok := r.access[canon]; ok {
		a = combine(old, a)
	}
	r.access[canon] = a
	if r.info == nil {
		r.info = map[string]Mount{}
	}
	if old, ok := r.info[canon]; ok && !old.Missing {
		return
	}
	r.info[canon] = m
}

// entries resolves every entry into r.access.
func (r *resolver) entries() error {
	p := r.policy
	for _, e := range p.Permissions.Entries {
		var paths []string
		switch e.Path.Type {
		case "path":
			paths = []string{e.Path.Path}
		case "glob_pattern":
			if e.Access != AccessNone {
				// The reference grants nothing through a read or write
				// glob (observed): only deny globs are expanded.
				continue
			}
			if err := r.denyGlob(e.Path.Pattern); err != nil {
				return err
			}
			r.anyDeny = true
			continue
		case "special":
			var err error
			if paths, err = r.special(e); err != nil {
				return err
			}
		}
		for _, lex := range paths {
			canon, exists := r.canonical(lex)
			if !exists && e.SkipMissing {
				continue
			}
			m := Mount{Path: canon, Missing: !exists, Dir: !exists || isDir(canon)}
			r.add(canon, e.Access, m)
			if e.Access == AccessNone {
				r.anyDeny = true
				if !exists {
					// The reference masks a missing deny path (observed:
					// creating it failed, EROFS); here it is a pattern
					// too, so that fs operations refuse to create it.
					r.globs = append(r.globs, escapeGlob(canon))
				}
			}
		}
	}
	return nil
}

// special resolves a special path into lexical host paths.
func (r *resolver) special(e Entry) ([]string, error) {
	p := r.policy
	switch e.Path.Kind {
	case "root":
		return []string{"/"}, nil
	case "minimal":
		var out []string
		for _, m := range minimalPaths {
			if _, err := os.Lstat(m); err == nil {
				out = append(out, m)
			}
		}
		return out, nil
	case "slash_tmp":
		return []string{"/tmp"}, nil
	case "tmpdir":
		// A documented fix over the reference, whose helper looked TMPDIR
		// up in an emptied environment and so granted nothing.
		if p.TemporaryDirectories != nil {
			var out []string
			for _, t := range p.TemporaryDirectories {
				if t.Foreign {
					return nil, protocol.InvalidRequest("file system sandbox temporary directory is not native to this exec-server host: '%s' is invalid on 'linux'", t.URI)
				}
				out = append(out, t.Path)
			}
			return out, nil
		}
		if t := filepath.Clean(r.env.TempDir); r.env.TempDir != "" && filepath.IsAbs(t) {
			return []string{t}, nil
		}
		return nil, nil
	case "project_roots", "current_working_directory":
		// Both resolve to the workspace roots (observed: with a cwd and
		// no roots the entry granted nothing).
		var out []string
		for _, root := range p.EffectiveRoots() {
			if root.Foreign {
				return nil, protocol.InvalidRequest("file system sandbox workspace root is not native to this exec-server host: '%s' is invalid on 'linux'", root.URI)
			}
			j := path.Join(root.Path, e.Path.Subpath) // an absolute subpath is relative too
			if !Within(j, root.Path) && e.Access != AccessNone {
				// A subpath climbing out of its root never grants
				// access there (the reference granted nothing for "..");
				// a deny entry still denies.
				continue
			}
			out = append(out, j)
		}
		return out, nil
	}
	return nil, nil // unknown kinds: ignored, as the reference does
}

// Within reports whether p is dir or below it (both clean and absolute).
func Within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// canonical resolves the symlinks of p (clean and absolute); for a missing
// p, those of its longest existing prefix, with the rest appended.
func canonical(p string) (string, bool) { return (&resolver{}).canonical(p) }

func (r *resolver) canonical(p string) (string, bool) {
	if c, ok := r.eval(p); ok {
		return c, true
	}
	dir, rest := p, ""
	for dir != "/" {
		rest = path.Join(path.Base(dir), rest)
		dir = path.Dir(dir)
		if c, ok := r.eval(dir); ok {
			return path.Join(c, rest), false
		}
	}
	return p, false
}

// eval is filepath.EvalSymlinks, remembered for the resolver's lifetime
// (entries share their prefixes: each costs an lstat per component).
func (r *resolver) eval(p string) (string, bool) {
	if c, ok := r.evals[p]; ok {
		return c.path, c.ok
	}
	c, err := filepath.EvalSymlinks(p)
	if r.evals == nil {
		r.evals = map[string]evalResult{}
	}
	r.evals[p] = evalResult{c, err == nil}
	return c, err == nil
}

type evalResult struct {
	path string
	ok   bool
}

// canonicalParent resolves the symlinks of p's parent only: the path of p
// itself, when p may be a symlink that must be handled as such.
func (r *resolver) canonicalParent(p string) string {
	if p == "/" {
		return p
	}
	dir, _ := r.canonical(path.Dir(p))
	return path.Join(dir, path.Base(p))
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// lstatMount describes p without following a final symlink.
func lstatMount(p string) Mount {
	fi, err := os.Lstat(p)
	if err != nil {
		return Mount{Path: p, Missing: true, Dir: true}
	}
	return Mount{Path: p, Dir: fi.IsDir()}
}

// effective is the access the entries give p (canonical): that of the
// nearest entry at or above it, none when there is none. An entry on a
// missing path is passed over: the kernel side skips its mount, so its
// parent's access is what the path would really get.
func (r *resolver) effective(p string) Access {
	for {
		if a, ok := r.access[p]; ok && !r.info[p].Missing {
			return a
		}
		if p == "/" {
			return AccessNone
		}
		p = path.Dir(p)
	}
}

// protect adds the protected subpaths of every writable root. A protected
// path only ever takes write away: one that the entries already make
// read-only or deny, or a gitdir outside the writable roots, is left as it
// is (making it readable there would widen the view).
func (r *resolver) protect() {
	r.prot = map[string]Mount{}
	addIfWritable := func(m Mount) {
		if r.effective(m.Path) == AccessWrite {
			m.Access, m.Protected = AccessRead, true
			r.prot[m.Path] = m
		}
	}
	for w, a := range r.access {
		if a != AccessWrite || r.info[w].Missing {
			continue
		}
		for _, name := range ProtectedNames {
			p := path.Join(w, name)
			fi, err := os.Lstat(p)
			if err != nil || isServerMountPoint(p) {
				// A concurrent sandbox's mount point is the missing path
				// it stands for: protected (this sandbox holds and masks
				// it, or makes it again if it goes first), never an
				// ordinary bind of a directory about to be removed (its
				// rmdir would unmount the bind here and let the path be
				// created through the writable root). An entry naming it
				// (codex's read entry for .git) is passed over as missing.
				if info, ok := r.info[p]; ok && err == nil {
					info.Missing = true
					r.info[p] = info
				}
				addIfWritable(Mount{Path: p, Missing: true, Dir: true})
				continue
			}
			addIfWritable(Mount{Path: p, Dir: fi.IsDir()})
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				// The link is masked itself; what it points to, when
				// writable, is protected too.
				if t, ok := r.canonical(p); ok {
					addIfWritable(Mount{Path: t, Dir: isDir(t)})
				}
			case name == ".git" && fi.Mode().IsRegular():
				if t := gitdirTarget(p); t != "" {
					c, exists := r.canonical(t)
					addIfWritable(Mount{Path: c, Missing: !exists, Dir: true})
				}
			}
		}
	}
}

// gitdirTarget reads a gitdir pointer file ("gitdir: X"): X, made absolute
// against the file's directory, or "" when the file is not one.
func gitdirTarget(file string) string {
	// Non-blocking, and a regular file once open: the sandboxed process
	// may swap .git for a FIFO between the lstat and the open, and a
	// blocked open would stall the server.
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 512), 4096)
	if !sc.Scan() {
		return ""
	}
	t, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "gitdir:")
	t = strings.TrimSpace(t)
	if !ok || t == "" || strings.IndexByte(t, 0) >= 0 {
		return ""
	}
	if !path.IsAbs(t) {
		t = path.Join(path.Dir(file), t)
	}
	return path.Clean(t)
}

// mounts builds the sorted, minimal mount list.
func (r *resolver) mounts(root Access) []Mount {
	all := make([]Mount, 0, len(r.access)+len(r.prot))
	for p, a := range r.access {
		if p == "/" {
			continue
		}
		if _, ok := r.prot[p]; ok {
			continue // protected wins at its own path
		}
		m := r.info[p]
		m.Path, m.Access = p, a
		all = append(all, m)
	}
	for _, m := range r.prot {
		all = append(all, m)
	}
	SortMounts(all)
	// Drop what changes nothing: a mount whose access is what its nearest
	// applied ancestor (or the root) already gives. A missing mount is
	// skipped by the kernel side, so it is never an ancestor.
	kept := all[:0]
	given := map[string]Access{}
	for _, m := range all {
		parent := root
		for d := path.Dir(m.Path); ; d = path.Dir(d) {
			if a, ok := given[d]; ok {
				parent = a
				break
			}
			if d == "/" {
				break
			}
		}
		if !m.Protected && (m.Access == parent || (m.Missing && m.Access != AccessNone)) {
			continue
		}
		if !m.Missing || m.Protected {
			given[m.Path] = m.Access
		}
		kept = append(kept, m)
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}

// depth is the number of components of a clean absolute path.
func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// SortMounts puts ms in the order a Plan keeps its mounts: shallowest first,
// then by path (the kernel side mounts them in that order).
func SortMounts(ms []Mount) {
	sort.SliceStable(ms, func(i, j int) bool {
		di, dj := depth(ms[i].Path), depth(ms[j].Path)
		if di != dj {
			return di < dj
		}
		return ms[i].Path < ms[j].Path
	})
}

// AccessAt is the access p's view gives the host path p (clean, absolute,
// canonical): that of the deepest applied mount at or above it, else the
// root's; none when a deny glob matches p or one of its parents.
func (p *Plan) AccessAt(host string) Access {
	if p.DeniedByGlob(host) {
		return AccessNone
	}
	best, bestDepth := p.Root, -1
	for _, m := range p.Mounts {
		if m.Missing && !m.Protected {
			continue
		}
		if Within(host, m.Path) && depth(m.Path) > bestDepth {
			best, bestDepth = m.Access, depth(m.Path)
		}
	}
	return best
}

// DeniedByGlob reports whether host (clean, absolute) or one of its parent
// directories matches a deny glob: fs operations refuse such a path even
// when it is new (the reference masks only what existed when the sandbox
// was built).
func (p *Plan) DeniedByGlob(host string) bool {
	if len(p.DenyGlobs) == 0 {
		return false
	}
	comps := SplitPath(host)
	for n := len(comps); n >= 1; n-- {
		for _, g := range p.DenyGlobs {
			if MatchGlob(g, comps[:n]) {
				return true
			}
		}
	}
	return false
}

// MatchGlob reports whether the path components s match the absolute
// pattern g: path.Match per component, "**" for any number of components
// (at least one when it ends the pattern).
func MatchGlob(g string, s []string) bool {
	return matchComps(SplitPath(g), s)
}

// SplitPath returns the components of the absolute path p (none for "/").
func SplitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// matchComps matches components by dynamic programming (linear in
// len(pat)*len(s), whatever the number of "**").
func matchComps(pat, s []string) bool {
	// ok[j]: pat[i:] matches s[j:], computed from the last i down.
	ok := make([]bool, len(s)+1)
	ok[len(s)] = true // the empty pattern matches only the empty rest
	for i := len(pat) - 1; i >= 0; i-- {
		next := make([]bool, len(s)+1)
		if pat[i] == "**" {
			last := i == len(pat)-1
			// next[j] = ok[j] (zero components, unless last) || next[j+1]
			for j := len(s); j >= 0; j-- {
				next[j] = (!last && ok[j]) || (j < len(s) && (next[j+1] || (last && j+1 == len(s))))
			}
		} else {
			for j := 0; j < len(s); j++ {
				if m, _ := path.Match(pat[i], s[j]); m {
					next[j] = ok[j+1]
				}
			}
		}
		ok = next
	}
	return ok[0]
}

// denyGlob expands one deny pattern: its absolute alternatives go to
// DenyGlobs, each existing match becomes a none entry.
func (r *resolver) denyGlob(pattern string) error {
	abs := pattern
	if !strings.HasPrefix(abs, "/") {
		cwd := r.policy.EffectiveCwd()
		if cwd == nil || cwd.Foreign {
			return protocol.InvalidParams("file system sandbox context with dynamic permissions requires cwd")
		}
		abs = cwd.Path + "/" + abs
	}
	alts, err := expandBraces(abs)
	if err != nil {
		return protocol.InvalidParams("invalid glob pattern `%s`: %v", pattern, err)
	}
	for _, alt := range alts {
		comps := cleanComps(SplitPath(alt))
		for _, c := range comps {
			if _, err := path.Match(c, ""); err != nil {
				return protocol.InvalidParams("invalid glob pattern `%s`: %v", pattern, err)
			}
		}
		if err := r.scan(comps); err != nil {
			return err
		}
	}
	return nil
}

// cleanComps resolves "." and ".." lexically (a ".." never rises above
// "/") and collapses repeated "**".
func cleanComps(comps []string) []string {
	out := comps[:0:0]
	for _, c := range comps {
		switch {
		case c == "" || c == ".":
		case c == "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case c == "**" && len(out) > 0 && out[len(out)-1] == "**":
		default:
			out = append(out, c)
		}
	}
	return out
}

// escapeGlob makes a path a pattern that matches only itself.
func escapeGlob(p string) string {
	var b strings.Builder
	for _, c := range []byte(p) {
		if strings.IndexByte(`*?[\`, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

// HasMeta reports whether the path component c holds a glob metacharacter.
func HasMeta(c string) bool { return strings.ContainsAny(c, `*?[\`) }

// scan records the pattern comps in DenyGlobs (also with its fixed prefix
// canonical, when that differs: fs operations see canonical paths) and
// finds its existing matches.
func (r *resolver) scan(comps []string) error {
	fixed := 0
	for fixed < len(comps) && !HasMeta(comps[fixed]) {
		fixed++
	}
	lexBase := "/" + strings.Join(comps[:fixed], "/")
	base, _ := r.canonical(lexBase)
	rest := comps[fixed:]
	g := path.Join(append([]string{lexBase}, rest...)...)
	r.globs = append(r.globs, g)
	if base != lexBase {
		r.globs = append(r.globs, path.Join(append([]string{base}, rest...)...))
	}
	if fixed == len(comps) {
		// A literal pattern is a path (the reference refuses to expand
		// one; masking it is the evident intent).
		r.addMatch(base)
		return nil
	}
	maxDepth := int(min(r.policy.Permissions.GlobScanMaxDepth, 1<<16))
	if maxDepth == 0 {
		maxDepth = math.MaxInt // any depth: MaxGlobScanEntries bounds the work
	}
	// Components before the first "**" prune the walk.
	prefix := rest
	for i, c := range rest {
		if c == "**" {
			prefix = rest[:i]
			break
		}
	}
	unbounded := len(prefix) < len(rest)
	var walk func(dir string, rel []string) error
	walk = func(dir string, rel []string) error {
		if len(rel) >= maxDepth {
			return nil
		}
		if !unbounded && len(rel) >= len(rest) {
			return nil
		}
		if i := len(rel) - 1; i >= 0 && i < len(prefix) {
			if m, _ := path.Match(prefix[i], rel[i]); !m {
				return nil
			}
		}
		ents, err := os.ReadDir(dir)
		if errors.Is(err, syscall.ENAMETOOLONG) {
			// Deeper than a path can name: its matches could be neither
			// found nor masked. Fail rather than leave them readable.
			return protocol.Internal("sandbox deny glob `%s`: %s is too deep to scan; use glob_scan_max_depth", g, dir[:min(len(dir), 64)]+"…")
		}
		if err != nil {
			return nil // unreadable or gone: nothing to mask there
		}
		if r.budget -= len(ents); r.budget < 0 {
			return protocol.Internal("sandbox deny glob `%s`: more than %d entries to scan; use a narrower pattern or glob_scan_max_depth", g, globScanBudget)
		}
		for _, de := range ents {
			sub := append(rel[:len(rel):len(rel)], de.Name())
			p := path.Join(dir, de.Name())
			if matchComps(rest, sub) {
				r.addMatch(p)
				continue // masked whole: nothing below it to find
			}
			if de.IsDir() && de.Type()&fs.ModeSymlink == 0 {
				if err := walk(p, sub); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(base, nil)
}

// addMatch masks an existing match (a symlink is masked itself).
func (r *resolver) addMatch(p string) {
	c := r.canonicalParent(p)
	m := lstatMount(c)
	if m.Missing {
		return
	}
	r.add(c, AccessNone, m)
}

var errBraces = errors.New("unbalanced braces")

// expandBraces expands {a,b} alternatives (nested too), at most
// maxGlobAlternatives of them.
func expandBraces(p string) ([]string, error) {
	open := -1
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			open = i
		case '}':
			return nil, errBraces
		}
		if open >= 0 {
			break
		}
	}
	if open < 0 {
		return []string{p}, nil
	}
	level, start := 0, open+1
	var alts []string
	for i := open; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			level++
		case '}':
			level--
			if level == 0 {
				alts = append(alts, p[start:i])
				var out []string
				for _, a := range alts {
					sub, err := expandBraces(p[:open] + a + p[i+1:])
					if err != nil {
						return nil, err
					}
					out = append(out, sub...)
					if len(out) > maxGlobAlternatives {
						return nil, errors.New("too many {} alternatives")
					}
				}
				return out, nil
			}
		case ',':
			if level == 1 {
				alts = append(alts, p[start:i])
				start = i + 1
			}
		}
	}
	return nil, errBraces
}

package netproxy

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/execgo/exec-server/protocol"
)

// Credential masking (the reference's credential broker): secrets in a
// command's environment are replaced by look-alike dummies before it
// starts; the proxy puts the real value back, in the request headers the
// provider authenticates with, only on requests to the destinations the
// credential is bound to (intercepting TLS there with the executor's CA).
// Anywhere else the dummy goes out as it is.

// Variables the command gets with masking on (names as the reference).
const (
	BrokerActiveVar        = "CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE"
	BrokeredCredentialsVar = "CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS"
)

// ProviderConfig is one custom provider, exactly as networkProxy.proxy's
// credentialProviders carries it: the wire shape is its only home, so
// what a client sends is what CompileProviders checks. Auth is one of the
// Auth* methods below.
type ProviderConfig = protocol.CredentialProviderConfig

// Auth methods.
const (
	AuthBearer = "bearer"
	AuthToken  = "token"
	AuthBasic  = "basic"
	AuthHeader = "header"
)

// Limits, as the reference's configured providers.
const (
	maxPatternBytes = 2048
	maxRepeat       = 64
	dummyAttempts   = 64
	maxDummyBytes   = 2048
)

// provider is a built-in or compiled custom provider.
type provider struct {
	name     string
	env      []string
	builtin  string           // "github", "openai", or "" for a custom one
	patterns []*regexp.Regexp // custom: whole-value patterns
	parsed   []*syntax.Regexp
	dests    []destination
	// destFromEnv names a variable holding one more destination.
	destFromEnv string
	auth        []string
	header      string // canonical, AuthHeader only
	prefix      string
	// bind, for a built-in, is its destinations given the environment
	// (nil: not brokered).
	bind func(env map[string]string) []destination
}

// destination is where a credential may be sent: scheme, host (or a
// subdomain wildcard), port and path prefix.
type destination struct {
	https    bool
	host     string
	wildcard bool // any subdomain of host (not host itself)
	suffix   bool // host and any subdomain (built-in *.ghe.com style)
	port     uint16
	path     string // "/" or a prefix
}

func (d destination) matchHost(host string, port uint16) bool {
	if d.port != port {
		return false
	}
	switch {
	case d.wildcard:
		return strings.HasSuffix(host, "."+d.host)
	case d.suffix:
		return host == d.host || strings.HasSuffix(host, "."+d.host)
	}
	return host == d.host
}

// matchPath: a prefix ending in "/" matches below it; another matches
// itself or below it as a directory. Paths with dot segments or encoded
// separators never match (they could be normalised elsewhere into
// another resource).
func (d destination) matchPath(p string) bool {
	if !safePath(p) {
		return false
	}
	if d.path == "/" || p == d.path {
		return true
	}
	rest, ok := strings.CutPrefix(p, d.path)
	return ok && (strings.HasSuffix(d.path, "/") || strings.HasPrefix(rest, "/"))
}

func safePath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return false
	}
	l := strings.ToLower(p)
	if strings.Contains(l, "%2f") || strings.Contains(l, "%5c") || strings.Contains(l, "%2e") {
		return false
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// parseDestination reads a destination as the reference: a URL prefix
// ("https://host[:port][/path]"), or a bare host (HTTPS, or HTTP for a
// loopback host); "*." makes it every subdomain. Plain HTTP is allowed
// only to loopback (a secret in clear text crosses no network).
func parseDestination(v string) (destination, error) {
	v = strings.TrimSpace(v)
	scheme, rest, explicit := strings.Cut(v, "://")
	if !explicit {
		scheme, rest = "", v
	}
	wildcard := false
	if r, ok := strings.CutPrefix(rest, "*."); ok {
		wildcard, rest = true, "wildcard."+r
	}
	u, err := url.Parse("https://" + rest)
	if err != nil {
		return destination{}, err
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return destination{}, errors.New("a credential destination cannot include user information, a query or a fragment")
	}
	host := NormalizeHost(u.Hostname())
	if wildcard {
		host = strings.TrimPrefix(host, "wildcard.")
	}
	if host == "" || strings.ContainsAny(host, "*/?[]") {
		return destination{}, errors.New("a credential destination needs an exact host name or a *. wildcard")
	}
	loopback := !wildcard && isLoopbackHost(host)
	d := destination{host: host, wildcard: wildcard, path: u.EscapedPath()}
	switch {
	case scheme == "" && loopback, strings.EqualFold(scheme, "http") && loopback:
		d.port = 80
	case scheme == "" || strings.EqualFold(scheme, "https"):
		d.https, d.port = true, 443
	default:
		return destination{}, errors.New("a credential destination must use HTTPS unless it is a loopback host over HTTP")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return destination{}, fmt.Errorf("bad port %q", p)
		}
		d.port = uint16(n)
	}
	if d.path == "" {
		d.path = "/"
	}
	if !safePath(d.path) {
		return destination{}, errors.New("a credential destination's path has dot segments or encoded separators")
	}
	return d, nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// Built-in providers (the reference's: GitHub cloud, GitHub Enterprise
// bound to GH_HOST, the OpenAI API key).
var (
	githubCloud = []destination{
		{https: true, host: "github.com", port: 443, path: "/"},
		{https: true, host: "api.github.com", port: 443, path: "/"},
		{https: true, host: "uploads.github.com", port: 443, path: "/"},
		{https: true, host: "ghe.com", wildcard: true, port: 443, path: "/"},
	}
	builtins = []*provider{
		{name: "github", builtin: "github", env: []string{"GH_TOKEN", "GITHUB_TOKEN"}, auth: []string{AuthBearer},
			bind: func(map[string]string) []destination { return githubCloud }},
		{name: "github-enterprise", builtin: "github", env: []string{"GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN"}, auth: []string{AuthBearer},
			bind: func(env map[string]string) []destination {
				h := NormalizeHost(env["GH_HOST"])
				if h == "" || slices.ContainsFunc(githubCloud, func(d destination) bool { return d.matchHost(h, 443) }) {
					return nil
				}
				return []destination{{https: true, host: h, port: 443, path: "/"}}
			}},
		{name: "openai", builtin: "openai", env: []string{"OPENAI_API_KEY"}, auth: []string{AuthBearer},
			bind: func(map[string]string) []destination {
				return []destination{{https: true, host: "api.openai.com", port: 443, path: "/"}}
			}},
	}
)

func isBuiltinKey(k string) bool {
	for _, b := range builtins {
		if slices.Contains(b.env, k) {
			return true
		}
	}
	return k == "GH_HOST"
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// compileProvider checks and compiles a custom provider (the reference's
// rules; an invalid one refuses the start: its variables could not be
// masked).
func compileProvider(name string, c ProviderConfig) (*provider, error) {
	fail := func(format string, args ...any) (*provider, error) {
		return nil, fmt.Errorf("credential provider %q: "+format, append([]any{name}, args...)...)
	}
	switch {
	case name == "":
		return nil, errors.New("a credential provider needs a name")
	case len(c.Env) == 0:
		return fail("has no environment keys")
	case len(c.Patterns) == 0:
		return fail("has no credential patterns")
	case len(c.URLPrefixes) == 0 && c.URLPrefixFromEnv == "":
		return fail("has no destination URL prefixes")
	}
	for _, k := range c.Env {
		if !envKeyRE.MatchString(k) {
			return fail("invalid environment key %q", k)
		}
		if isBuiltinKey(k) {
			return fail("environment key %q overlaps a built-in credential source", k)
		}
	}
	if k := c.URLPrefixFromEnv; k != "" && (!envKeyRE.MatchString(k) || slices.Contains(c.Env, k)) {
		return fail("invalid host environment key %q", k)
	}
	p := &provider{name: name, env: slices.Clone(c.Env), destFromEnv: c.URLPrefixFromEnv, prefix: c.Prefix}
	for _, u := range c.URLPrefixes {
		d, err := parseDestination(u)
		if err != nil {
			return fail("destination %q: %v", u, err)
		}
		p.dests = append(p.dests, d)
	}
	p.auth = slices.Clone(c.Auth)
	if len(p.auth) == 0 {
		p.auth = []string{AuthBearer}
	}
	for _, a := range p.auth {
		switch a {
		case AuthBearer, AuthToken, AuthBasic, AuthHeader:
		default:
			return fail("unknown auth method %q", a)
		}
	}
	if slices.Contains(p.auth, AuthHeader) != (c.Header != "") {
		return fail("needs a header name exactly when it uses header authentication")
	}
	if c.Prefix != "" && c.Header == "" {
		return fail("needs header authentication to use a header prefix")
	}
	if c.Header != "" {
		if !validHeaderName(c.Header) {
			return fail("invalid header %q", c.Header)
		}
		p.header = http.CanonicalHeaderKey(c.Header)
	}
	for _, pat := range c.Patterns {
		if len(pat) > maxPatternBytes {
			return fail("a credential pattern exceeds %d bytes", maxPatternBytes)
		}
		re, err := regexp.Compile(`^(?:` + pat + `)$`)
		if err != nil {
			return fail("pattern %q: %v", pat, err)
		}
		if re.MatchString("") {
			return fail("pattern %q matches an empty value", pat)
		}
		parsed, err := syntax.Parse(pat, syntax.Perl)
		if err != nil {
			return fail("pattern %q: %v", pat, err)
		}
		p.patterns = append(p.patterns, re)
		p.parsed = append(p.parsed, parsed.Simplify())
		if _, ok := p.generate(len(p.patterns)-1, ""); !ok {
			return fail("pattern %q cannot generate a matching dummy", pat)
		}
	}
	return p, nil
}

func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for _, r := range h {
		if r > 0x7e || r <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r) {
			return false
		}
	}
	return true
}

// generate makes a value matching pattern i, other than real.
func (p *provider) generate(i int, real string) (string, bool) {
	for range dummyAttempts {
		var b strings.Builder
		if !genRegexp(&b, p.parsed[i]) {
			return "", false
		}
		s := b.String()
		if s != real && len(s) <= maxDummyBytes && !strings.ContainsRune(s, 0) && utf8.ValidString(s) && p.patterns[i].MatchString(s) {
			return s, true
		}
	}
	return "", false
}

// genRegexp writes a random string of re's language (printable ASCII
// preferred in classes); false for what it cannot generate.
func genRegexp(b *strings.Builder, re *syntax.Regexp) bool {
	if b.Len() > maxDummyBytes {
		return false
	}
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 && randInt(2) == 0 {
				r = foldOther(r)
			}
			b.WriteRune(r)
		}
		return true
	case syntax.OpCharClass:
		r, ok := pickClass(re.Rune)
		if ok {
			b.WriteRune(r)
		}
		return ok
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		b.WriteRune(rune('a' + randInt(26)))
		return true
	case syntax.OpCapture:
		return genRegexp(b, re.Sub[0])
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if !genRegexp(b, s) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		return genRegexp(b, re.Sub[randInt(len(re.Sub))])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := 0, maxRepeat
		switch re.Op {
		case syntax.OpPlus:
			lo = 1
		case syntax.OpQuest:
			hi = 1
		case syntax.OpRepeat:
			lo, hi = re.Min, re.Max
			if hi < 0 {
				hi = max(lo, maxRepeat)
			}
		}
		if lo > maxRepeat*4 {
			return false
		}
		// Open-ended repeats take their lower bound or a few more, so
		// that a dummy is of a credential's usual size.
		if re.Op == syntax.OpStar || re.Op == syntax.OpPlus || re.Max < 0 {
			hi = lo + min(hi-lo, 16)
		}
		n := lo + randInt(hi-lo+1)
		for range n {
			if !genRegexp(b, re.Sub[0]) {
				return false
			}
		}
		return true
	}
	return false
}

func foldOther(r rune) rune {
	switch {
	case r >= 'a' && r <= 'z':
		return r - 32
	case r >= 'A' && r <= 'Z':
		return r + 32
	}
	return r
}

// pickClass picks a rune from a class (pairs of lo, hi), printable ASCII
// when the class has any.
func pickClass(ranges []rune) (rune, bool) {
	var ascii []rune
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := max(ranges[i], '!'), min(ranges[i+1], '~')
		if lo <= hi {
			ascii = append(ascii, lo, hi)
		}
	}
	if len(ascii) == 0 {
		ascii = ranges
	}
	total := 0
	for i := 0; i+1 < len(ascii); i += 2 {
		total += int(ascii[i+1]-ascii[i]) + 1
	}
	if total <= 0 {
		return 0, false
	}
	n := randInt(total)
	for i := 0; i+1 < len(ascii); i += 2 {
		w := int(ascii[i+1]-ascii[i]) + 1
		if n < w {
			return ascii[i] + rune(n), true
		}
		n -= w
	}
	return 0, false
}

func randInt(n int) int {
	if n <= 1 {
		return 0
	}
	v, err := rand.Int(rand.Reader, big.NewInt(int64(n)))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return int(v.Int64())
}

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// builtinDummy is the reference 0.171's shape (measured): the token's
// prefix, "masked", then random letters and digits to the real value's
// length (at least 40 for GitHub, 51 for OpenAI).
func builtinDummy(kind, real string) string {
	var prefix string
	minLen := 40
	switch kind {
	case "github":
		prefix = "ghp_"
		for _, p := range []string{"github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_"} {
			if strings.HasPrefix(real, p) {
				prefix = p
				break
			}
		}
	default:
		minLen = 51
		prefix = "sk-"
		if rest, ok := strings.CutPrefix(real, "sk-"); ok {
			if i := strings.IndexByte(rest, '-'); i >= 0 {
				prefix = real[:3+i+1]
			}
		}
	}
	prefix += "masked"
	n := max(len(real), minLen, len(prefix)+16)
	b := []byte(prefix)
	for len(b) < n {
		b = append(b, alnum[randInt(len(alnum))])
	}
	return string(b)
}

// Providers is a launch's set of providers: the built-ins and the
// request's custom ones, compiled.
type Providers struct{ list []*provider }

// CompileProviders checks the custom providers; any invalid one is an
// error (the start is refused: its variables could not be masked).
func CompileProviders(custom map[string]ProviderConfig) (*Providers, error) {
	ps := &Providers{list: slices.Clone(builtins)}
	names := make([]string, 0, len(custom))
	for n := range custom {
		names = append(names, n)
	}
	slices.Sort(names)
	seen := map[string]string{}
	for _, n := range names {
		p, err := compileProvider(n, custom[n])
		if err != nil {
			return nil, err
		}
		for _, k := range p.env {
			if o, dup := seen[k]; dup {
				return nil, fmt.Errorf("credential providers %q and %q both name %s", o, n, k)
			}
			seen[k] = n
		}
		ps.list = append(ps.list, p)
	}
	return ps, nil
}

// Credential is one masked variable.
type Credential struct {
	Var   string
	real  string
	Dummy string
	p     *provider
	dests []destination
}

// Credentials are a command's masked variables, what its proxy restores.
type Credentials struct {
	list []*Credential
}

// Vars names the masked variables (for logs; never the values).
func (cs *Credentials) Vars() []string {
	var v []string
	for _, c := range cs.list {
		v = append(v, c.Var)
	}
	return v
}

// Mask replaces, in env (NAME=VALUE entries), every credential a provider
// binds to a destination by a dummy, and sets the broker's two variables.
// A value a provider names but cannot mask (empty destination binding
// aside) is removed: it never reaches the command. It returns the new
// environment and what the proxy needs to restore the values; removed
// names the variables taken out.
func (ps *Providers) Mask(env []string) (out []string, creds *Credentials, removed []string) {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	creds = &Credentials{}
	masked := map[string]string{}
	drop := map[string]bool{}
	for _, p := range ps.list {
		var dests []destination
		if p.bind != nil {
			dests = p.bind(m)
		} else {
			dests = slices.Clone(p.dests)
			if p.destFromEnv != "" {
				if d, err := parseDestination(m[p.destFromEnv]); err == nil && m[p.destFromEnv] != "" && !d.wildcard {
					dests = append(dests, d)
				}
			}
		}
		if len(dests) == 0 {
			continue // not brokered, as the reference (e.g. no GH_HOST)
		}
		for _, k := range p.env {
			v, ok := m[k]
			if !ok || v == "" {
				continue
			}
			dummy, ok := p.dummy(strings.TrimSpace(v))
			if !ok {
				drop[k] = true
				continue
			}
			masked[k] = dummy
			creds.list = append(creds.list, &Credential{Var: k, real: strings.TrimSpace(v), Dummy: dummy, p: p, dests: dests})
		}
	}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == BrokerActiveVar || k == BrokeredCredentialsVar:
		case drop[k]:
			removed = append(removed, k)
		case masked[k] != "":
			out = append(out, k+"="+masked[k])
		default:
			out = append(out, kv)
		}
	}
	// The reference's marker: ["@alias:NAME", dummy] and [NAME, dummy]
	// per masked variable, sorted.
	var marker [][2]string
	for _, c := range creds.list {
		marker = append(marker, [2]string{"@alias:" + c.Var, c.Dummy}, [2]string{c.Var, c.Dummy})
	}
	slices.SortFunc(marker, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	if marker == nil {
		marker = [][2]string{}
	}
	mj, _ := json.Marshal(marker)
	out = append(out, BrokerActiveVar+"=1", BrokeredCredentialsVar+"="+string(mj))
	return out, creds, removed
}

// dummy returns v's dummy; false when v cannot be masked (a custom
// provider whose patterns v does not match whole, a value that is not a
// valid header value).
func (p *provider) dummy(v string) (string, bool) {
	if v == "" || !validHeaderValue(v) {
		return "", false
	}
	if p.builtin != "" {
		return builtinDummy(p.builtin, v), true
	}
	for i, re := range p.patterns {
		if re.MatchString(v) {
			return p.generate(i, v)
		}
	}
	return "", false
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// Intercepts reports whether a tunnel to host:port must be intercepted:
// a credential is bound to it over HTTPS.
func (cs *Credentials) Intercepts(host string, port uint16) bool {
	if cs == nil {
		return false
	}
	host = NormalizeHost(host)
	for _, c := range cs.list {
		for _, d := range c.dests {
			if d.https && d.matchHost(host, port) {
				return true
			}
		}
	}
	return false
}

// Restore puts the real values back into h, for a request to
// scheme://host:port with the raw path rawPath: in each header the
// credential's provider authenticates with, where the dummy appears
// (inside a Basic pair too), and only when the credential is bound to
// that destination. It returns the variables restored.
func (cs *Credentials) Restore(https bool, host string, port uint16, rawPath string, h http.Header) []string {
	if cs == nil {
		return nil
	}
	host = NormalizeHost(host)
	var done []string
	for _, c := range cs.list {
		if !slices.ContainsFunc(c.dests, func(d destination) bool {
			return d.https == https && d.matchHost(host, port) && d.matchPath(rawPath)
		}) {
			continue
		}
		restored := false
		for _, name := range c.p.headers() {
			vals := h.Values(name)
			for i, v := range vals {
				if nv, ok := c.translate(name, v); ok {
					vals[i], restored = nv, true
				}
			}
		}
		if restored {
			done = append(done, c.Var)
		}
	}
	return done
}

func (p *provider) headers() []string {
	var hs []string
	for _, a := range p.auth {
		if a == AuthHeader {
			hs = append(hs, p.header)
		} else if !slices.Contains(hs, "Authorization") {
			hs = append(hs, "Authorization")
		}
	}
	return hs
}

// translate replaces the dummy by the real value in one header value.
func (c *Credential) translate(name, v string) (string, bool) {
	if strings.Contains(v, c.Dummy) {
		return strings.ReplaceAll(v, c.Dummy, c.real), true
	}
	if name != "Authorization" {
		return v, false
	}
	scheme, enc, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return v, false
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil || !strings.Contains(string(dec), c.Dummy) {
		return v, false
	}
	return scheme + " " + base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(string(dec), c.Dummy, c.real))), true
}

// redactions are the real values and what replaces them in a response
// (the dummy cut or padded to the real value's length, so that a body's
// length does not change): an upstream that echoes a header must not
// show the command its secret.
func (cs *Credentials) redactions() [][2]string {
	if cs == nil {
		return nil
	}
	var r [][2]string
	for _, c := range cs.list {
		d := c.Dummy
		for len(d) < len(c.real) {
			d += "x"
		}
		r = append(r, [2]string{c.real, d[:len(c.real)]})
	}
	return r
}

// hostPort splits a request's host for Restore.
func hostPort(hostport string, def uint16) (string, uint16) {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return NormalizeHost(hostport), def
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return NormalizeHost(h), def
	}
	return NormalizeHost(h), uint16(n)
}

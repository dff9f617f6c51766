package netproxy

import (
	"fmt"
	"net/netip"
	"path"
	"strings"
)

// Reasons, as the reference names them (codex-rs/network-proxy/src/reasons.rs).
const (
	ReasonNotAllowed       = "not_allowed"        // not on the allowlist
	ReasonNotAllowedLocal  = "not_allowed_local"  // loopback or private, not explicitly allowed
	ReasonDenied           = "denied"             // on the denylist
	ReasonMethodNotAllowed = "method_not_allowed" // limited mode: not GET, HEAD or OPTIONS
	ReasonUnixSocket       = "unix_socket_not_supported"
)

// Sources of a decision.
const (
	SourceBaseline = "baseline_policy"
	SourceDecider  = "decider"
)

// Decisions.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	DecisionAsk   = "ask"
)

// Protocols, as the reference reports them.
const (
	ProtoHTTP         = "http"
	ProtoHTTPSConnect = "https_connect"
	ProtoSOCKS5TCP    = "socks5_tcp"
)

// Policy is a compiled domain policy.
type Policy struct {
	allow, deny, review []string // normalized patterns, expanded (see expand)
	exact               map[string]bool
	limited             bool
	allowLocal          bool
}

// NewPolicy compiles domains (pattern to "allow" or "deny") and the
// review domains. Patterns follow the reference
// (codex-rs/network-proxy/src/policy.rs): "example.com" is that host only;
// "*.example.com" its subdomains, not the apex; "**.example.com" the apex
// and its subdomains; "*" every host (allowlist only); other glob
// characters ('*', '?', '[...]') match within the host, case-insensitive.
// A trailing dot, a port and IPv6 brackets are ignored.
func NewPolicy(domains map[string]string, review []string, limited, allowLocal bool) (*Policy, error) {
	p := &Policy{exact: map[string]bool{}, limited: limited, allowLocal: allowLocal}
	for pat, v := range domains {
		np := normalizePattern(pat)
		if np == "" {
			return nil, fmt.Errorf("domain pattern %q is empty", pat)
		}
		switch v {
		case "allow":
			p.allow = append(p.allow, expand(np)...)
			if !strings.ContainsAny(np, "*?[") {
				p.exact[np] = true
			}
		case "deny":
			if np == "*" || np == "**." {
				return nil, fmt.Errorf("domain pattern %q: a global wildcard cannot be denied; use exact hosts or scoped wildcards like *.example.com", pat)
			}
			p.deny = append(p.deny, expand(np)...)
		case "none":
			// The reference's third value (NetworkDomainPermission::None):
			// no entry (measured: "*" still allows such a host).
		case "review":
			// Not a user-config value; accepted for the admin review
			// domains, which always go to the decider.
			p.review = append(p.review, expand(np)...)
		default:
			return nil, fmt.Errorf("domain %q: unknown decision %q, expected allow, deny, none or review", pat, v)
		}
	}
	for _, pat := range review {
		np := normalizePattern(pat)
		if np == "" {
			return nil, fmt.Errorf("review domain pattern %q is empty", pat)
		}
		p.review = append(p.review, expand(np)...)
	}
	for _, set := range [][]string{p.allow, p.deny, p.review} {
		for _, g := range set {
			if _, err := path.Match(g, ""); err != nil {
				return nil, fmt.Errorf("invalid domain pattern %q: %v", g, err)
			}
		}
	}
	return p, nil
}

// NormalizeHost lowercases host and strips brackets, a port (when there is
// exactly one colon) and trailing dots, as the reference does.
func NormalizeHost(host string) string {
	host = strings.TrimSpace(host)
	if strings.HasPrefix(host, "[") {
		if end := strings.IndexByte(host, ']'); end > 0 {
			host = host[1:end]
		}
	} else if strings.Count(host, ":") == 1 {
		host, _, _ = strings.Cut(host, ":")
	}
	host = strings.TrimRight(strings.ToLower(host), ".")
	if strings.Contains(host, "%25") {
		if ip, scope, ok := strings.Cut(host, "%25"); ok {
			if _, err := netip.ParseAddr(ip); err == nil {
				host = ip + "%" + scope
			}
		}
	}
	return host
}

func normalizePattern(p string) string {
	p = strings.TrimSpace(p)
	if p == "*" {
		return "*"
	}
	for _, prefix := range []string{"**.", "*."} {
		if rest, ok := strings.CutPrefix(p, prefix); ok {
			return prefix + NormalizeHost(rest)
		}
	}
	return NormalizeHost(p)
}

// expand turns a normalized pattern into path.Match globs: "*.d" is
// "?*.d" (at least one character before the dot), "**.d" is "d" and
// "?*.d". A '*' of a glob matches dots too, as in the reference's globset.
func expand(p string) []string {
	switch {
	case p == "*":
		return []string{"*"}
	case strings.HasPrefix(p, "**."):
		d := p[3:]
		return []string{d, "?*." + d}
	case strings.HasPrefix(p, "*."):
		return []string{"?*." + p[2:]}
	}
	return []string{p}
}

// matchAny reports whether host matches one of globs. path.Match's '*'
// stops at '/', which a host never holds, so it spans dots here.
func matchAny(globs []string, host string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, host); ok {
			return true
		}
	}
	return false
}

// IsLocalHost reports whether host (normalized) is localhost or an IP
// literal that is not publicly routable.
func IsLocalHost(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, _, _ := strings.Cut(host, "%")
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	return !IsPublic(a)
}

var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // this network (RFC 1122)
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT (RFC 6598)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments (RFC 6890)
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking (RFC 2544)
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
}

// IsPublic reports whether a is globally routable: not loopback, private,
// link-local, unspecified, multicast, unique-local or one of the reserved
// IPv4 blocks the reference also treats as local.
func IsPublic(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsUnspecified() || a.IsMulticast() || a.IsInterfaceLocalMulticast() {
		return false
	}
	if a.Is4() {
		for _, p := range nonPublic {
			if p.Contains(a) {
				return false
			}
		}
	}
	return true
}

// Verdict is the policy's answer for one destination before any decider.
type Verdict struct {
	Allowed bool
	Reason  string // when not allowed
	// Review: allowlisted or missed, the host must go to the decider
	// (a review domain, or an allowlist miss).
	Review bool
	// LocalOK: the host was explicitly allowlisted while local, so a dial
	// may reach loopback or private addresses.
	LocalOK bool
}

// Check decides on a normalized host and method ("" for tunnels) by the
// policy alone: the denylist wins, then the local rule, then limited
// mode's methods, then the review list, then the allowlist.
func (p *Policy) Check(host, method string, tunnel bool) Verdict {
	if host == "" {
		return Verdict{Reason: ReasonNotAllowed}
	}
	if matchAny(p.deny, host) {
		return Verdict{Reason: ReasonDenied}
	}
	local := IsLocalHost(host)
	if local && !p.allowLocal && !p.exact[host] {
		return Verdict{Reason: ReasonNotAllowedLocal}
	}
	if p.limited {
		// Stricter than the reference, which lets CONNECT through as a
		// tunnel: a tunnel carries any method, so limited mode refuses it.
		if tunnel || (method != "GET" && method != "HEAD" && method != "OPTIONS") {
			return Verdict{Reason: ReasonMethodNotAllowed}
		}
	}
	localOK := p.allowLocal || (local && p.exact[host])
	if matchAny(p.review, host) {
		return Verdict{Reason: ReasonNotAllowed, Review: true, LocalOK: localOK}
	}
	if matchAny(p.allow, host) {
		return Verdict{Allowed: true, LocalOK: localOK}
	}
	return Verdict{Reason: ReasonNotAllowed, Review: true, LocalOK: localOK}
}

// blockedMessage is the reference's text for a reason.
func blockedMessage(reason string) string {
	switch reason {
	case ReasonNotAllowed:
		return "Domain not in allowlist."
	case ReasonNotAllowedLocal:
		return "Sandbox policy blocks local/private network addresses."
	case ReasonDenied:
		return "Domain denied by the sandbox policy."
	case ReasonMethodNotAllowed:
		return "Method not allowed in limited mode."
	case ReasonUnixSocket:
		return "Unix socket proxying is not supported on this executor."
	}
	return "Request blocked by network policy."
}

// blockedHeader is the reference's x-proxy-error value for a reason.
func blockedHeader(reason string) string {
	switch reason {
	case ReasonNotAllowed, ReasonNotAllowedLocal:
		return "blocked-by-allowlist"
	case ReasonDenied:
		return "blocked-by-denylist"
	case ReasonMethodNotAllowed:
		return "blocked-by-method-policy"
	}
	return "blocked-by-policy"
}

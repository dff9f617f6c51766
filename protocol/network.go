package protocol

import "encoding/json"

// Managed network (the reference's networkProxyLaunch): process/start's
// networkProxy, and the two messages the server sends about it.
const (
	// NotifyNetworkPolicyDecision reports a refused (or asked) connection
	// of a process's managed proxy.
	NotifyNetworkPolicyDecision = "network/policyDecision"
	// MethodNetworkPolicyRequest is a server-to-client request: may the
	// process reach a host that is not on its allowlist?
	MethodNetworkPolicyRequest = "network/policyRequest"
)

// NetworkProxyLaunch is process/start's networkProxy (measured on 0.171).
type NetworkProxyLaunch struct {
	Proxy         NetworkProxySettings `json:"proxy"`
	AuditMetadata json.RawMessage      `json:"auditMetadata,omitempty"`
	EnvironmentID string               `json:"environmentId,omitempty"`
	ExecutionID   string               `json:"executionId,omitempty"`
	// PolicyDecisionTimeoutMs, when present, makes the proxy ask the
	// client (network/policyRequest) about allowlist misses.
	PolicyDecisionTimeoutMs *uint64 `json:"policyDecisionTimeoutMs,omitempty"`
}

// NetworkProxySettings is networkProxy.proxy. The server refuses a member
// it does not know (fail closed: it could be a restriction).
type NetworkProxySettings struct {
	Enabled                        bool              `json:"enabled"`
	CredentialMasking              bool              `json:"credentialMasking,omitempty"`
	EnableSocks5                   bool              `json:"enableSocks5"`
	TransparentTCP                 bool              `json:"transparentTcp,omitempty"`
	EnableSocks5UDP                bool              `json:"enableSocks5Udp"`
	AllowUpstreamProxy             bool              `json:"allowUpstreamProxy"`
	DangerouslyAllowAllUnixSockets bool              `json:"dangerouslyAllowAllUnixSockets"`
	Mode                           string            `json:"mode,omitempty"` // full (default) or limited
	Domains                        map[string]string `json:"domains"`        // pattern: allow | deny
	UnixSockets                    json.RawMessage   `json:"unixSockets,omitempty"`
	AllowLocalBinding              bool              `json:"allowLocalBinding"`
	// ReviewDomains always go to the client's decider (not observed on
	// the wire; the name follows the reference's config).
	ReviewDomains []string `json:"reviewDomains,omitempty"`
	// CredentialProviders are custom credential providers for masking,
	// by name (0.171; its keys are snake_case, measured from its decoding
	// errors).
	CredentialProviders map[string]CredentialProviderConfig `json:"credentialProviders,omitempty"`
}

// CredentialProviderConfig is one custom credential provider: the
// variables it masks, the patterns their values match, the URL prefixes
// the real value may be sent to (or a variable naming one), and how it
// authenticates (bearer, token, basic, header with header and prefix).
type CredentialProviderConfig struct {
	Env              []string `json:"env"`
	Patterns         []string `json:"patterns"`
	URLPrefixes      []string `json:"url_prefixes"`
	URLPrefixFromEnv string   `json:"url_prefix_from_env,omitempty"`
	Auth             []string `json:"auth"`
	Header           string   `json:"header,omitempty"`
	Prefix           string   `json:"prefix,omitempty"`
}

// NetworkPolicyDecision is network/policyDecision's params (key order as
// measured on 0.171).
type NetworkPolicyDecision struct {
	ProcessID      string `json:"processId"`
	Timestamp      string `json:"timestamp"` // RFC 3339, milliseconds, UTC
	Scope          string `json:"scope"`     // "domain"
	Decision       string `json:"decision"`  // deny | ask
	Source         string `json:"source"`    // baseline_policy | decider
	Reason         string `json:"reason"`
	Protocol       string `json:"protocol"` // http | https_connect | socks5_tcp
	Host           string `json:"host"`
	Port           uint16 `json:"port"`
	Method         string `json:"method,omitempty"`
	Client         string `json:"client,omitempty"`
	PolicyOverride bool   `json:"policyOverride"`
}

// NetworkPolicyRequestParams is network/policyRequest's params.
type NetworkPolicyRequestParams struct {
	ProcessID string               `json:"processId"`
	Request   NetworkPolicyRequest `json:"request"`
}

// NetworkPolicyRequest is the destination asked about.
type NetworkPolicyRequest struct {
	Protocol string `json:"protocol"`
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
}

// NetworkPolicyResponse is the client's answer.
type NetworkPolicyResponse struct {
	Decision struct {
		Type   string `json:"type"` // allow | deny | ask
		Reason string `json:"reason,omitempty"`
	} `json:"decision"`
}

package process

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"

	"github.com/execgo/exec-server/netproxy"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox/policy"
)

// prepareMasking sets up credential masking for a launch with
// credentialMasking: the providers (built-in and the request's custom
// ones; an invalid one refuses the start, its variables could not be
// masked), the executor's CA for the proxy, and the certificate variables
// pointing at the trust bundle, whose directory the sandbox sees
// read-only.
func (nl *netLaunch) prepareMasking(m *Manager, s *protocol.NetworkProxySettings, cfg *netproxy.Config, plan *policy.Plan) error {
	if m.opts.Masking == nil {
		return unavailable("networkProxy.proxy.credentialMasking: this executor has no masking authority; the command is not run")
	}
	ps, err := compileProviders(s)
	if err != nil {
		return err
	}
	ca, bundle, err := m.opts.Masking.Get()
	if err != nil {
		return unavailable("networkProxy.proxy.credentialMasking: the executor's CA: %v; the command is not run", err)
	}
	cfg.CA, cfg.UpstreamRoots = ca, m.opts.MaskUpstreamRoots
	for _, k := range netproxy.CertVars {
		nl.env[k] = bundle
	}
	addReadMount(plan, filepath.Dir(bundle))
	nl.mask = ps
	return nil
}

func compileProviders(s *protocol.NetworkProxySettings) (*netproxy.Providers, error) {
	ps, err := netproxy.CompileProviders(s.CredentialProviders)
	if err != nil {
		return nil, unavailable("networkProxy.proxy.credentialProviders: %v; the command is not run", err)
	}
	return ps, nil
}

// maskWithoutProxy masks the environment of a launch that asked for
// masking but runs with no network at all (its proxy disabled, or a
// sandbox without network): the command still never sees the real
// values, and nothing needs them back.
func maskWithoutProxy(raw json.RawMessage, env []string) ([]string, error) {
	launch, _, err := parseProxy(raw)
	if err != nil {
		return nil, err
	}
	ps, err := compileProviders(&launch.Proxy)
	if err != nil {
		return nil, err
	}
	env, _, _ = ps.Mask(env)
	return env, nil
}

// addReadMount makes dir visible and read-only in the plan's view,
// keeping the mounts shallowest first.
func addReadMount(plan *policy.Plan, dir string) {
	depth := func(p string) int { return strings.Count(filepath.Clean(p), "/") }
	mt := policy.Mount{Path: filepath.Clean(dir), Access: policy.AccessRead, Dir: true}
	i := slices.IndexFunc(plan.Mounts, func(o policy.Mount) bool { return depth(o.Path) > depth(mt.Path) })
	if i < 0 {
		i = len(plan.Mounts)
	}
	plan.Mounts = slices.Insert(plan.Mounts, i, mt)
}

// maskingRequested reports whether a start's networkProxy asks for
// credential masking (before it is fully checked: a shell snapshot is
// not used then, since the captured state would hold the real values).
func maskingRequested(raw json.RawMessage) bool {
	if !present(raw) || !bytes.Contains(raw, []byte("credentialMasking")) {
		return false
	}
	var l struct {
		Proxy struct {
			CredentialMasking bool `json:"credentialMasking"`
		} `json:"proxy"`
	}
	return json.Unmarshal(raw, &l) != nil || l.Proxy.CredentialMasking
}

package server

import (
	"context"
	"encoding/json"
	"path/filepath"

	"github.com/execgo/exec-server/caproots"
	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/internal/codexhome"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox/policy"
)

// capabilities/discoverV2: the skills in the executor's codex home, as the
// reference reports them. Workspace skills (under cwd) are not reported:
// codex finds those itself over the fs methods. Plugins are not discovered
// (always []), nor are system or ~/.agents skill roots.

func decodeDiscover(raw json.RawMessage) (any, error) {
	p := new(protocol.CapabilitiesDiscoverParams)
	if err := jsonscan.DecodeParams(raw, p, "DiscoverV2CapabilitiesRequest", "cwd"); err != nil {
		return nil, err
	}
	if _, err := fileuri.Parse(p.Cwd); err != nil {
		return nil, err
	}
	return p, nil
}

func discoverCapabilities() (any, error) {
	home, err := codexhome.Home()
	if err != nil {
		return nil, protocol.Internal("%v", err)
	}
	res := protocol.CapabilitiesDiscoverResult{Plugins: []any{}, Skills: []protocol.DiscoveredSkill{}, Warnings: []string{}}
	root := filepath.Join(home, "skills")
	skills, bad := codexhome.Skills(root)
	for _, s := range skills {
		res.Skills = append(res.Skills, protocol.DiscoveredSkill{
			Name: s.Name, Description: s.Description, ShortDescription: s.ShortDescription,
			Path:          fileuri.FromPath(s.Path),
			DiscoveryRoot: protocol.SkillDiscoveryRoot{ID: "codex-home-skills", Path: fileuri.FromPath(root)},
		})
	}
	if bad {
		res.Warnings = append(res.Warnings, codexhome.SkillsWarning)
	}
	return res, nil
}

// familyCapabilityDiscovery is capabilityRoots/discoverV1's family, as the
// reference names it in lifecycle errors.
const familyCapabilityDiscovery = "capability discovery"

// decodeCapabilityRoots checks every root before any is read: the
// reference's -32602 texts for a missing member, a bad URI or a bad
// sandbox.
func decodeCapabilityRoots(raw json.RawMessage) (any, error) {
	var top struct {
		Roots []json.RawMessage `json:"roots"`
	}
	if err := jsonscan.DecodeParams(raw, &top, "CapabilityRootsDiscoverParams", "roots"); err != nil {
		return nil, err
	}
	p := &protocol.CapabilityRootsDiscoverParams{Roots: make([]protocol.CapabilityRootDiscoverRequest, len(top.Roots))}
	for i, rr := range top.Roots {
		r := &p.Roots[i]
		if err := jsonscan.DecodeParams(rr, r, "CapabilityRootDiscoverRequest", "id", "path"); err != nil {
			return nil, err
		}
		if _, err := fileuri.Parse(r.Path); err != nil {
			return nil, err
		}
		if _, err := policy.Parse(r.Sandbox); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (s *Server) discoverMethods(m map[string]method) {
	m[protocol.MethodCapabilityRootsDiscover] = method{
		family: familyCapabilityDiscovery,
		decode: decodeCapabilityRoots,
		call: func(ctx context.Context, cs *connState, p any) (any, error) {
			return caproots.Discover(ctx, cs.srv.fs, p.(*protocol.CapabilityRootsDiscoverParams))
		},
	}
	m[protocol.MethodCapabilitiesDiscoverV2] = method{
		family: familyEnvironment,
		decode: decodeDiscover,
		call: func(context.Context, *connState, any) (any, error) {
			return discoverCapabilities()
		},
	}
}

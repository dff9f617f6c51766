package server

import (
	"context"
	"encoding/json"
	"path/filepath"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/internal/codexhome"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/protocol"
)

// capabilities/discoverV2: the skills in the executor's codex home, as the
// reference reports them. Workspace skills (under cwd) are not reported:
// codex finds those itself over the fs methods. Plugins are not discovered
// (always []), nor are system or ~/.agents skill roots.
const methodCapabilitiesDiscoverV2 = "capabilities/discoverV2"

type discoverParams struct {
	Cwd string `json:"cwd"`
}

type discoveryRoot struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

type discoveredSkill struct {
	Name             string        `json:"name"`
	Description      string        `json:"description"`
	ShortDescription *string       `json:"shortDescription"`
	Path             string        `json:"path"`
	DiscoveryRoot    discoveryRoot `json:"discoveryRoot"`
	Dependencies     any           `json:"dependencies"`
	Policy           any           `json:"policy"`
}

type discoverResult struct {
	Plugins  []any             `json:"plugins"`
	Skills   []discoveredSkill `json:"skills"`
	Warnings []string          `json:"warnings"`
}

func decodeDiscover(raw json.RawMessage) (any, error) {
	p := new(discoverParams)
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
	res := discoverResult{Plugins: []any{}, Skills: []discoveredSkill{}, Warnings: []string{}}
	root := filepath.Join(home, "skills")
	skills, bad := codexhome.Skills(root)
	for _, s := range skills {
		res.Skills = append(res.Skills, discoveredSkill{
			Name: s.Name, Description: s.Description, ShortDescription: s.ShortDescription,
			Path:          fileuri.FromPath(s.Path),
			DiscoveryRoot: discoveryRoot{ID: "codex-home-skills", Path: fileuri.FromPath(root)},
		})
	}
	if bad {
		res.Warnings = append(res.Warnings, codexhome.SkillsWarning)
	}
	return res, nil
}

func (s *Server) discoverMethods(m map[string]method) {
	m[methodCapabilitiesDiscoverV2] = method{
		family: familyEnvironment,
		decode: decodeDiscover,
		call: func(context.Context, *connState, any) (any, error) {
			return discoverCapabilities()
		},
	}
}

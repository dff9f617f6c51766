package server

import (
	"context"
	"encoding/json"
	"os"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/internal/codexhome"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/protocol"
)

// environmentConfig/read: the executor's codex configuration layers,
// projected on the key paths the client asks for (codex asks for
// [["mcp_servers"]] to learn the executor's MCP servers). Shapes as the
// reference's (codex-rs/exec-server; docs/protocol.md).

// envConfigParams are the wire params with the cwd parsed.
type envConfigParams struct {
	protocol.EnvironmentConfigReadParams
	dir string
}

func decodeEnvConfig(raw json.RawMessage) (any, error) {
	p := new(envConfigParams)
	if err := jsonscan.DecodeParams(raw, &p.EnvironmentConfigReadParams, "EnvironmentConfigReadParams", "cwd", "configPaths", "requirementsPaths"); err != nil {
		return nil, err
	}
	dir, err := fileuri.Parse(p.Cwd)
	if err != nil {
		return nil, err
	}
	p.dir = dir
	if len(p.ConfigPaths) == 0 && len(p.RequirementsPaths) == 0 {
		return nil, protocol.InvalidParams("at least one config or requirements path is required")
	}
	for _, paths := range [][][]string{p.ConfigPaths, p.RequirementsPaths} {
		for _, path := range paths {
			if len(path) == 0 {
				return nil, protocol.InvalidParams("TOML paths must contain at least one key segment")
			}
		}
	}
	return p, nil
}

// readEnvConfig reads the files on every call, as the reference does: an
// edit shows in the next answer. Requirements layers come only from
// system and managed sources (never $CODEX_HOME), which this server does
// not read: they stay empty.
func (cs *connState) readEnvConfig(p *envConfigParams) (any, error) {
	home, err := codexhome.Home()
	if err != nil {
		return nil, protocol.Internal("failed to find Codex home: %v", err)
	}
	host, _ := os.Hostname()
	res := protocol.EnvironmentConfigReadResult{
		UserHomeDir:  cs.srv.envInfo().UserHomeDir,
		CodexHomeDir: fileuri.FromPath(home),
		Hostname:     host,
		Config:       protocol.ConfigLayerStack{Layers: []protocol.ConfigLayer{}},
		Requirements: protocol.ConfigLayerStack{Layers: []protocol.ConfigLayer{}},
	}
	if len(p.ConfigPaths) == 0 {
		return res, nil
	}
	layers, err := codexhome.Layers(home, p.dir)
	if err != nil {
		return nil, protocol.Internal("failed to load executor-local config: %v", err)
	}
	for _, l := range layers {
		t := codexhome.Project(l.Config, p.ConfigPaths)
		if t.Len() == 0 {
			continue
		}
		res.Config.Layers = append(res.Config.Layers, protocol.ConfigLayer{
			Source: l.Source, BaseDir: fileuri.FromPath(l.BaseDir), TOML: codexhome.Encode(t),
		})
	}
	return res, nil
}

func (s *Server) envConfigMethods(m map[string]method) {
	m[protocol.MethodEnvironmentConfigRead] = method{
		family: familyEnvironment,
		decode: decodeEnvConfig,
		call: func(_ context.Context, cs *connState, p any) (any, error) {
			return cs.readEnvConfig(p.(*envConfigParams))
		},
	}
}

package protocol

// capabilities/discoverV2: the skills in the executor's codex home, as the
// reference reports them (server/discover.go says what is not reported).

// MethodCapabilitiesDiscoverV2 is the reference's capabilities/discoverV2.
const MethodCapabilitiesDiscoverV2 = "capabilities/discoverV2"

// CapabilitiesDiscoverParams are capabilities/discoverV2's params.
type CapabilitiesDiscoverParams struct {
	Cwd string `json:"cwd"`
}

// SkillDiscoveryRoot names the root a skill was found under.
type SkillDiscoveryRoot struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

// DiscoveredSkill is one skill in a capabilities/discoverV2 result.
type DiscoveredSkill struct {
	Name             string             `json:"name"`
	Description      string             `json:"description"`
	ShortDescription *string            `json:"shortDescription"`
	Path             string             `json:"path"`
	DiscoveryRoot    SkillDiscoveryRoot `json:"discoveryRoot"`
	Dependencies     any                `json:"dependencies"`
	Policy           any                `json:"policy"`
}

// CapabilitiesDiscoverResult is capabilities/discoverV2's result.
type CapabilitiesDiscoverResult struct {
	Plugins  []any             `json:"plugins"`
	Skills   []DiscoveredSkill `json:"skills"`
	Warnings []string          `json:"warnings"`
}

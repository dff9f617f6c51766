package protocol

import "encoding/json"

// capabilityRoots/discoverV1: the plugin and skill files under roots the
// client selected on the executor, read under each root's sandbox (the
// reference's CAPABILITY_ROOTS_DISCOVER_METHOD). Shapes and key order are
// the reference 0.171's (measured with stdio probes).
const MethodCapabilityRootsDiscover = "capabilityRoots/discoverV1"

// CapabilityRootsMax is how many roots one request may name (more is
// -32600, as the reference).
const CapabilityRootsMax = 128

// CapabilityRootsDiscoverParams are the params of capabilityRoots/discoverV1.
type CapabilityRootsDiscoverParams struct {
	Roots []CapabilityRootDiscoverRequest `json:"roots"`
}

// CapabilityRootDiscoverRequest is one root: an opaque id echoed back, a
// file: URI, and the sandbox its reads run under (null: none).
type CapabilityRootDiscoverRequest struct {
	ID      string          `json:"id"`
	Path    string          `json:"path"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

// CapabilityRootsDiscoverResult is the result: one entry per root, in
// request order.
type CapabilityRootsDiscoverResult struct {
	Roots []CapabilityRootDiscovery `json:"roots"`
}

// CapabilityTextFile is a recognized UTF-8 file and its contents.
type CapabilityTextFile struct {
	Path     string `json:"path"`
	Contents string `json:"contents"`
}

// DiscoveredPluginFiles are the root's plugin manifest and the MCP and
// Apps declarations it points to.
type DiscoveredPluginFiles struct {
	Manifest   CapabilityTextFile  `json:"manifest"`
	McpConfig  *CapabilityTextFile `json:"mcpConfig"`
	AppsConfig *CapabilityTextFile `json:"appsConfig"`
}

// DiscoveredSkillFiles is a SKILL.md and its agents/openai.yaml.
type DiscoveredSkillFiles struct {
	Instructions CapabilityTextFile  `json:"instructions"`
	Metadata     *CapabilityTextFile `json:"metadata"`
}

// CapabilityRootDiscovery is what one root holds. Failures are the root's
// own: Error when the root itself cannot be read, Warnings for files
// skipped.
type CapabilityRootDiscovery struct {
	ID                 string                 `json:"id"`
	Path               string                 `json:"path"`
	Plugin             *DiscoveredPluginFiles `json:"plugin"`
	Skills             []DiscoveredSkillFiles `json:"skills"`
	NamespaceManifests []CapabilityTextFile   `json:"namespaceManifests"`
	Warnings           []string               `json:"warnings"`
	Error              *string                `json:"error"`
}

package protocol

// environmentConfig/read: the executor's codex configuration layers,
// projected on the key paths the client asks for. Shapes as the
// reference's (codex-rs/exec-server; docs/protocol.md).

// EnvironmentConfigReadParams are environmentConfig/read's params (Cwd a
// file: URI).
type EnvironmentConfigReadParams struct {
	Cwd               string     `json:"cwd"`
	ConfigPaths       [][]string `json:"configPaths"`
	RequirementsPaths [][]string `json:"requirementsPaths"`
}

// ConfigLayer is one configuration file's projection.
type ConfigLayer struct {
	Source  string `json:"source"`
	BaseDir string `json:"baseDir"`
	TOML    string `json:"toml"`
}

// ConfigLayerStack is the layers of one kind, lowest precedence first.
type ConfigLayerStack struct {
	Layers              []ConfigLayer `json:"layers"`
	CloudInsertionIndex int           `json:"cloudInsertionIndex"`
}

// EnvironmentConfigReadResult is environmentConfig/read's result.
type EnvironmentConfigReadResult struct {
	UserHomeDir  string           `json:"userHomeDir"`
	CodexHomeDir string           `json:"codexHomeDir"`
	Hostname     string           `json:"hostname"`
	Config       ConfigLayerStack `json:"config"`
	Requirements ConfigLayerStack `json:"requirements"`
}

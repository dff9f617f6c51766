package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"

	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/pflag"
)

// Named contexts, as kubectl's and docker's: a server URL with the files
// that reach it (token, CA), kept in $XDG_CONFIG_HOME/exec-server/config.toml
// (EXEC_SERVER_CONFIG names another file) and chosen with --context NAME,
// $EXEC_SERVER_CONTEXT or the file's current one. A flag or variable given
// explicitly (--url, $EXEC_SERVER_URL, --token...) wins over the context.
//
//	current = "prod"
//	[contexts.prod]
//	url = "wss://build.example:8765"
//	token-file = "/home/me/.config/exec-server/prod.token"
//	ca-file = "/home/me/.config/exec-server/prod-ca.pem"

type contextConfig struct {
	Current  string                  `toml:"current"`
	Contexts map[string]namedContext `toml:"contexts"`
}

type namedContext struct {
	URL       string `toml:"url"`
	TokenFile string `toml:"token-file,omitempty"`
	CAFile    string `toml:"ca-file,omitempty"`
}

func configPath() (string, error) {
	if p := os.Getenv("EXEC_SERVER_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "exec-server", "config.toml"), nil
}

func loadContexts() (*contextConfig, string, error) {
	p, err := configPath()
	if err != nil {
		return nil, "", err
	}
	cfg := &contextConfig{Contexts: map[string]namedContext{}}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, p, nil
	}
	if err != nil {
		return nil, p, err
	}
	if err := toml.Unmarshal(b, cfg); err != nil {
		return nil, p, fmt.Errorf("%s: %v", p, err)
	}
	if cfg.Contexts == nil {
		cfg.Contexts = map[string]namedContext{}
	}
	return cfg, p, nil
}

func (cfg *contextConfig) save(p string) error {
	b, err := toml.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// applyContext fills the connection settings the command line and the
// environment left unset from the chosen context. An explicitly named
// context that does not exist is an error; no context at all is not.
func (c *command) applyContext(fs *pflag.FlagSet) error {
	name, explicit := c.contextName, c.contextName != ""
	if !explicit {
		name, explicit = os.Getenv("EXEC_SERVER_CONTEXT"), os.Getenv("EXEC_SERVER_CONTEXT") != ""
	}
	if !explicit && (c.url != "" || c.remote.registry != "") {
		return nil
	}
	cfg, p, err := loadContexts()
	if err != nil {
		return err
	}
	if name == "" {
		name = cfg.Current
	}
	if name == "" {
		return nil
	}
	ctx, ok := cfg.Contexts[name]
	if !ok {
		return fmt.Errorf("context %q is not in %s (exec-server context ls)", name, p)
	}
	// --context itself outranks the environment's URL and token; a flag
	// given with it still wins.
	flag := c.contextName != ""
	if !fs.Changed("url") && (c.url == "" || flag) {
		c.url = ctx.URL
	}
	if !fs.Changed("token") && !fs.Changed("token-file") && (c.token == "" || flag) {
		c.tokenFile = ctx.TokenFile
	}
	if !fs.Changed("ca-file") {
		c.caFile = ctx.CAFile
	}
	return nil
}

// contextCmd is `exec-server context ls | add NAME --url URL [--token-file F]
// [--ca-file F] | use NAME | rm NAME`.
func (c *command) contextCmd(args []string) int {
	const usage = "ls | add NAME --url URL [--token-file PATH] [--ca-file PATH] | use NAME | rm NAME"
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(c.stdout, "usage: exec-server context %s\n\nNamed servers, as kubectl contexts: --context NAME (or $EXEC_SERVER_CONTEXT, or the current one)\nfills --url, --token-file and --ca-file unless given. The file: $XDG_CONFIG_HOME/exec-server/config.toml\n($EXEC_SERVER_CONFIG).\n", usage)
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	cfg, p, err := loadContexts()
	if err != nil {
		return c.fail(exitFailure, "%v", err)
	}
	switch args[0] {
	case "ls":
		names := make([]string, 0, len(cfg.Contexts))
		for n := range cfg.Contexts {
			names = append(names, n)
		}
		sort.Strings(names)
		tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "CURRENT\tNAME\tURL\tTOKEN FILE")
		for _, n := range names {
			cur := ""
			if n == cfg.Current {
				cur = "*"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cur, n, cfg.Contexts[n].URL, cfg.Contexts[n].TokenFile)
		}
		tw.Flush()
		return 0
	case "add":
		fs := pflag.NewFlagSet("exec-server context add", pflag.ContinueOnError)
		fs.SetOutput(c.stderr)
		var nc namedContext
		fs.StringVar(&nc.URL, "url", "", "server `URL`")
		fs.StringVar(&nc.TokenFile, "token-file", "", "bearer token `PATH`")
		fs.StringVar(&nc.CAFile, "ca-file", "", "CA certificates `PATH` for wss://")
		if err := fs.Parse(args[1:]); err != nil {
			return c.usageErr("%v", err)
		}
		if fs.NArg() != 1 || nc.URL == "" {
			return c.usageErr("want: context add NAME --url URL")
		}
		for _, f := range []*string{&nc.TokenFile, &nc.CAFile} {
			if *f != "" {
				if abs, err := filepath.Abs(*f); err == nil {
					*f = abs
				}
			}
		}
		cfg.Contexts[fs.Arg(0)] = nc
		if cfg.Current == "" {
			cfg.Current = fs.Arg(0)
		}
	case "use", "rm":
		if len(args) != 2 {
			return c.usageErr("want: context %s NAME", args[0])
		}
		if _, ok := cfg.Contexts[args[1]]; !ok {
			return c.fail(exitFailure, "context %q is not in %s", args[1], p)
		}
		if args[0] == "use" {
			cfg.Current = args[1]
		} else {
			delete(cfg.Contexts, args[1])
			if cfg.Current == args[1] {
				cfg.Current = ""
			}
		}
	default:
		return c.usageErr("unknown context command %q: want %s", args[0], usage)
	}
	if err := cfg.save(p); err != nil {
		return c.fail(exitFailure, "%s: %v", p, err)
	}
	return 0
}

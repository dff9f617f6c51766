package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strings"
	"time"
)

// envPrefix starts the environment variable of every server flag.
const envPrefix = "EXEC_SERVER_"

// envName is the environment variable of a flag: --ws-token-file is
// EXEC_SERVER_WS_TOKEN_FILE.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagsFromEnv sets, from the environment, every flag of fs that the
// command line did not set (the command line wins, and a repeatable flag
// is not appended to). It runs after Parse, so -h never reads the
// environment and help shows only the built-in defaults. Errors name the
// variable but not its value: it may be read from a secret store.
func flagsFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] || f.Name == "version" {
			return
		}
		v, ok := lookup(envName(f.Name))
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("invalid value in %s for --%s: %v", envName(f.Name), f.Name, e)
		}
	})
	return err
}

// versionString is the module version and VCS revision the binary was
// built from, as the Go toolchain recorded them.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "exec-server (no build info)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	out := "exec-server " + v
	if rev != "" {
		out += " revision " + rev
		if modified {
			out += "+dirty"
		}
		if at != "" {
			out += " " + at
		}
	}
	return out + " " + bi.GoVersion
}

// parseMetricsListen checks a --metrics-listen address: IP:PORT or
// localhost:PORT (bound to 127.0.0.1).
func parseMetricsListen(addr string) (string, error) {
	if port, ok := strings.CutPrefix(addr, "localhost:"); ok {
		addr = "127.0.0.1:" + port
	}
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return "", fmt.Errorf("invalid --metrics-listen address %q; expected IP:PORT or localhost:PORT", addr)
	}
	return addr, nil
}

// serveMetrics serves h on addr until ctx ends or the returned function is
// called.
func serveMetrics(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("serving metrics", "url", "http://"+l.Addr().String()+"/metrics")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(l)
	}()
	stopped := context.AfterFunc(ctx, func() { _ = hs.Close() })
	return func() {
		stopped()
		_ = hs.Close()
		<-done
	}, nil
}

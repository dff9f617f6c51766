package server

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
)

// CompatibleVersion is the reference release whose protocol this server
// implements; it is reported as executorVersion so clients that gate
// features on it treat this server like that release.
const CompatibleVersion = "0.169.0"

// envInfo describes this machine; it is computed once.
func (s *Server) envInfo() protocol.EnvironmentInfo {
	s.envOnce.Do(func() {
		cwd, _ := os.Getwd()
		home, _ := os.UserHomeDir()
		shell := loginShell()
		s.envCache = protocol.EnvironmentInfo{
			Shell:                protocol.Shell{Name: filepath.Base(shell), Path: shell},
			ExecutorVersion:      CompatibleVersion,
			ProviderID:           providerID(),
			Cwd:                  fileuri.FromPath(cwd),
			UserHomeDir:          fileuri.FromPath(home),
			PlatformOS:           runtime.GOOS,
			PrependPathDirs:      []string{},
			TemporaryDirectories: []string{},
			TempDir:              fileuri.FromPath(os.TempDir()),
			Capabilities:         s.capabilities(),
		}
	})
	return s.envCache
}

// capabilities are true only for what this server implements. The
// reference's keys stay as they are; linuxSandbox (this server's own) says
// whether a sandbox policy can be enforced here: when false, every request
// that needs one fails with -32603 naming what is missing.
func (s *Server) capabilities() map[string]bool {
	fsStreaming := slices.Contains(s.fs.Methods(), protocol.MethodFsWriteBlock)
	return map[string]bool{
		"networkProxyLaunch":                          true,
		"networkProxyReviewDomains":                   false,
		"credentialMasking":                           false,
		"credentialMaskingCustomProviders":            false,
		"capabilityDiscoverySandbox":                  false,
		"fsWatchMissing":                              true,
		"fsWatch":                                     true,
		"capabilityDiscoveryV2":                       true,
		"environmentConfigRead":                       true,
		"httpHeaderEnvVars":                           true,
		"sandboxedFileStreaming":                      false,
		"fileWriteStreaming":                          fsStreaming,
		"shellSnapshotV2":                             false,
		"windowsMxc":                                  false,
		"linuxRootWritePreservesDevices":              false,
		"linuxApprovedRootWritePreservesRestrictions": false,
		"linuxSandbox":                                sandbox.Probe().Available,
		// This server's extensions (process/list, process/terminate's
		// graceMs, process/start's timeoutMs).
		"processList":    true,
		"terminateGrace": true,
		"processTimeout": true,
	}
}

// loginShell is the user's shell from the passwd database, else $SHELL,
// else /bin/sh.
func loginShell() string {
	uid := strconv.Itoa(os.Getuid())
	if f, err := os.Open("/etc/passwd"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) >= 7 && fields[2] == uid && fields[6] != "" {
				return fields[6]
			}
		}
	}
	if sh := os.Getenv("SHELL"); sh != "" {
		return sh
	}
	return "/bin/sh"
}

// providerID identifies this build: the module version and VCS revision.
func providerID() string {
	id := "exec-server-go"
	if bi, ok := debug.ReadBuildInfo(); ok {
		id += " " + bi.Main.Version
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" {
				id += " " + st.Value
			}
		}
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

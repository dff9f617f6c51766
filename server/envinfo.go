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
// features on it treat this server like that release. 0.171: its
// capability keys (networkProxyTransparentTcp) and process/start's
// error kinds; the features a capability says false are not implemented.
const CompatibleVersion = "0.171.0"

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

// capabilities are true only for what this server implements: the
// reference's keys (all of them, in its order: protocol.CapabilityOrder),
// then this server's own. linuxSandbox (this server's) says whether a
// sandbox policy can be enforced here: when false, every request that
// needs one fails with -32603 naming what is missing.
func (s *Server) capabilities() protocol.Capabilities {
	fsStreaming := slices.Contains(s.fs.Methods(), protocol.MethodFsWriteBlock)
	// fs/open + fs/readBlock honour `sandbox` exactly as fs/readFile does
	// (fsys TestSandboxedFileStreamingParity).
	sandboxedStreaming := slices.Contains(s.fs.Methods(), protocol.MethodFsOpen)
	// The two Linux flags describe what our sandbox keeps under a writable
	// root (pinned by process TestRootWritePreservesDevices and
	// TestApprovedRootWritePreservesRestrictions): true where it runs.
	linuxSandbox := sandbox.Probe().Available
	return protocol.Capabilities{
		protocol.CapNetworkProxyLaunch: true,
		// networkProxy.proxy.reviewDomains always go to the decider
		// (netproxy.Policy); transparentTcp where the probe succeeds.
		protocol.CapNetworkProxyReviewDomains:                   true,
		protocol.CapNetworkProxyTransparentTCP:                  sandbox.TransparentSupport() == nil,
		protocol.CapCredentialMasking:                           false,
		protocol.CapCredentialMaskingCustomProviders:            false,
		protocol.CapCapabilityDiscoverySandbox:                  true, // capabilityRoots/discoverV1 under each root's sandbox (caproots)
		protocol.CapFsWatchMissing:                              true,
		protocol.CapCapabilityDiscoveryV2:                       true,
		protocol.CapEnvironmentConfigRead:                       true,
		protocol.CapHTTPHeaderEnvVars:                           true,
		protocol.CapSandboxedFileStreaming:                      sandboxedStreaming,
		protocol.CapFileWriteStreaming:                          fsStreaming,
		protocol.CapShellSnapshotV2:                             true, // process/snapshot.go
		protocol.CapWindowsMxc:                                  false,
		protocol.CapLinuxRootWritePreservesDevices:              linuxSandbox,
		protocol.CapLinuxApprovedRootWritePreservesRestrictions: linuxSandbox,
		// This server's extensions: fs/watch, the sandbox probe,
		// process/list, process/terminate's graceMs, process/start's
		// timeoutMs.
		"fsWatch":        true,
		"linuxSandbox":   linuxSandbox,
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

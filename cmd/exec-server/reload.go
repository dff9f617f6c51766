package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/execgo/exec-server/sandbox/policy"
)

// reload reads the credential files again (SIGHUP): the capability-token
// files or the JWT shared secret, and the TLS certificate and key. Each
// takes effect for new connections only; sessions and connections already
// accepted go on. A file that cannot be used keeps the old credentials, and
// the log says why (naming the file, never its content).
func (s *securityFlags) reload(logger *slog.Logger) {
	if s.authn != nil {
		if err := s.authn.Reload(); err != nil {
			logger.Warn("reload: keeping the previous authentication", "err", err)
		} else {
			logger.Info("reload: authentication files read again", "mode", s.wsAuth, "tokenFiles", len(s.tokenFiles))
		}
	}
	if s.cert.Load() != nil {
		cert, err := tls.LoadX509KeyPair(s.tlsCert, s.tlsKey)
		if err != nil {
			logger.Warn("reload: keeping the previous TLS certificate", "cert", s.tlsCert, "key", s.tlsKey, "err", err)
		} else {
			s.cert.Store(&cert)
			logger.Info("reload: TLS certificate read again", "cert", s.tlsCert)
		}
	}
	// A replaced secret file is a new inode: record it again so that fs
	// methods keep refusing it (secrets.go).
	policy.SetServerSecrets(secretPaths(s, os.Environ())...)
}

// reloadOnHangup runs reload on every SIGHUP until ctx ends, telling a
// Type=notify service manager about it (RELOADING=1, then READY=1).
func (s *securityFlags) reloadOnHangup(ctx context.Context, logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = sdNotify("RELOADING=1")
				s.reload(logger)
				_ = sdNotify("READY=1")
			}
		}
	}()
}

package main

import (
	"flag"

	"github.com/execgo/exec-server/server"
)

// securityFlags is a placeholder until auth, TLS and limit flags land.
type securityFlags struct{}

func addSecurityFlags(*flag.FlagSet) *securityFlags { return &securityFlags{} }

func (s *securityFlags) apply(string, *server.Config) error { return nil }

//go:build !linux

package peerproc

import (
	"errors"
	"net/netip"
)

// Checker is unavailable off Linux (the sandbox is Linux-only).
type Checker struct{}

// New fails off Linux.
func New() (*Checker, error) { return nil, errors.New("peerproc: not supported on this system") }

// Check serves every peer.
func (c *Checker) Check(local, remote netip.AddrPort) Verdict { return Verdict{} }

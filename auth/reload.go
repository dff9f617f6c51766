package auth

import (
	"net/http"
	"sync/atomic"
)

// Authenticator is the upgrade check of a Config whose files (token files,
// the shared secret) can be read again while it serves: Reload swaps the
// check at once for every later upgrade; connections already accepted are
// not touched. A Reload that fails keeps the old check.
type Authenticator struct {
	cfg Config
	cur atomic.Pointer[checker]
}

// NewAuthenticator validates cfg and reads its files, as New; it returns
// nil, nil when cfg.Mode is ModeNone.
func NewAuthenticator(cfg Config) (*Authenticator, error) {
	chk, err := newChecker(cfg)
	if chk == nil || err != nil {
		return nil, err
	}
	a := &Authenticator{cfg: cfg}
	a.cur.Store(&chk)
	return a, nil
}

// Check is the upgrade check (server.Config.Authenticate).
func (a *Authenticator) Check(r *http.Request) error {
	_, err := a.Identify(r)
	return err
}

// Identify checks r and names the caller: "token:NAME" (the base name of
// the capability token's file) or "jwt:SUB" (the signed token's subject).
// Neither is a secret.
func (a *Authenticator) Identify(r *http.Request) (string, error) {
	return (*a.cur.Load())(r)
}

// Reload reads the files again. On error (a missing, empty or short file)
// the previous check stays in force and the error says why, naming the
// file, never its content.
func (a *Authenticator) Reload() error {
	chk, err := newChecker(a.cfg)
	if err != nil {
		return err
	}
	a.cur.Store(&chk)
	return nil
}

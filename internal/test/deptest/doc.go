// Package deptest holds the test that enforces the import rules written in
// docs/architecture.md ("Import rules"), read from `go list -json` as
// tailscale's tstest/deptest does: the rules live in one table in
// deptest_test.go, and a package that breaks one fails `go test ./...`.
// Test-only; it has no API.
package deptest

// Package sandbox is how the kernel enforces a sandbox: it builds the view a
// policy.Plan describes in fresh namespaces, with Landlock and seccomp, and
// runs a command (Command) or a registered in-process operation (Run) inside
// it. What a sandbox allows (the wire policy, its resolution into a Plan,
// sandboxDenied) is package sandbox/policy, which makes no kernel call.
//
// Linux only: elsewhere every call fails closed (confine_other.go).
package sandbox

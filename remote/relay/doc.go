// Package relay is a self-hostable environment registry and rendezvous for
// exec-server remote mode (docs/remote.md): executors register
// their Noise public key and hold one websocket each; harnesses ask for a
// connect bundle and open one websocket per stream; the rendezvous routes
// relay frames between them by stream_id without decrypting anything.
//
// State sits behind two interfaces: Store (registrations and single-use
// harness authorizations; MemStore for one node, KVStore on NATS JetStream
// for a fleet) and Router (which socket serves which environment and
// stream, in memory on the node holding the executor socket). With
// Options.NATS the server is one node of a fleet (fabric.go): harness
// sockets landing on another node than the executor's are forwarded over
// NATS with credits, and a node that dies is replaced by the node its
// executors redial to.
//
// The relay sees routing metadata (environment ids, stream ids, frame kinds,
// sizes, timing) and the public keys; it never sees plaintext: payloads are
// Noise ciphertext end to end, and the harness pins the executor key the
// registry handed out. A hostile relay can drop, delay or reorder frames and
// can hand out a wrong executor key at /connect; it cannot read or forge
// records of a stream whose key was pinned correctly.
package relay

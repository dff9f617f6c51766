//go:build !amd64 || purego

package b64codec

// vector: vecStd would be encoding/base64 alone here (vector.go).
var vector = false

//go:build !purego

package b64codec

import (
	"github.com/segmentio/asm/cpu"
	"github.com/segmentio/asm/cpu/x86"
)

// vector: vecStd has its AVX2 path here (vector.go).
var vector = cpu.X86.Has(x86.AVX2)

package codexhome

import (
	"strings"
	"testing"
)

// BenchmarkLargeDocuments: the ordering pass stays near linear (a config
// file may hold up to MaxConfigBytes).
func BenchmarkLargeDocuments(b *testing.B) {
	for name, doc := range map[string]string{
		"many array elements": strings.Repeat("[[a]]\nx = 1\ny = 2\n", 20000),
		"many tables": strings.Repeat("[t]\n", 1) + func() string {
			var b strings.Builder
			for i := 0; i < 20000; i++ {
				b.WriteString("[t.k" + strings.Repeat("x", i%7) + itoa(i) + "]\nv = 1\n")
			}
			return b.String()
		}(),
		"deep dotted key": strings.Repeat("a.", 500) + "b = 1\n",
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				tab, err := ParseTOML(doc)
				if err != nil {
					b.Fatal(err)
				}
				_ = Encode(tab)
			}
		})
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

package cli

import (
	"fmt"
	"strings"
)

// parseDetachKeys parses a key sequence in docker's --detach-keys notation:
// comma-separated keys, each a single ASCII character or "ctrl-X" with X one
// of a-z, @, [, \, ], ^ or _. An empty spec is no sequence (never detach).
func parseDetachKeys(spec string) ([]byte, error) {
	if spec == "" {
		return nil, nil
	}
	var seq []byte
	for _, k := range strings.Split(spec, ",") {
		switch {
		case len(k) == 1 && k[0] > 0x20 && k[0] < 0x7f:
			seq = append(seq, k[0])
		case len(k) == 6 && strings.EqualFold(k[:5], "ctrl-"):
			x := k[5]
			switch {
			case x >= 'a' && x <= 'z':
				seq = append(seq, x-'a'+1)
			case x >= 'A' && x <= 'Z':
				seq = append(seq, x-'A'+1)
			case strings.IndexByte("@[\\]^_", x) >= 0:
				seq = append(seq, x-'@')
			default:
				return nil, fmt.Errorf("unknown key %q (want ctrl-a..ctrl-z, ctrl-@, ctrl-[, ctrl-\\, ctrl-], ctrl-^, ctrl-_ or one character)", k)
			}
		default:
			return nil, fmt.Errorf("unknown key %q (want ctrl-a..ctrl-z, ctrl-@, ctrl-[, ctrl-\\, ctrl-], ctrl-^, ctrl-_ or one character)", k)
		}
	}
	return seq, nil
}

// escapeMatcher finds a key sequence in the keystrokes typed. Bytes that
// may start the sequence are held back until it is complete (detach) or
// broken (then they are passed on, as typed).
type escapeMatcher struct {
	seq []byte
	n   int // how many bytes of seq the held-back input matches
}

// feed returns the bytes to pass on and whether the sequence completed;
// input after a completed sequence is dropped.
func (m *escapeMatcher) feed(b []byte) (out []byte, hit bool) {
	if len(m.seq) == 0 {
		return b, false
	}
	for _, c := range b {
		for {
			if c == m.seq[m.n] {
				m.n++
				if m.n == len(m.seq) {
					m.n = 0
					return out, true
				}
				break
			}
			if m.n == 0 {
				out = append(out, c)
				break
			}
			// Broken: pass the first held byte on and retry the rest,
			// which may itself start the sequence.
			out = append(out, m.seq[0])
			held := m.seq[1:m.n]
			m.n = 0
			for _, h := range held {
				var hit bool
				var o []byte
				if o, hit = m.feedByte(h); hit {
					return append(out, o...), true
				}
				out = append(out, o...)
			}
		}
	}
	return out, false
}

func (m *escapeMatcher) feedByte(c byte) ([]byte, bool) { return m.feed([]byte{c}) }

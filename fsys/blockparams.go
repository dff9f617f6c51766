package fsys

import (
	"encoding/json"

	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/protocol"
)

// decodeReadBlockParams decodes fs/readBlock's params. The usual shape,
// {"handleId":"…","offset":N,"len":N} in any order, is read by a flat scan;
// anything else (another member, escapes, a number that is not a plain
// unsigned integer, null, an error) goes through jsonscan as every other
// method's params do, so the result and every error are the same either way
// (FuzzReadBlockParams). Why: encoding/json's reflective walk and the
// stack growth it caused in the fresh handler goroutine were ~6 % of the
// server's CPU for a 1 MiB block (docs/performance.md, "Tenth round").
func decodeReadBlockParams(raw json.RawMessage, p *protocol.FsReadBlockParams) error {
	if readBlockParamsFast(raw, p) {
		return nil
	}
	*p = protocol.FsReadBlockParams{}
	return jsonscan.DecodeParams(raw, p, "FsReadBlockParams", "handleId", "offset", "len")
}

// readBlockParamsFast fills p when raw is an object of exactly the three
// members, each once: handleId a string of printable ASCII without
// escapes, offset and len unsigned integers without sign, fraction,
// exponent or leading zero that fit in 64 bits. It reports false
// otherwise, p then being partly filled.
func readBlockParamsFast(raw []byte, p *protocol.FsReadBlockParams) bool {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	var seen uint8
	for {
		i = jsonscan.SkipSpace(raw, i+1)
		// A member name: one of the three, no escapes.
		if i >= len(raw) || raw[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(raw) && raw[j] != '"' && raw[j] != '\\' {
			j++
		}
		if j >= len(raw) || raw[j] != '"' {
			return false
		}
		name := raw[i+1 : j]
		i = jsonscan.SkipSpace(raw, j+1)
		if i >= len(raw) || raw[i] != ':' {
			return false
		}
		i = jsonscan.SkipSpace(raw, i+1)
		var bit uint8
		switch string(name) {
		case "handleId":
			bit = 1
			if i >= len(raw) || raw[i] != '"' {
				return false
			}
			j := i + 1
			for j < len(raw) && raw[j] >= 0x20 && raw[j] < 0x7f && raw[j] != '"' && raw[j] != '\\' {
				j++
			}
			// An id past jsonscan's bound is refused there, with its
			// own error (and without echoing the whole id).
			if j >= len(raw) || raw[j] != '"' || j-(i+1) > jsonscan.MaxIDBytes {
				return false
			}
			p.HandleID = string(raw[i+1 : j])
			i = j + 1
		case "offset", "len":
			bit = 2
			if name[0] == 'l' {
				bit = 4
			}
			n, k, ok := plainUint(raw, i)
			if !ok {
				return false
			}
			if bit == 2 {
				p.Offset = n
			} else {
				p.Len = n
			}
			i = k
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		i = jsonscan.SkipSpace(raw, i)
		if i >= len(raw) {
			return false
		}
		if raw[i] == '}' {
			return seen == 7 && jsonscan.SkipSpace(raw, i+1) == len(raw)
		}
		if raw[i] != ',' {
			return false
		}
	}
}

// plainUint reads an unsigned decimal integer at raw[i:] (no sign, no
// leading zero, no fraction or exponent) that fits in a uint64, and
// returns it with the index after it.
func plainUint(raw []byte, i int) (uint64, int, bool) {
	start := i
	var n uint64
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		d := uint64(raw[i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, 0, false
		}
		n = n*10 + d
		i++
	}
	if i == start || (raw[start] == '0' && i-start > 1) {
		return 0, 0, false
	}
	if i < len(raw) && (raw[i] == '.' || raw[i] == 'e' || raw[i] == 'E') {
		return 0, 0, false
	}
	return n, i, true
}

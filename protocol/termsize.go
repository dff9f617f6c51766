package protocol

import (
	"bytes"
	"strconv"
)

// Terminal size bounds of process/start's rows and cols and of
// process/resize (both extensions of the protocol).
const (
	MinTermSize = 1
	MaxTermSize = 1000
)

// CheckTermSize validates the top-level rows and cols members of params
// (process/start and process/resize share it, so both accept and refuse the
// same values with the same text): each, when present and not null, must be
// an integer from MinTermSize to MaxTermSize. It runs before the params are
// decoded into their uint16 fields, so 65536 is refused as out of range
// rather than as a type error. A malformed object is left to DecodeParams.
func CheckTermSize(params []byte) error {
	params = bytes.TrimSpace(params)
	if len(params) == 0 || params[0] != '{' {
		return nil
	}
	var bad error
	_ = EachMember(params, func(key, value []byte) error {
		for _, name := range [...]string{"rows", "cols"} {
			if !KeyIs(key, name) || string(value) == "null" {
				continue
			}
			if n, err := strconv.ParseInt(string(value), 10, 64); err != nil || n < MinTermSize || n > MaxTermSize {
				shown := value
				if len(shown) > 32 {
					shown = append(shown[:32:32], "..."...)
				}
				bad = InvalidParams("`%s` must be an integer from %d to %d, got %s", name, MinTermSize, MaxTermSize, shown)
				return bad
			}
		}
		return nil
	})
	return bad
}

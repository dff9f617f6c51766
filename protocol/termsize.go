package protocol

import "strconv"

// Terminal size bounds of process/start's rows and cols and of
// process/resize (both extensions of the protocol).
const (
	MinTermSize = 1
	MaxTermSize = 1000
)

// CheckMember refuses rows or cols outside MinTermSize..MaxTermSize. The
// params decoder calls it for each top-level member during its one walk of
// the params, before they are decoded into uint16 fields, so 65536 is
// refused as out of range rather than as a type error.
func (*StartParams) CheckMember(name, value []byte) error { return checkTermSize(name, value) }

// CheckMember: as StartParams's; process/start and process/resize accept
// and refuse the same values with the same text.
func (*ResizeParams) CheckMember(name, value []byte) error { return checkTermSize(name, value) }

// checkTermSize: a rows or cols member, when not null, must be an integer
// from MinTermSize to MaxTermSize.
func checkTermSize(name, value []byte) error {
	if (string(name) != "rows" && string(name) != "cols") || string(value) == "null" {
		return nil
	}
	if n, err := strconv.ParseInt(string(value), 10, 64); err == nil && n >= MinTermSize && n <= MaxTermSize {
		return nil
	}
	shown := value
	if len(shown) > 32 {
		shown = append(shown[:32:32], "..."...)
	}
	return InvalidParams("`%s` must be an integer from %d to %d, got %s", name, MinTermSize, MaxTermSize, shown)
}

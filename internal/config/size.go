package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a number of bytes. It is written as a whole number of bytes (512) or as a number and
// a unit: KiB, MiB, GiB, TiB are powers of 1024; KB, MB, GB, TB are powers of 1000; K, M, G, T
// alone mean KiB, MiB, GiB, TiB as in php.ini. Units are case-insensitive and may follow a
// space; B is bytes. A fraction (1.5MiB) is allowed with a unit and rounded down to whole bytes.
type Size int64

// Binary size units.
const (
	KiB Size = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

// sizeUnits are the units ParseSize accepts, by lower-case name.
var sizeUnits = map[string]Size{
	"": 1, "b": 1,
	"k": KiB, "kib": KiB, "kb": 1e3,
	"m": MiB, "mib": MiB, "mb": 1e6,
	"g": GiB, "gib": GiB, "gb": 1e9,
	"t": TiB, "tib": TiB, "tb": 1e12,
}

// sizeNames are the units String may print, with their values.
var sizeNames = []struct {
	name string
	n    Size
}{
	{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
}

// ParseSize parses a size such as 512, 64KiB, 8MiB, 1GiB, 8MB or 1.5MiB; see Size.
// The error says what was wanted and repeats s.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	end := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end < 0 {
		end = len(t)
	}
	num, unit := t[:end], strings.ToLower(strings.TrimSpace(t[end:]))
	whole, frac, hasFrac := strings.Cut(num, ".")
	switch {
	case strings.HasPrefix(t, "-"):
		return 0, fmt.Errorf("a size cannot be negative, got %q", s)
	case whole == "" || hasFrac && frac == "" || strings.Contains(frac, "."):
		return 0, fmt.Errorf("want a size like 512, 64KiB or 8MiB, got %q", s)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q in %q: use KiB, MiB, GiB (1024) or KB, MB, GB (1000)", strings.TrimSpace(t[end:]), s)
	}
	if hasFrac && mult == 1 {
		return 0, fmt.Errorf("want a whole number of bytes, got %q", s)
	}
	tooLarge := fmt.Errorf("size %q is too large", s)
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, tooLarge
		}
		return 0, fmt.Errorf("want a size like 512, 64KiB or 8MiB, got %q", s)
	}
	if w > math.MaxInt64/int64(mult) {
		return 0, tooLarge
	}
	n := Size(w) * mult
	if hasFrac {
		f, err := strconv.ParseFloat("0."+frac, 64)
		if err != nil {
			return 0, fmt.Errorf("want a size like 512, 64KiB or 8MiB, got %q", s)
		}
		extra := math.Floor(f * float64(mult))
		if float64(n)+extra >= math.MaxInt64 {
			return 0, tooLarge
		}
		n += Size(extra)
	}
	return n, nil
}

// String returns the size in the largest unit that divides it exactly (8MiB, 64KiB, 8MB), or as
// a plain number of bytes (512). ParseSize reads it back to the same value.
func (s Size) String() string {
	best, unit := s, ""
	if s > 0 {
		for _, u := range sizeNames {
			if s%u.n == 0 && s/u.n < best {
				best, unit = s/u.n, u.name
			}
		}
	}
	return strconv.FormatInt(int64(best), 10) + unit
}

// MarshalText returns String, so that a Size works with flag.TextVar and text encoders.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses text with ParseSize.
func (s *Size) UnmarshalText(text []byte) error {
	v, err := ParseSize(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

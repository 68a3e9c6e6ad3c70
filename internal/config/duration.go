package config

import (
	"fmt"
	"strings"
	"time"
)

// Duration is a span of time written in Go syntax: numbers with units, such as 500ms, 10s, 1m30s
// or 2h (units ns, us, ms, s, m, h). A bare number other than 0 is an error, so that 30 cannot be
// misread as seconds or milliseconds.
type Duration time.Duration

// ParseDuration parses a duration in Go syntax; see Duration. The error says what was wanted and
// repeats s; for a bare number it says which unit to add.
func ParseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	d, err := time.ParseDuration(t)
	if err == nil {
		return Duration(d), nil
	}
	if isDecimal(t) {
		return 0, fmt.Errorf("want a duration with a unit, got %q: add one, e.g. %ss for seconds or %sms for milliseconds", s, t, t)
	}
	return 0, fmt.Errorf("want a duration like 500ms, 10s or 1m30s, got %q", s)
}

// isDecimal reports whether s is a plain decimal number such as 30, -5 or 1.5.
func isDecimal(s string) bool {
	s = strings.TrimLeft(s, "+-")
	whole, frac, _ := strings.Cut(s, ".")
	digits := func(s string) bool { return strings.Trim(s, "0123456789") == "" }
	return whole+frac != "" && digits(whole) && digits(frac)
}

// String returns the duration in Go syntax without zero components: 10s, 500ms, 1m30s, 1m, 2h.
// ParseDuration reads it back to the same value.
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// MarshalText returns String, so that a Duration works with flag.TextVar and text encoders.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses text with ParseDuration.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := ParseDuration(string(text))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

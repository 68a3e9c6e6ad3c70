package config

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem with a configuration: where it is and what is wrong. Load, Parse and
// Validate return an *Error, or several joined with errors.Join (one per line of the message,
// in file order); errors.As finds the first.
type Error struct {
	// File is the configuration file as named to Load or Parse; empty when the value did not
	// come from a file, as in Validate's errors.
	File string
	// Line is the 1-based line in File; 0 when unknown, e.g. for a default value.
	Line int
	// Key is the dotted key, such as workers.count, workers.env.APP_ENV or workers.watch[1];
	// empty when the problem concerns the file as a whole, like a YAML syntax error.
	Key string
	// Msg says what is wrong and, where it helps, how to fix it.
	Msg string
}

// Error formats e as file:line: key: message, leaving out the parts that are unknown, e.g.
// peregrine.yaml:7: workers.count: want a whole number, got "many".
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// joinErrors returns nil for no errors, the error itself for one, and otherwise all of them
// joined, sorted by line with the errors of unknown line last.
func joinErrors(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	slices.SortStableFunc(errs, func(a, b *Error) int {
		if (a.Line == 0) != (b.Line == 0) {
			return cmp.Compare(b.Line, a.Line) // the one with a line first
		}
		return cmp.Compare(a.Line, b.Line)
	})
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}

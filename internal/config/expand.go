package config

import (
	"errors"
	"fmt"
	"strings"
)

// maxExpandDepth bounds defaults nested in defaults, ${A:-${B:-...}}.
const maxExpandDepth = 16

// expand replaces ${NAME} in s with the variable's value and ${NAME:-default} with the value, or
// with default (itself expanded) when the variable is unset or empty; $$ stands for one $. Any
// other $, and a } outside a default, is kept as is. lookup reports a variable's value and whether it is set.
func expand(s string, lookup func(string) (string, bool)) (string, error) {
	e := expander{s: s, lookup: lookup}
	return e.run(true, 0)
}

// expander is one expansion in progress over s; i is the next byte to read.
type expander struct {
	s      string
	i      int
	lookup func(string) (string, bool)
}

// run expands from e.i to the end of s or, when depth > 0, to the } that closes a default, which
// it consumes. When eval is false it only skips over the text (a default that is not used), so
// unset variables there are no error.
func (e *expander) run(eval bool, depth int) (string, error) {
	var out strings.Builder
	for e.i < len(e.s) {
		c := e.s[e.i]
		switch {
		case c == '}' && depth > 0:
			e.i++
			return out.String(), nil
		case c != '$' || e.i+1 == len(e.s):
			out.WriteByte(c)
			e.i++
		case e.s[e.i+1] == '$':
			out.WriteByte('$')
			e.i += 2
		case e.s[e.i+1] == '{':
			v, err := e.reference(eval, depth)
			if err != nil {
				return "", err
			}
			out.WriteString(v)
		default:
			out.WriteByte(c)
			e.i++
		}
	}
	if depth > 0 {
		return "", errors.New("unterminated ${ in a default: add the closing }")
	}
	return out.String(), nil
}

// reference expands the ${...} starting at e.i.
func (e *expander) reference(eval bool, depth int) (string, error) {
	start := e.i
	e.i += 2
	name := e.s[e.i:]
	if n := strings.IndexFunc(name, func(r rune) bool { return !isNameRune(r) }); n >= 0 {
		name = name[:n]
	}
	e.i += len(name)
	bad := func() error {
		ref := e.s[start:]
		if end := strings.IndexByte(ref, '}'); end >= 0 {
			ref = ref[:end+1]
		}
		return fmt.Errorf("bad variable reference %q: want ${NAME} or ${NAME:-default} (write $$ for a literal $)", ref)
	}
	switch {
	case e.i == len(e.s):
		return "", fmt.Errorf("unterminated %q: add the closing }", e.s[start:])
	case name == "" || name[0] >= '0' && name[0] <= '9':
		return "", bad()
	}
	value, set := "", false
	if eval {
		value, set = e.lookup(name)
	}
	switch {
	case strings.HasPrefix(e.s[e.i:], "}"):
		e.i++
		if eval && !set {
			return "", fmt.Errorf("environment variable %s is not set: set it, or give a default with ${%s:-default}", name, name)
		}
		return value, nil
	case strings.HasPrefix(e.s[e.i:], ":-"):
		if depth+1 > maxExpandDepth {
			return "", errors.New("defaults nested too deeply in ${...}")
		}
		e.i += 2
		useDefault := eval && value == ""
		def, err := e.run(useDefault, depth+1)
		if err != nil {
			return "", err
		}
		if useDefault {
			return def, nil
		}
		return value, nil
	default:
		return "", bad()
	}
}

func isNameRune(r rune) bool {
	return r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// escapeDollars makes s survive expand unchanged: it doubles every $ that expand would otherwise
// read as the start of $$ or ${.
func escapeDollars(s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '$' && i+1 < len(s) && (s[i+1] == '$' || s[i+1] == '{') {
			b.WriteByte('$')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

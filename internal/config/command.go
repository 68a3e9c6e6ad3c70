package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// phpProgram is a PHP CLI binary's name (php, php8.2, php-cli), as worker.IsPHP tests it: the
// programs the native runtime takes the place of.
var phpProgram = regexp.MustCompile(`^php(-cli)?[0-9.]*$`)

// isPHP reports whether program runs PHP, so that the native runtime can run its script.
func isPHP(program string) bool {
	return phpProgram.MatchString(filepath.Base(program))
}

// shellOperators are the characters that mean something to a shell beyond quoting. The command
// runs without a shell, so SplitCommand refuses them outside quotes rather than pass them to
// php as arguments.
const shellOperators = "|&;<>()`"

// SplitCommand splits s into a program and its arguments the way a POSIX shell splits words:
// blanks separate words; single quotes keep everything up to the next single quote; double
// quotes keep everything up to the next unescaped double quote, where a backslash escapes only
// " \ $ ` and newline; elsewhere a backslash keeps the next character, and a backslash before a
// newline joins lines. There are no variables, globs or tildes: a $ or * is kept as is. An
// unterminated quote, a trailing backslash or an unquoted shell operator (| & ; < > ( ) `) is an
// error.
func SplitCommand(s string) ([]string, error) {
	var (
		args   []string
		word   strings.Builder
		inWord bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inWord {
				args = append(args, word.String())
				word.Reset()
				inWord = false
			}
		case c == '\\':
			i++
			if i == len(s) {
				return nil, errors.New("the command ends with a backslash")
			}
			if s[i] != '\n' {
				word.WriteByte(s[i])
				inWord = true
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("unterminated single quote in the command")
			}
			word.WriteString(s[i+1 : i+1+end])
			i += 1 + end
			inWord = true
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i == len(s) {
					return nil, errors.New("unterminated double quote in the command")
				}
				if s[i] == '"' {
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
					i++
					if s[i] == '\n' {
						continue
					}
				}
				word.WriteByte(s[i])
			}
		case strings.IndexByte(shellOperators, c) >= 0:
			return nil, fmt.Errorf("%q means something to a shell, but the command runs without one: quote it, or run a wrapper script", c)
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		args = append(args, word.String())
	}
	return args, nil
}

// plainWord reports whether SplitCommand reads s back as one word unchanged.
func plainWord(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\n\r'\"\\"+shellOperators)
}

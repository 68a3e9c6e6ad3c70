package config

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
	}{
		{"0", 0},
		{"512", 512},
		{"512B", 512},
		{"512 b", 512},
		{"64KiB", 64 << 10},
		{"64kib", 64 << 10},
		{"64K", 64 << 10},
		{"64k", 64 << 10},
		{"64KB", 64000},
		{"8MiB", 8 << 20},
		{"8M", 8 << 20},
		{"8MB", 8_000_000},
		{"8mb", 8_000_000},
		{"1GiB", 1 << 30},
		{"1G", 1 << 30},
		{"1GB", 1_000_000_000},
		{"2TiB", 2 << 40},
		{"2TB", 2e12},
		{"1.5MiB", 3 << 19},
		{"0.5KB", 500},
		{"1.1KiB", 1126},
		{" 8 MiB ", 8 << 20},
		{"007", 7},
		{"8388607TiB", 8388607 << 40},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseSizeErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `want a size like 512, 64KiB or 8MiB, got ""`},
		{"MiB", `want a size like 512, 64KiB or 8MiB, got "MiB"`},
		{"big", `want a size like 512, 64KiB or 8MiB, got "big"`},
		{"1.", `want a size like 512, 64KiB or 8MiB, got "1."`},
		{".5M", `want a size like 512, 64KiB or 8MiB, got ".5M"`},
		{"1.2.3M", `want a size like 512, 64KiB or 8MiB, got "1.2.3M"`},
		{"+1", `want a size like 512, 64KiB or 8MiB, got "+1"`},
		{"-1", `a size cannot be negative, got "-1"`},
		{"-1MiB", `a size cannot be negative, got "-1MiB"`},
		{"1.5", `want a whole number of bytes, got "1.5"`},
		{"1.5B", `want a whole number of bytes, got "1.5B"`},
		{"8 potatoes", `unknown unit "potatoes" in "8 potatoes": use KiB, MiB, GiB (1024) or KB, MB, GB (1000)`},
		{"8PiB", `unknown unit "PiB" in "8PiB": use KiB, MiB, GiB (1024) or KB, MB, GB (1000)`},
		{"1e3", `unknown unit "e3" in "1e3": use KiB, MiB, GiB (1024) or KB, MB, GB (1000)`},
		{"9223372036854775808", `size "9223372036854775808" is too large`},
		{"8388608TiB", `size "8388608TiB" is too large`},
		{"8388607.999999999999TiB", `size "8388607.999999999999TiB" is too large`},
		{"8388608.5TiB", `size "8388608.5TiB" is too large`},
	}
	for _, tt := range tests {
		if got, err := ParseSize(tt.in); err == nil || err.Error() != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want error %s", tt.in, got, err, tt.want)
		}
	}
}

func TestSizeString(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{0, "0"},
		{1, "1"},
		{512, "512"},
		{1000, "1KB"},
		{1024, "1KiB"},
		{1536, "1536"},
		{3 << 19, "1536KiB"},
		{8 << 20, "8MiB"},
		{8_000_000, "8MB"},
		{1 << 30, "1GiB"},
		{1_024_000_000, "1024MB"},
		{5 << 40, "5TiB"},
		{-3, "-3"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
		}
		if tt.in >= 0 {
			if back, err := ParseSize(tt.in.String()); err != nil || back != tt.in {
				t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in.String(), back, err, tt.in)
			}
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"0s", 0},
		{"500ms", 500 * time.Millisecond},
		{"10s", 10 * time.Second},
		{" 10s ", 10 * time.Second},
		{"1m30s", 90 * time.Second},
		{"1.5h", 90 * time.Minute},
		{"250us", 250 * time.Microsecond},
		{"-5s", -5 * time.Second},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if err != nil || time.Duration(got) != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseDurationErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"10", `want a duration with a unit, got "10": add one, e.g. 10s for seconds or 10ms for milliseconds`},
		{"1.5", `want a duration with a unit, got "1.5": add one, e.g. 1.5s for seconds or 1.5ms for milliseconds`},
		{"", `want a duration like 500ms, 10s or 1m30s, got ""`},
		{"soon", `want a duration like 500ms, 10s or 1m30s, got "soon"`},
		{"10 seconds", `want a duration like 500ms, 10s or 1m30s, got "10 seconds"`},
		{"1d", `want a duration like 500ms, 10s or 1m30s, got "1d"`},
		{"inf", `want a duration like 500ms, 10s or 1m30s, got "inf"`},
	}
	for _, tt := range tests {
		if got, err := ParseDuration(tt.in); err == nil || err.Error() != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want error %s", tt.in, got, err, tt.want)
		}
	}
}

func TestDurationString(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{500 * time.Millisecond, "500ms"},
		{10 * time.Second, "10s"},
		{60 * time.Second, "1m"},
		{90 * time.Second, "1m30s"},
		{10 * time.Minute, "10m"},
		{2 * time.Hour, "2h"},
		{2*time.Hour + 30*time.Minute, "2h30m"},
		{time.Hour + time.Second, "1h0m1s"},
		{-time.Minute, "-1m"},
		{1500 * time.Millisecond, "1.5s"},
	}
	for _, tt := range tests {
		d := Duration(tt.in)
		if got := d.String(); got != tt.want {
			t.Errorf("Duration(%v).String() = %q, want %q", tt.in, got, tt.want)
		}
		if back, err := ParseDuration(d.String()); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", d.String(), back, err, tt.in)
		}
	}
}

// TestFlags checks that Size and Duration work as flag.TextVar values, as the command line uses
// them.
func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	size, timeout := Size(8*MiB), Duration(time.Minute)
	fs.TextVar(&size, "max-body-size", size, "")
	fs.TextVar(&timeout, "exec-timeout", timeout, "")
	if err := fs.Parse([]string{"--max-body-size", "1GiB", "--exec-timeout", "90s"}); err != nil {
		t.Fatal(err)
	}
	if size != GiB || timeout != Duration(90*time.Second) {
		t.Errorf("flags gave %v, %v", size, timeout)
	}
	err := fs.Parse([]string{"--exec-timeout", "90"})
	if err == nil || !strings.Contains(err.Error(), "add one, e.g. 90s") {
		t.Errorf("bad duration flag: %v", err)
	}
}

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  \t\n", nil},
		{"php worker.php", []string{"php", "worker.php"}},
		{"  php   worker.php  ", []string{"php", "worker.php"}},
		{"php -d 'memory_limit=1G' w.php", []string{"php", "-d", "memory_limit=1G", "w.php"}},
		{`php "my worker.php"`, []string{"php", "my worker.php"}},
		{`php my\ worker.php`, []string{"php", "my worker.php"}},
		{`php 'it'\''s.php'`, []string{"php", "it's.php"}},
		{`a"b"'c'd`, []string{"abcd"}},
		{`php ""`, []string{"php", ""}},
		{`php ''`, []string{"php", ""}},
		{`"a\"b\\c\$d\e"`, []string{`a"b\c$d\e`}},
		{`'a\"b'`, []string{`a\"b`}},
		{"php \\\n  w.php", []string{"php", "w.php"}},
		{"\"a\\\nb\"", []string{"ab"}},
		{`php $HOME/*.php ~/w.php`, []string{"php", "$HOME/*.php", "~/w.php"}},
		{`php -r 'echo 1 | 2;'`, []string{"php", "-r", "echo 1 | 2;"}},
		{`php a\|b`, []string{"php", "a|b"}},
		{"php\u00a0w.php", []string{"php\u00a0w.php"}},
	}
	for _, tt := range tests {
		got, err := SplitCommand(tt.in)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestSplitCommandErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{`php 'w.php`, "unterminated single quote in the command"},
		{`php "w.php`, "unterminated double quote in the command"},
		{`php "w.php\"`, "unterminated double quote in the command"},
		{`php w.php\`, "the command ends with a backslash"},
		{`php w.php > log`, `'>' means something to a shell, but the command runs without one: quote it, or run a wrapper script`},
		{`php w.php; echo`, `';' means something to a shell, but the command runs without one: quote it, or run a wrapper script`},
		{`php w.php &`, `'&' means something to a shell, but the command runs without one: quote it, or run a wrapper script`},
		{"php `x`", "'`' means something to a shell, but the command runs without one: quote it, or run a wrapper script"},
		{`php $(x)`, `'(' means something to a shell, but the command runs without one: quote it, or run a wrapper script`},
	}
	for _, tt := range tests {
		if got, err := SplitCommand(tt.in); err == nil || err.Error() != tt.want {
			t.Errorf("SplitCommand(%q) = %q, %v; want error %s", tt.in, got, err, tt.want)
		}
	}
}

func TestPlainWord(t *testing.T) {
	for _, s := range []string{"php", "worker.php", "-d", "x=1", "$x", "a*b", "é"} {
		if !plainWord(s) {
			t.Errorf("plainWord(%q) = false", s)
		}
		if got, err := SplitCommand(s); err != nil || !slices.Equal(got, []string{s}) {
			t.Errorf("SplitCommand(%q) = %q, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "a b", "a'b", `a"b`, `a\b`, "a|b", "a\tb", "(x)"} {
		if plainWord(s) {
			t.Errorf("plainWord(%q) = true", s)
		}
	}
}

func TestExpand(t *testing.T) {
	vars := env(map[string]string{"A": "alpha", "EMPTY": "", "B_2": "beta", "DOLLAR": "${A}"})
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"${A}", "alpha"},
		{"x${A}y${B_2}z", "xalphaybetaz"},
		{"${EMPTY}", ""},
		{"${EMPTY:-def}", "def"},
		{"${UNSET:-def}", "def"},
		{"${A:-def}", "alpha"},
		{"${UNSET:-}", ""},
		{"${UNSET:-a b:c}", "a b:c"},
		{"${UNSET:-${A}}", "alpha"},
		{"${UNSET:-${NOPE:-deep}}", "deep"},
		{"${A:-${NOPE}}", "alpha"}, // an unused default is not expanded
		{"${UNSET:-$${x}}", "${x}"},
		{"${DOLLAR}", "${A}"}, // values are not expanded again
		{"$$", "$"},
		{"$${A}", "${A}"},
		{"$$$", "$$"},
		{"$A $ a$", "$A $ a$"},
		{"}", "}"},
		{"${A}}", "alpha}"},
	}
	for _, tt := range tests {
		got, err := expand(tt.in, vars)
		if err != nil || got != tt.want {
			t.Errorf("expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestExpandErrors(t *testing.T) {
	vars := env(map[string]string{"A": "alpha"})
	tests := []struct{ in, want string }{
		{"${NOPE}", "environment variable NOPE is not set: set it, or give a default with ${NOPE:-default}"},
		{"${UNSET:-${NOPE}}", "environment variable NOPE is not set: set it, or give a default with ${NOPE:-default}"},
		{"${}", `bad variable reference "${}": want ${NAME} or ${NAME:-default} (write $$ for a literal $)`},
		{"${1A}", `bad variable reference "${1A}": want ${NAME} or ${NAME:-default} (write $$ for a literal $)`},
		{"${A-x}", `bad variable reference "${A-x}": want ${NAME} or ${NAME:-default} (write $$ for a literal $)`},
		{"${A:=x}", `bad variable reference "${A:=x}": want ${NAME} or ${NAME:-default} (write $$ for a literal $)`},
		{"${A B}", `bad variable reference "${A B}": want ${NAME} or ${NAME:-default} (write $$ for a literal $)`},
		{"${A", `unterminated "${A": add the closing }`},
		{"${", `unterminated "${": add the closing }`},
		{"${A:-x", "unterminated ${ in a default: add the closing }"},
		{"${A:-${}}", `bad variable reference "${}": want ${NAME} or ${NAME:-default} (write $$ for a literal $)`},
		{strings.Repeat("${X:-", 17) + strings.Repeat("}", 17), "defaults nested too deeply in ${...}"},
	}
	for _, tt := range tests {
		if got, err := expand(tt.in, vars); err == nil || err.Error() != tt.want {
			t.Errorf("expand(%q) = %q, %v; want error %s", tt.in, got, err, tt.want)
		}
	}
}

func TestEscapeDollars(t *testing.T) {
	vars := env(nil)
	for _, s := range []string{"", "$", "$$", "$$$", "${A}", "$${A}", "a$b", "${", "x$", "$ {", "}$"} {
		got, err := expand(escapeDollars(s), vars)
		if err != nil || got != s {
			t.Errorf("expand(escapeDollars(%q)) = %q, %v", s, got, err)
		}
	}
}

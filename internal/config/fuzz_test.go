package config

import (
	"os"
	"testing"
)

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512", "64KiB", "8MiB", "1GiB", "8MB", "1.5MiB", "8 m", "-1", "1e3", "9223372036854775807", "8388607.9TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d, negative", s, n)
		}
		back, err := ParseSize(n.String())
		if err != nil || back != n {
			t.Fatalf("ParseSize(%q) = %d; its String %q parses to %d, %v", s, n, n.String(), back, err)
		}
	})
}

// FuzzParse feeds arbitrary bytes to the parser. It must not panic, and whatever it accepts must
// survive a round trip through EffectiveYAML.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/full.yaml", "testdata/reference.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "http: {address: ':0'}", "workers:\n  command: [php, ${X:-w.php}]\n  env: {A: $$}\n",
		"a: &a [*a]", "workers: &w\n  watch: *w\n", "log:\n  level: ${LEVEL}\n", "http:\n\taddress: x\n",
		"workers:\n  command: 'php \"x'\n", "---\n---\n", "workers:\n  env:\n    ? [a]\n    : b\n",
	} {
		f.Add([]byte(s))
	}
	vars := env(map[string]string{"X": "x", "LEVEL": "debug", "EMPTY": ""})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parse("fuzz.yaml", data, vars)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		out := c.EffectiveYAML()
		back, err := parse("effective.yaml", out, vars)
		if err != nil {
			t.Fatalf("EffectiveYAML does not parse: %v\ninput:\n%s\noutput:\n%s", err, data, out)
		}
		assertEqual(t, back, c)
	})
}

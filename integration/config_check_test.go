package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestConfigCheckTakesServesArguments (issue 25 item 25): peregrine config check checks the
// config serve would run with the same arguments, so a file meant for serve --laravel or
// --symfony (no workers.command of its own) is checked with what serve adds, and printed with
// it; what serve would refuse with those arguments, config check refuses.
func TestConfigCheckTakesServesArguments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	if err := os.MkdirAll(filepath.Join(app, "public"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	forApp := write("app.yaml", "workers:\n  count: 3\nhttp:\n  max_body_size: 1MiB\n")
	concurrent := write("concurrent.yaml", "workers:\n  count: 2\n  concurrency: 8\n")
	q := regexp.QuoteMeta
	for _, tt := range []struct {
		name     string
		args     []string
		wantCode int
		want     []string // regexps the output must match
	}{
		{"without the application", []string{"-c", forApp}, 1, []string{`workers.command: no worker to run`, `--laravel DIR`}},
		{"--laravel", []string{"-c", forApp, "--laravel", app}, 0,
			[]string{`count: 3`, `max_body_size: 1MiB`, `command: php \S+/bin/laravel-worker\.php ` + q(app), `root: ` + q(filepath.Join(app, "public")),
				`dir: ` + q(app), `runtime: native`}},
		{"--symfony, flags first", []string{"--symfony", app, "--workers", "5", "-c", forApp}, 0,
			[]string{`count: 5`, `command: php \S+/bin/symfony-worker\.php ` + q(app)}},
		{"--laravel without a file: the defaults", []string{"--laravel", app}, 0, []string{`laravel-worker\.php`, `address: 127\.0\.0\.1:8080`}},
		{"a worker script", []string{fixture(t, "app.php"), "--address", "127.0.0.1:9999"}, 0,
			[]string{`command: php ` + q(fixture(t, "app.php")), `address: 127\.0\.0\.1:9999`}},
		{"--root: classic mode", []string{"--root", app}, 0, []string{`root: ` + q(app)}},
		{"--laravel refuses concurrency", []string{"-c", concurrent, "--laravel", app}, 1, []string{`workers.concurrency is 8`}},
		{"--laravel and a script", []string{"--laravel", app, "x.php"}, 1, []string{`bring their own worker script`}},
		{"not a directory", []string{"--symfony", filepath.Join(dir, "nope")}, 1, []string{`nope is not a directory`}},
		{"two scripts", []string{"a.php", "b.php"}, 1, []string{`one worker script at most`}},
		{"--help", []string{"--help"}, 0, []string{`usage: peregrine config check`, `-laravel`, `-symfony`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, code := runCLI(t, dir, nil, append([]string{"config", "check"}, tt.args...)...)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tt.wantCode, out)
			}
			for _, re := range tt.want {
				if !regexp.MustCompile(re).MatchString(out) {
					t.Errorf("output does not match %q:\n%s", re, out)
				}
			}
		})
	}
}

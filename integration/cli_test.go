package integration

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// runCLI runs the binary to completion and returns its combined output and exit code.
func runCLI(t *testing.T, dir string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("peregrine %v did not finish: %s", args, out)
	}
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("peregrine %v: %v", args, err)
		}
	}
	return string(out), cmd.ProcessState.ExitCode()
}

func TestCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "workers:\n  command: php worker.php\n  count: 3\nhttp:\n  max_body_size: 1MiB\n")
	badKey := write("bad-key.yaml", "workers:\n  command: php worker.php\n  cuont: 3\n")
	badValue := write("bad-value.yaml", "http:\n  address: 127.0.0.1:8080\n  max_body_size: lots\n")
	cliRuntime := write("cli.yaml", "workers:\n  command: php "+fixture(t, "app.php")+"\n  runtime: cli\n")

	tests := []struct {
		name     string
		args     []string
		env      []string
		wantCode int
		want     []string // regexps the output must match
	}{
		{"no arguments", nil, nil, 1, []string{`Usage`}},
		{"unknown command", []string{"frobnicate"}, nil, 1, []string{`unknown command "frobnicate"`}},
		{"version", []string{"version"}, nil, 0, []string{`peregrine \d+\.\d+\.\d+`, `go 1\.\d+`, `php 8\.\d+\.\d+`, `native runtime \S+peregrine-php \(PHP 8\.\d+`}},
		{"serve with nothing to serve", []string{"serve"}, nil, 1, []string{`peregrine serve worker.php`, `peregrine.yaml`}},
		{"config check prints defaults", []string{"config", "check", "-c", good}, nil, 0,
			[]string{`count: 3`, `max_body_size: 1MiB`, `exec_timeout: (1m|60s)`, `address: 127.0.0.1:8080`}},
		{"config check unknown key", []string{"config", "check", "-c", badKey}, nil, 1, []string{`bad-key.yaml:3`, `cuont`}},
		{"config check bad value", []string{"config", "check", "-c", badValue}, nil, 1, []string{`bad-value.yaml:3`, `max_body_size`}},
		{"config check missing file", []string{"config", "check", "-c", filepath.Join(dir, "nope.yaml")}, nil, 1, []string{`nope.yaml`}},
		{"PHP missing", []string{"serve", "-c", cliRuntime, "--address", "127.0.0.1:0"}, []string{"PATH=" + dir}, 1,
			[]string{`PHP not found`, `"php"`, `apt-get install php8.2-cli`}},
		{"unknown runtime", []string{"serve", "-c", write("runtime.yaml", "workers:\n  command: php x.php\n  runtime: fpm\n")}, nil, 1,
			[]string{`workers.runtime`, `native, cli`}},
		{"classic mode needs the native runtime", []string{"serve", "-c", write("classic-cli.yaml", "http:\n  root: .\nworkers:\n  runtime: cli\n")}, nil, 1,
			[]string{`workers.runtime`, `classic mode`}},
		{"bad --workers", []string{"serve", fixture(t, "app.php"), "--workers", "many"}, nil, 1, []string{`--workers`}},
		{"serve --help", []string{"serve", "--help"}, nil, 0, []string{`usage: peregrine serve`, `-address`, `-workers`}},
		{"memory_limit has a safe default", []string{"config", "check", "-c", good}, nil, 0, []string{`memory_limit: 128M`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := runCLI(t, dir, tt.env, tt.args...)
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

func TestServeWithFlagsAfterTheScript(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "serve", fixture(t, "app.php"), "--workers", "1", "--address", "127.0.0.1:0")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PEREGRINE_TEST_TAG=flags")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// stderr is a pipe, so log.format auto is JSON and the banner is a record of it.
	banner := regexp.MustCompile(`^\{.*"level":"INFO","msg":"peregrine \d+\.\d+\.\d+ serving http://127\.0\.0\.1:\d+ with 1 workers \(PHP 8\.\d+\.\d+\)".*"url":"http://127\.0\.0\.1:\d+"`)
	sc := bufio.NewScanner(stderr)
	var lines []string
	for sc.Scan() {
		if banner.MatchString(sc.Text()) {
			return
		}
		lines = append(lines, sc.Text())
	}
	t.Fatalf("no banner line in:\n%s", strings.Join(lines, "\n"))
}

func TestPortInUseExits1(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out, code := runCLI(t, t.TempDir(), nil, "serve", fixture(t, "app.php"), "--address", ln.Addr().String())
	if code != 1 || !strings.Contains(out, "address already in use") || !strings.Contains(out, "http.address") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

package integration

// The operator's first day (issue 15 items 18-24): what a new operator meets when starting,
// reloading, logging and installing the server.

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A relative watch glob is relative to workers.dir (default: the directory peregrine started
// in); it used to be walked from "/" and stop the server from starting.
func TestWatchRelativeGlob(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n  watch: [\"*.php\"]\n")
	first := pidOf(t, s)
	if err := os.WriteFile(filepath.Join(s.dir, "index.php"), []byte("<?php\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.log.waitFor(t, `all workers replaced`, 10*time.Second)
	if pidOf(t, s) == first {
		t.Fatal("worker not replaced after index.php changed")
	}
}

// A boot failure says PHP's message once, with the count of workers that failed the same way
// (issue 15 item 19: 16 workers printed it 32 times and more).
func TestBootFailureSaidOnce(t *testing.T) {
	t.Parallel()
	s := launch(t, "workers:\n  command: php "+fixture(t, "boot-syntax-error.php")+"\n  count: 6\n")
	if code := s.wait(t, 60*time.Second); code != 1 {
		t.Fatalf("exit code %d, want 1; log:\n%s", code, s.log.String())
	}
	log := s.log.String()
	// Once in the log (at ERROR), once in the error that ends the server.
	if n := strings.Count(log, "syntax error, unexpected"); n != 2 {
		t.Errorf("PHP's message printed %d times, want 2 (the log line and the error); log:\n%s", n, log)
	}
	if !strings.Contains(log, "6 of 6 workers") {
		t.Errorf("the error does not say how many workers failed; log:\n%s", log)
	}
	if !regexp.MustCompile(`"level":"ERROR","msg":"PHP Parse error`).MatchString(log) {
		t.Errorf("the parse error is not logged at ERROR; log:\n%s", log)
	}
}

// PHP's fatal errors are logged at ERROR, and an uncaught exception with its stack trace is one
// record (issue 15 item 22).
func TestPHPFatalLoggedAsOneErrorRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "throw.php")
	if err := os.WriteFile(script, []byte("<?php\nfunction f() { throw new RuntimeException('boom at boot'); }\nf();\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := launch(t, "log:\n  format: json\nworkers:\n  command: php "+script+"\n  runtime: native\n  count: 1\n")
	s.wait(t, 60*time.Second)
	var record map[string]any
	for _, line := range strings.Split(s.log.String(), "\n") {
		if strings.Contains(line, "boom at boot") && strings.HasPrefix(line, "{") {
			if err := json.Unmarshal([]byte(line), &record); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			break
		}
	}
	if record == nil {
		t.Fatalf("no JSON record of the exception; log:\n%s", s.log.String())
	}
	msg, _ := record["msg"].(string)
	if record["level"] != "ERROR" || !strings.Contains(msg, "Stack trace:\n#0 ") || !strings.Contains(msg, "#1 {main}") || !strings.Contains(msg, "thrown in") {
		t.Errorf("want one ERROR record holding the whole trace, got %v; log:\n%s", record, s.log.String())
	}
	if n := strings.Count(s.log.String(), `"msg":"#1 {main}"`); n != 0 {
		t.Errorf("a stack trace line logged as a record of its own; log:\n%s", s.log.String())
	}
}

// The bodies of 503 and 504 name no config key; the log does (issue 15 item 20). The request
// that exec_timeout cuts keeps the one worker busy for the 503: exec_timeout leaves the test
// seconds to see it begin (its log line may come late) and send the second.
func TestErrorBodiesNameNoConfigKey(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n  allocate_timeout: 300ms\n  exec_timeout: 10s\n")
	slow := getAsync(s.URL + "/sleep?ms=60000")
	s.log.waitFor(t, `sleeping in /sleep\?ms=60000`, 10*time.Second)
	busy := get(t, s.URL+"/pid")
	o := <-slow
	if o.err != nil {
		t.Fatalf("the request past exec_timeout: %v", o.err)
	}
	timedOut := o.response
	keys := regexp.MustCompile(`allocate_timeout|max_queue|exec_timeout|workers\.`)
	for _, r := range []response{busy, timedOut} {
		if keys.Match(r.Body) {
			t.Errorf("%d body names a config key: %q", r.Status, r.Body)
		}
	}
	if busy.Status != http.StatusServiceUnavailable || timedOut.Status != http.StatusGatewayTimeout {
		t.Fatalf("statuses %d and %d, want 503 and 504", busy.Status, timedOut.Status)
	}
	s.log.waitFor(t, `allocate_timeout`, 10*time.Second)
	s.log.waitFor(t, `exec_timeout`, 10*time.Second)
}

// The command line (issue 15 item 23): COMMAND --help prints its usage and exits 0, an unknown
// command is named first, config check opens the TLS files as serve would.
func TestCommandLineHelpAndChecks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missingTLS := filepath.Join(dir, "tls.yaml")
	yaml := "workers:\n  command: php x.php\nhttp:\n  tls:\n    cert: " + filepath.Join(dir, "nope.pem") + "\n    key: " + filepath.Join(dir, "nope.key") + "\n"
	if err := os.WriteFile(missingTLS, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args     []string
		wantCode int
		want     string // a regexp the output must match
	}{
		{[]string{"workers", "--help"}, 0, `(?s)^usage: peregrine workers .*-json`},
		{[]string{"reset", "-h"}, 0, `(?s)^usage: peregrine reset .*-c string`},
		{[]string{"config", "check", "--help"}, 0, `^usage: peregrine config check`},
		{[]string{"tables", "--help"}, 0, `^usage: peregrine tables`},
		{[]string{"jobs", "--help"}, 0, `(?s)^usage:.*-delay`},
		{[]string{"frobnicate"}, 1, `^peregrine: unknown command "frobnicate"`},
		{[]string{"config", "check", "-c", missingTLS}, 1, `http\.tls\.cert.*nope\.pem: no such file`},
	}
	for _, tt := range tests {
		out, code := runCLI(t, dir, nil, tt.args...)
		if code != tt.wantCode || !regexp.MustCompile(tt.want).MatchString(out) {
			t.Errorf("peregrine %v: exit %d, want %d and output matching %q; got:\n%s", tt.args, code, tt.wantCode, tt.want, out)
		}
		if strings.Contains(out, "flag: help requested") {
			t.Errorf("peregrine %v: %s", tt.args, out)
		}
	}
}

// A second SIGINT ends the graceful stop at once: a request that would hold it for an hour
// fails and the server exits (issue 15 item 23).
func TestSecondSIGINTStopsAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n  exec_timeout: 1h\n  stop_timeout: 1h\n")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = doErr(context.Background(), "GET", s.URL+"/sleep?ms=3600000", nil)
	}()
	s.log.waitFor(t, `sleeping in /sleep\?ms=3600000`, 10*time.Second)
	s.signal(syscall.SIGINT)
	s.log.waitFor(t, `stopping: draining`, 10*time.Second)
	s.signal(syscall.SIGINT)
	s.wait(t, 30*time.Second)
	<-done
	if !strings.Contains(s.log.String(), "second signal") {
		t.Errorf("the log does not say why the stop was cut short:\n%s", s.log.String())
	}
}

// Under log.format json every line is a JSON record, the banner too; the access log has the
// fields operators grep for, no pid for a static file, and can go to a file that SIGHUP
// reopens (issue 15 item 22).
func TestJSONBannerAndAccessLog(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "style.css"), []byte("body{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "log:\n  format: json\n  access: true\nhttp:\n  root: "+root+"\nworkers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n")
	get(t, s.URL+"/style.css")
	do(t, "GET", s.URL+"/pid?a=1&b=two", nil, "User-Agent", "op-test/1.0", "Referer", "http://example.test/from")
	s.log.waitFor(t, `"path":"/pid"`, 10*time.Second)
	s.log.waitFor(t, `"path":"/style.css"`, 10*time.Second)
	records := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(s.log.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON record under log.format json: %q", line)
			continue
		}
		if rec["msg"] == "request" {
			records[rec["path"].(string)] = rec
		}
	}
	php := records["/pid"]
	for k, want := range map[string]any{"query": "a=1&b=two", "proto": "HTTP/1.1", "user_agent": "op-test/1.0", "referer": "http://example.test/from", "status": 200.0} {
		if php[k] != want {
			t.Errorf("access record %s = %v, want %v (record %v)", k, php[k], want, php)
		}
	}
	if host, _ := php["host"].(string); !strings.HasPrefix(host, "127.0.0.1:") {
		t.Errorf("host %v", php["host"])
	}
	if d, ok := php["duration_ms"].(float64); !ok || d <= 0 {
		t.Errorf("duration_ms %v, want a positive number of milliseconds", php["duration_ms"])
	}
	if pid, _ := php["pid"].(float64); pid <= 0 {
		t.Errorf("no worker pid in %v", php)
	}
	if static := records["/style.css"]; static == nil || static["pid"] != nil {
		t.Errorf("the static file's record names a worker pid: %v", static)
	}
}

// log.access_file receives the access log instead of stderr; SIGHUP reopens it (logrotate).
func TestAccessLogFileReopenedOnSIGHUP(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "access.log")
	s := startServer(t, "log:\n  access_file: "+file+"\nworkers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n")
	get(t, s.URL+"/pid?first")
	eventually(t, 10*time.Second, "the first request in the file", func() bool {
		b, _ := os.ReadFile(file)
		return strings.Contains(string(b), `"query":"first"`)
	})
	if strings.Contains(s.log.String(), `"msg":"request"`) {
		t.Errorf("the access log went to stderr too:\n%s", s.log.String())
	}
	if err := os.Rename(file, file+".1"); err != nil {
		t.Fatal(err)
	}
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `all workers replaced`, 30*time.Second)
	get(t, s.URL+"/pid?second")
	eventually(t, 10*time.Second, "the second request in the new file", func() bool {
		b, _ := os.ReadFile(file)
		return strings.Contains(string(b), `"query":"second"`)
	})
}

// SIGHUP reads the config file again (issue 15 item 21): an invalid file is logged and the
// running config stays; log.level takes effect; a changed http.address is named as needing a
// restart and the server goes on serving where it was.
func TestSIGHUPReloadsTheConfig(t *testing.T) {
	t.Parallel()
	yaml := "log:\n  format: json\n  access: true\nworkers:\n  command: php " + fixture(t, "app.php") + "\n  count: 1\n  runtime: cli\n"
	s := startServer(t, yaml)
	cfgPath := filepath.Join(s.dir, "peregrine.yaml")
	get(t, s.URL+"/pid?before")
	s.log.waitFor(t, `"query":"before"`, 10*time.Second)

	// An invalid file: the error, the old config runs on (the access log still logs).
	if err := os.WriteFile(cfgPath, []byte("http:\n  address: 127.0.0.1:0\nworkers:\n  cuont: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `config reload failed: the running config stays.*cuont`, 10*time.Second)
	s.log.waitFor(t, `all workers replaced`, 30*time.Second)
	get(t, s.URL+"/pid?after-invalid")
	s.log.waitFor(t, `"query":"after-invalid"`, 10*time.Second)

	// A valid file: log.level warn applies (no more INFO access records); a new address waits
	// for a restart.
	next := "http:\n  address: 127.0.0.1:1\nlog:\n  format: json\n  access: true\n  level: warn\nworkers:\n  command: php " + fixture(t, "app.php") + "\n  count: 1\n  runtime: cli\n"
	if err := os.WriteFile(cfgPath, []byte(next), 0o644); err != nil {
		t.Fatal(err)
	}
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `need a restart.*"http"`, 10*time.Second)
	if r := get(t, s.URL+"/pid?after-warn"); r.Status != 200 {
		t.Fatalf("the server stopped serving at its address: %d", r.Status)
	}
	// The next request on the connection starts once the first one's handler, access record
	// included, has returned; its worker's STDERR line is a WARN record.
	get(t, s.URL+"/sleep?ms=1")
	s.log.waitFor(t, `sleeping in /sleep\?ms=1`, 10*time.Second)
	if strings.Contains(s.log.String(), `"query":"after-warn"`) {
		t.Errorf("log.level warn did not apply: the access record is logged:\n%s", s.log.String())
	}
}

// An unreadable document root is logged at start (issue 15 item 23). The server runs as
// nobody (setpriv), since root reads every directory.
func TestUnreadableRootLoggedAtStart(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and setpriv (util-linux) to run the server as nobody")
	}
	t.Parallel()
	dir, err := os.MkdirTemp("", "peregrine-unreadable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "peregrine")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "site")
	if err := os.Mkdir(root, 0o700); err != nil { // root's own: nobody cannot list it
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "peregrine.yaml")
	yaml := "http:\n  address: 127.0.0.1:0\n  root: " + root + "\nworkers:\n  command: php " + fixture(t, "app.php") + "\n  runtime: cli\n  count: 1\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "serve", "-c", cfg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PEREGRINE_TEST_TAG=unreadable")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	log := &logBuffer{wake: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.write(sc.Text())
		}
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
	})
	// The warning comes before the workers start, so before the banner; the server goes on.
	banner := log.waitFor(t, `serving http://\S+`, 60*time.Second)
	if !regexp.MustCompile(`http.root cannot be read.*permission denied`).MatchString(log.String()) {
		t.Errorf("no warning about the unreadable root:\n%s", log.String())
	}
	// A request the root cannot answer says why in the log.
	url := strings.TrimPrefix(banner, "serving ")
	if r := get(t, url+"/style.css"); r.Status != http.StatusNotFound && r.Status != http.StatusForbidden {
		t.Fatalf("status %d", r.Status)
	}
	log.waitFor(t, `got 403 or 404 because http.root cannot be read.*permission denied`, 10*time.Second)
}

// A reload turns the access log on, into a file, and off again (issue 15 item 21).
func TestSIGHUPReloadsTheAccessLog(t *testing.T) {
	t.Parallel()
	base := "workers:\n  command: php " + fixture(t, "app.php") + "\n  count: 1\n  runtime: cli\n"
	s := startServer(t, base)
	cfgPath := filepath.Join(s.dir, "peregrine.yaml")
	file := filepath.Join(t.TempDir(), "access.log")
	reload := func(yaml string, n int) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte("http:\n  address: 127.0.0.1:0\n"+yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		s.signal(syscall.SIGHUP)
		eventually(t, 30*time.Second, "the reload", func() bool { return s.log.count(`all workers replaced`) == n })
	}
	get(t, s.URL+"/pid?off")
	reload("log:\n  access_file: "+file+"\n"+base, 1)
	if !strings.Contains(s.log.String(), `"applied":["log.access"]`) {
		t.Errorf("the reload does not say it applied the access log:\n%s", s.log.String())
	}
	get(t, s.URL+"/pid?on")
	eventually(t, 10*time.Second, "the request in the access file", func() bool {
		b, _ := os.ReadFile(file)
		return strings.Contains(string(b), `"query":"on"`)
	})
	reload(base, 2)
	get(t, s.URL+"/pid?off-again")
	get(t, s.URL+"/sleep?ms=1") // on the same connection: starts once the previous request has logged
	s.log.waitFor(t, `sleeping in /sleep\?ms=1`, 10*time.Second)
	b, _ := os.ReadFile(file)
	if strings.Contains(string(b), "off") || strings.Contains(s.log.String(), `"msg":"request"`) {
		t.Errorf("a request logged while the access log was off; file:\n%s\nlog:\n%s", b, s.log.String())
	}
}

package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// env is a fixed environment for parse, so that tests need not touch the process's.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// mustParse parses src as peregrine.yaml and fails the test on error.
func mustParse(t *testing.T, src string, vars map[string]string) Config {
	t.Helper()
	c, err := parse("peregrine.yaml", []byte(src), env(vars))
	if err != nil {
		t.Fatalf("parse:\n%s\nerror: %v", src, err)
	}
	return c
}

func assertEqual(t *testing.T, got, want Config) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config mismatch\n got: %+v\nwant: %+v", got, want)
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	want := Config{
		HTTP: HTTP{
			Address:           "127.0.0.1:8080",
			MaxBodySize:       8 << 20,
			ReadHeaderTimeout: Duration(10 * time.Second),
			BodyTimeout:       Duration(60 * time.Second),
			IdleTimeout:       Duration(60 * time.Second),
			WriteTimeout:      Duration(60 * time.Second),
			MaxHeaderCount:    100,
			MaxHeaderLine:     8 * KiB,
			MaxCookies:        1000,
			MaxInputVars:      1000,
			Index:             "index.php",
			Compression:       []string{"zstd", "br", "gzip"},
		},
		Workers: Workers{
			Runtime:         "native",
			Fork:            true,
			Dir:             ".",
			Env:             map[string]string{},
			Concurrency:     1,
			PHPIni:          map[string]string{"opcache.enable_cli": "1", "memory_limit": "128M"},
			ExecTimeout:     Duration(60 * time.Second),
			AllocateTimeout: Duration(60 * time.Second),
			MaxQueue:        1000,
			StopTimeout:     Duration(10 * time.Second),
			BootTimeout:     Duration(30 * time.Second),
		},
		Log:       Log{Level: "info", Format: "auto"},
		WebSocket: WebSocket{MaxMessageSize: MiB, PingInterval: Duration(30 * time.Second), SendQueue: MiB},
	}
	assertEqual(t, c, want)

	// Defaults are valid but for the command, which only the file or command line can give.
	var cerr *Error
	if err := c.Validate(); !errors.As(err, &cerr) || cerr.Key != "workers.command" {
		t.Errorf("Default().Validate() = %v, want a workers.command error", err)
	}
	c.Workers.Command = []string{"php", "worker.php"}
	if err := c.Validate(); err != nil {
		t.Errorf("Default() with a command: Validate() = %v", err)
	}

	// Each call has its own maps.
	c.Workers.Env["X"] = "1"
	if len(Default().Workers.Env) != 0 {
		t.Error("Default() shares its Env map between calls")
	}
}

func TestEmptyFile(t *testing.T) {
	for _, src := range []string{"", "\n\n", "# only a comment\n", "---\n", "~\n", "http:\nworkers:\n", "---\n---\n...\n", "http: {}\n---\n"} {
		assertEqual(t, mustParse(t, src, nil), Default())
	}
}

// TestFull is the golden test: testdata/full.yaml sets every key.
func TestFull(t *testing.T) {
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := mustParse(t, string(data), nil)
	want := Config{
		HTTP: HTTP{
			Address:           "0.0.0.0:9000",
			MaxBodySize:       64 * MiB,
			ReadHeaderTimeout: Duration(5 * time.Second),
			BodyTimeout:       Duration(20 * time.Second),
			IdleTimeout:       Duration(2 * time.Minute),
			WriteTimeout:      Duration(30 * time.Second),
			MaxHeaderCount:    50,
			MaxHeaderLine:     16 * KiB,
			MaxCookies:        200,
			MaxInputVars:      3000,
			MaxConnections:    5000,
			ServerName:        "www.example.com",
			Root:              "testdata",
			Index:             "app.php",
			SendfileDirs:      []string{"testdata"},
			Compression:       []string{"gzip"},
			TrustedProxies:    []string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.1"},
			TLS: TLS{
				RedirectAddress: ":80",
				ACME: ACME{
					Email:   "admin@example.com",
					Domains: []string{"example.com", "www.example.com"},
					CA:      "https://acme-staging-v02.api.letsencrypt.org/directory",
					CARoot:  "/etc/ssl/private-ca.pem",
					Storage: "/var/lib/peregrine/certs",
				},
			},
		},
		Workers: Workers{
			Command: []string{"php", "-d", "display_errors=stderr", "public/worker.php", "--env=prod"},
			Runtime: "cli",
			Dir:     "/srv/app",
			Count:   4,
			Env: map[string]string{
				"APP_ENV":      "prod",
				"DATABASE_URL": "mysql://app@db/app?charset=utf8mb4",
				"EMPTY":        "",
			},
			ClearEnv:   true,
			DebugLeaks: true,
			PHPIni: map[string]string{
				"memory_limit":       "256M",
				"opcache.preload":    "/srv/app/preload.php",
				"opcache.enable_cli": "0",
			},
			MaxJobs:         1000,
			Concurrency:     8,
			MaxMemory:       128 * MiB,
			ExecTimeout:     Duration(30 * time.Second),
			AllocateTimeout: Duration(1500 * time.Millisecond),
			MaxQueue:        200,
			StopTimeout:     0,
			BootTimeout:     Duration(90 * time.Second),
			Watch:           []string{"src", "config/*.yaml"},
		},
		Admin: Admin{Address: "127.0.0.1:9180", Token: "s3cret-token"},
		Log:   Log{Level: "debug", Format: "json", Access: true, AccessFile: "/var/log/peregrine/access.log"},
		Tables: Tables{Init: []string{"php", "load.php"}, Define: []TableDef{{Name: "visits", Rows: 1000, Key: "int",
			Columns: []TableColumn{{"user", "int32"}, {"mark", "int8"}, {"note", "string(16)"}}, Indexes: []string{"user"}}}},
		Jobs: Jobs{
			Pipelines: []Pipeline{
				{Name: "emails", Driver: "redis", Redis: PipelineRedis{Address: "127.0.0.1:6380", Stream: "app:emails"},
					NATS: PipelineNATS{URL: "nats://127.0.0.1:4223", Stream: "MAIL"}, Retries: 5,
					Backoff: Duration(2 * time.Second), Timeout: Duration(30 * time.Second), DeadLetter: false, Prefetch: 5},
				func() Pipeline { p := defaultPipeline("reports"); p.Driver = "nats"; return p }(),
			},
			Consumers: Consumers{Command: []string{"php", "consumer.php"}, Count: 2, Pipelines: []string{"emails"},
				Env: map[string]string{"QUEUE": "1"}, PHPIni: map[string]string{"memory_limit": "512M"}, MaxJobs: 500,
				MaxMemory: 64 * MiB},
		},
		KV: KV{Stores: []Store{{Name: "cache", Driver: "redis", Address: "127.0.0.1:6379"}}},
		WebSocket: WebSocket{MaxMessageSize: 64 * KiB, PingInterval: Duration(20 * time.Second), SendQueue: 256 * KiB,
			AllowedOrigins: []string{"https://app.example", "cdn.example"}, Broker: "redis://127.0.0.1:6379",
			MaxConnections: 5000},
	}
	assertEqual(t, got, want)

	// Every field differs from its default, so the golden file really covers every key.
	def := reflect.ValueOf(Default())
	gotv := reflect.ValueOf(got)
	for i := range def.NumField() {
		for j := range def.Field(i).NumField() {
			if def.Type().Field(i).Name == "HTTP" && def.Field(i).Type().Field(j).Name == "Direct" {
				continue // refused with tls, root and others that full.yaml sets: direct_test.go covers it
			}
			if reflect.DeepEqual(def.Field(i).Field(j).Interface(), gotv.Field(i).Field(j).Interface()) {
				t.Errorf("testdata/full.yaml leaves %s.%s at its default", def.Type().Field(i).Name, def.Field(i).Type().Field(j).Name)
			}
		}
	}
}

// TestForkDefault: without the key, workers.fork is true where the native runtime runs the
// workers (a php command, classic mode) and false under runtime cli or with another program;
// the key, when given, wins, and an explicit true where forking cannot apply is refused.
func TestForkDefault(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      bool
	}{
		{"native script", "workers:\n  command: php worker.php\n", true},
		{"native script, runtime given", "workers:\n  command: /usr/bin/php8.2 worker.php\n  runtime: native\n", true},
		{"classic mode", "http:\n  root: testdata\n", true},
		{"empty file", "", true},
		{"cli runtime", "workers:\n  command: php worker.php\n  runtime: cli\n", false},
		{"not php", "workers:\n  command: ./run.sh worker.php\n", false},
		{"not php, list", "workers:\n  command: [node, server.js]\n", false},
		{"explicit false", "workers:\n  command: php worker.php\n  fork: false\n", false},
		{"explicit false, classic", "http:\n  root: testdata\nworkers:\n  fork: false\n", false},
		{"explicit true", "workers:\n  command: php worker.php\n  fork: true\n", true},
	} {
		c := mustParse(t, tc.src, nil)
		if c.Workers.Fork != tc.want {
			t.Errorf("%s: fork = %t, want %t", tc.name, c.Workers.Fork, tc.want)
		}
		if c.Workers.Command != nil || c.HTTP.Root != "" {
			if err := c.Validate(); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
		// config check prints the effective value, which reads back the same.
		if want := fmt.Sprintf("\n  fork: %t\n", tc.want); !strings.Contains(string(c.EffectiveYAML()), want) {
			t.Errorf("%s: EffectiveYAML lacks %q", tc.name, want)
		}
	}
	// A value that is not a boolean is one error, not also a fork the cli runtime refuses.
	_, err := parse("peregrine.yaml", []byte("workers:\n  command: php w.php\n  runtime: cli\n  fork: yes please\n"), env(nil))
	if err == nil || strings.Count(err.Error(), "workers.fork") != 1 {
		t.Errorf("fork: yes please: %v, want one workers.fork error", err)
	}
	for _, src := range []string{
		"workers:\n  command: php w.php\n  runtime: cli\n  fork: true\n",
		"workers:\n  command: ./run.sh\n  fork: true\n",
	} {
		_, err := parse("peregrine.yaml", []byte(src), env(nil))
		if err == nil || !strings.Contains(err.Error(), "workers.fork:") {
			t.Errorf("%q: %v, want a workers.fork error", src, err)
		}
	}
}

// TestFork: workers.fork is taken with the native runtime, in worker and classic mode; the
// cases it is refused in are in TestValidate.
func TestFork(t *testing.T) {
	for _, src := range []string{
		"workers:\n  command: php8.2 worker.php\n  fork: true\n",
		"http:\n  root: testdata\nworkers:\n  runtime: native\n  fork: true\n",
	} {
		c := mustParse(t, src, nil)
		if !c.Workers.Fork {
			t.Errorf("%s: fork not set", src)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", src, err)
		}
	}
	_, err := parse("peregrine.yaml", []byte("workers:\n  command: php w.php\n  runtime: cli\n  fork: true\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "peregrine.yaml:4: workers.fork:") {
		t.Errorf("fork with the cli runtime: %v", err)
	}
}

// TestReference checks that the documented reference loads, and to the defaults.
func TestReference(t *testing.T) {
	c, err := Load("testdata/reference.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Workers.Command = []string{"php", "worker.php"}
	assertEqual(t, c, want)

	// It names every key of the schema, and so does the README's configuration block.
	reference, err := os.ReadFile("testdata/reference.yaml")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(readme), "## Configuration")
	block, _, _ = strings.Cut(block, "\n```\n")
	docs := map[string]string{"testdata/reference.yaml": string(reference), "README.md's configuration block": block}
	_, keys := names()
	for doc, data := range docs {
		for section, list := range keys {
			indent := strings.Repeat("  ", strings.Count(section, ".")+1) // http.tls keys sit deeper
			for _, k := range list {
				if !strings.Contains(data, "\n"+indent+k+":") {
					t.Errorf("%s lacks %s.%s", doc, section, k)
				}
			}
		}
	}
}

// TestSchemaMatchesTags checks that the schema reads and writes exactly the keys that the
// struct tags document, in the same order.
func TestSchemaMatchesTags(t *testing.T) {
	sections, keys := names()
	ct := reflect.TypeFor[Config]()
	var tagSections []string
	for i := range ct.NumField() {
		f := ct.Field(i)
		tagSections = append(tagSections, f.Tag.Get("yaml"))
		var tagKeys []string
		for j := range f.Type.NumField() {
			tagKeys = append(tagKeys, f.Type.Field(j).Tag.Get("yaml"))
		}
		if got := keys[f.Tag.Get("yaml")]; !slices.Equal(got, tagKeys) {
			t.Errorf("schema keys of %s = %v, tags say %v", f.Name, got, tagKeys)
		}
	}
	if !slices.Equal(sections, tagSections) {
		t.Errorf("schema sections = %v, tags say %v", sections, tagSections)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "peregrine.yaml")
	if err := os.WriteFile(path, []byte("workers:\n  command: php ${PEREGRINE_TEST_SCRIPT}\n  count: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PEREGRINE_TEST_SCRIPT", "app.php")
	_, err := Load(path)
	if want := path + `:3: workers.count: want a whole number, got "x"`; err == nil || err.Error() != want {
		t.Errorf("Load error = %v, want %s", err, want)
	}

	if err := os.WriteFile(path, []byte("workers:\n  command: php ${PEREGRINE_TEST_SCRIPT}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"php", "app.php"}; !slices.Equal(c.Workers.Command, want) {
		t.Errorf("command = %q, want %q", c.Workers.Command, want)
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestOverrides(t *testing.T) {
	c := mustParse(t, `
workers:
  command: [php, "-d", "x=1 2", worker.php]
  env: { APP_ENV: prod, N: 5 }
  php_ini: { memory_limit: 256M }
  watch: src
log:
  level: Warn
`, nil)
	want := Default()
	want.Workers.Command = []string{"php", "-d", "x=1 2", "worker.php"}
	want.Workers.Env = map[string]string{"APP_ENV": "prod", "N": "5"}
	want.Workers.PHPIni["memory_limit"] = "256M" // added to the default opcache.enable_cli
	want.Workers.Watch = []string{"src"}
	want.Log.Level = "warn"
	assertEqual(t, c, want)
}

func TestAliases(t *testing.T) {
	c := mustParse(t, `
http:
  idle_timeout: &t 5s
  read_header_timeout: *t
workers:
  command: &cmd [php, w.php]
  watch: *cmd
`, nil)
	if c.HTTP.ReadHeaderTimeout != Duration(5*time.Second) || !slices.Equal(c.Workers.Watch, []string{"php", "w.php"}) {
		t.Errorf("aliases not followed: %+v", c)
	}
}

func TestRoundTrip(t *testing.T) {
	full, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	odd := Default()
	odd.Workers.Command = []string{"php", "-r", `echo "it's $x";`, "", "a\\b", "--"}
	odd.Workers.Dir = "dir with spaces/${NOT_EXPANDED}"
	odd.Workers.Env = map[string]string{"A": "$$", "B": "true", "C": "", "D": "line\nbreak", "E": " padded ", "F": "# not a comment", "G": "$"}
	odd.Workers.Watch = []string{"*.php", "- dash", "null"}
	odd.Workers.MaxMemory = 1536 * KiB
	odd.HTTP.MaxBodySize = 1000
	odd.HTTP.IdleTimeout = Duration(90*time.Minute + 500*time.Millisecond)
	odd.Admin.Address = "[::1]:0"
	odd.Log.Access = true

	for name, c := range map[string]Config{
		"default":   Default(),
		"full.yaml": mustParse(t, string(full), nil),
		"odd":       odd,
	} {
		t.Run(name, func(t *testing.T) {
			out := c.EffectiveYAML()
			got, err := parse("effective.yaml", out, env(nil))
			if err != nil {
				t.Fatalf("parsing EffectiveYAML: %v\n%s", err, out)
			}
			assertEqual(t, got, c)
		})
	}
}

func TestEffectiveYAMLLayout(t *testing.T) {
	c := Default()
	c.Workers.Command = []string{"php", "worker.php"}
	want := `http:
  address: 127.0.0.1:8080
  max_body_size: 8MiB
  read_header_timeout: 10s
  body_timeout: 1m
  idle_timeout: 1m
  max_header_count: 100
  max_header_line: 8KiB
  max_cookies: 1000
  max_input_vars: 1000
  max_connections: 0
  server_name: ""
  write_timeout: 1m
  root: ""
  index: index.php
  sendfile_dirs: []
  compression:
    - zstd
    - br
    - gzip
  trusted_proxies: []
  tls:
    cert: ""
    key: ""
    redirect_address: ""
    acme:
      email: ""
      domains: []
      ca: ""
      ca_root: ""
      storage: ""
  direct: false
workers:
  command: php worker.php
  runtime: native
  fork: true
  dir: .
  count: 0
  concurrency: 1
  env: {}
  clear_env: false
  debug_leaks: false
  php_ini:
    memory_limit: 128M
    opcache.enable_cli: "1"
  max_jobs: 0
  max_memory: 0
  exec_timeout: 1m
  allocate_timeout: 1m
  max_queue: 1000
  stop_timeout: 10s
  boot_timeout: 30s
  watch: []
admin:
  address: ""
  token: ""
log:
  level: info
  format: auto
  access: false
  access_file: ""
tables:
  init: ~
  define: {}
jobs:
  pipelines: {}
  consumers:
    command: ~
    count: 0
    pipelines: []
    env: {}
    php_ini: {}
    max_jobs: 0
    max_memory: 0
kv:
  stores: {}
websocket:
  max_message_size: 1MiB
  ping_interval: 30s
  send_queue: 1MiB
  allowed_origins: []
  broker: ""
  max_connections: 0
`
	if got := string(c.EffectiveYAML()); got != want {
		t.Errorf("EffectiveYAML:\n%s\nwant:\n%s", got, want)
	}

	// Without a command the key becomes a comment, and the output still loads.
	out := Default().EffectiveYAML()
	if !strings.Contains(string(out), "  # command: not set") {
		t.Errorf("EffectiveYAML without a command:\n%s", out)
	}
	assertEqual(t, mustParse(t, string(out), nil), Default())
}

func TestResolvedCount(t *testing.T) {
	if got := (Workers{Count: 3}).ResolvedCount(); got != 3 {
		t.Errorf("ResolvedCount with count 3 = %d", got)
	}
	if got, want := (Workers{}).ResolvedCount(), runtime.GOMAXPROCS(0); got != want || got < 1 {
		t.Errorf("ResolvedCount with count 0 = %d, want %d", got, want)
	}
}

func TestPHPIniArgs(t *testing.T) {
	w := Workers{PHPIni: map[string]string{"opcache.enable_cli": "1", "memory_limit": "256M", "a": ""}}
	want := []string{"-d", "a=", "-d", "memory_limit=256M", "-d", "opcache.enable_cli=1"}
	for range 10 { // map order varies between iterations; the result must not
		if got := w.PHPIniArgs(); !slices.Equal(got, want) {
			t.Fatalf("PHPIniArgs = %q, want %q", got, want)
		}
	}
}

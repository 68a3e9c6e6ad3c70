package config

import (
	"errors"
	"strings"
	"testing"
)

// TestParseErrors covers every error Parse reports. Each message must start with the file, the
// line and the key, and contain the rest of want.
func TestParseErrors(t *testing.T) {
	vars := map[string]string{"WORD": "many", "EMPTY": ""}
	tests := []struct {
		name string
		src  string
		want string // the whole first line of the message
	}{
		// Structure.
		{"syntax", "http:\n  address: [1\n", "peregrine.yaml:2: did not find expected ',' or ']'"},
		{"syntax scanner", "http:\n  address: a: b\n", "peregrine.yaml:2: mapping values are not allowed in this context"},
		{"syntax indentation", "http:\n  address: x\n idle_timeout: 1s\n", "peregrine.yaml:3: did not find expected key"},
		{"syntax first line", "[", "peregrine.yaml:1: did not find expected node content"},
		{"tab", "http:\n\taddress: x\n", "peregrine.yaml:2: found character that cannot start any token (a tab: YAML indents with spaces only)"},
		{"two documents", "http: {}\n---\nlog: {}\n", "peregrine.yaml:2: a second YAML document: a configuration is one document, so remove the ---"},
		{"root list", "- a\n", `peregrine.yaml:1: want a mapping with the sections http, workers, admin and log, got a list`},
		{"root scalar", "peregrine\n", `peregrine.yaml:1: want a mapping with the sections http, workers, admin and log, got "peregrine"`},
		{"section scalar", "http: 8080\n", `peregrine.yaml:1: http: want a mapping of keys, got "8080"`},
		{"section list", "log:\n  - debug\n", `peregrine.yaml:2: log: want a mapping of keys, got a list`},
		{"unknown section", "htp:\n  address: x\n", `peregrine.yaml:1: htp: unknown key (did you mean http?)`},
		{"unknown far section", "server: {}\n", `peregrine.yaml:1: server: unknown key (the sections are http, workers, admin and log)`},
		{"key at top", "count: 4\n", `peregrine.yaml:1: count: unknown key (count belongs under workers)`},
		{"key in two sections", "address: x\n", `peregrine.yaml:1: address: unknown key (address belongs under http or admin)`},
		{"typo", "http:\n  adress: x\n", `peregrine.yaml:2: http.adress: unknown key (did you mean address?)`},
		{"dashes", "http:\n  max-body-size: 1\n", `peregrine.yaml:2: http.max-body-size: unknown key (did you mean max_body_size?)`},
		{"swap", "workers:\n  dri: x\n", `peregrine.yaml:2: workers.dri: unknown key (did you mean dir?)`},
		{"wrong section", "http:\n  count: 4\n", `peregrine.yaml:2: http.count: unknown key (count belongs under workers)`},
		{"indentation", "http:\n  address: :80\n  workers:\n    count: 1\n", `peregrine.yaml:3: http.workers: unknown key (workers is a section of its own: check the indentation)`},
		{"unknown no hint", "log:\n  colour: true\n", `peregrine.yaml:2: log.colour: unknown key`},
		{"duplicate key", "http:\n  address: a:1\n  address: b:2\n", `peregrine.yaml:3: http.address: set twice (first on line 2)`},
		{"duplicate section", "log: {}\nhttp: {}\nlog: {}\n", `peregrine.yaml:3: log: set twice (first on line 1)`},
		{"merge key", "workers:\n  <<: {count: 1}\n", `peregrine.yaml:2: workers: merge keys (<<) are not supported: write the keys out`},
		{"complex key", "http:\n  ? [a]\n  : x\n", `peregrine.yaml:2: http: want a key name, got a list`},

		// Types.
		{"count word", "workers:\n  count: many\n", `peregrine.yaml:2: workers.count: want a whole number, got "many"`},
		{"count from env", "\nworkers:\n  count: ${WORD}\n", `peregrine.yaml:3: workers.count: want a whole number, got "many"`},
		{"count float", "workers:\n  count: 2.5\n", `peregrine.yaml:2: workers.count: want a whole number, got "2.5"`},
		{"count list", "workers:\n  count: [1]\n", `peregrine.yaml:2: workers.count: want a whole number, got a list`},
		{"count null", "workers:\n  count:\n", `peregrine.yaml:2: workers.count: want a whole number, got nothing`},
		{"count huge", "workers:\n  count: 99999999999999999999\n", `peregrine.yaml:2: workers.count: 99999999999999999999 is too large`},
		{"max_jobs word", "workers:\n  max_jobs: lots\n", `peregrine.yaml:2: workers.max_jobs: want a whole number, got "lots"`},
		{"max_queue word", "workers:\n  max_queue: ten\n", `peregrine.yaml:2: workers.max_queue: want a whole number, got "ten"`},
		{"bool", "log:\n  access: maybe\n", `peregrine.yaml:2: log.access: want true or false, got "maybe"`},
		{"size", "http:\n  max_body_size: big\n", `peregrine.yaml:2: http.max_body_size: want a size like 512, 64KiB or 8MiB, got "big"`},
		{"size unit", "workers:\n  max_memory: 8 potatoes\n", `peregrine.yaml:2: workers.max_memory: unknown unit "potatoes" in "8 potatoes": use KiB, MiB, GiB (1024) or KB, MB, GB (1000)`},
		{"size negative", "http:\n  max_body_size: -1\n", `peregrine.yaml:2: http.max_body_size: a size cannot be negative, got "-1"`},
		{"size mapping", "http:\n  max_body_size: {a: 1}\n", `peregrine.yaml:2: http.max_body_size: want a size like 512, 64KiB or 8MiB, got a mapping`},
		{"duration bare", "http:\n  idle_timeout: 30\n", `peregrine.yaml:2: http.idle_timeout: want a duration with a unit, got "30": add one, e.g. 30s for seconds or 30ms for milliseconds`},
		{"duration word", "workers:\n  exec_timeout: forever\n", `peregrine.yaml:2: workers.exec_timeout: want a duration like 500ms, 10s or 1m30s, got "forever"`},
		{"duration null", "workers:\n  stop_timeout: ~\n", `peregrine.yaml:2: workers.stop_timeout: want a duration like 500ms or 10s, got nothing`},
		{"string list", "http:\n  address: [a, b]\n", `peregrine.yaml:2: http.address: want a string, got a list`},
		{"command mapping", "workers:\n  command: {php: x}\n", `peregrine.yaml:2: workers.command: want a list of strings, got a mapping`},
		{"command item list", "workers:\n  command:\n    - php\n    - [a]\n", `peregrine.yaml:4: workers.command[1]: want a string, got a list`},
		{"watch mapping", "workers:\n  watch: {a: b}\n", `peregrine.yaml:2: workers.watch: want a list of strings, got a mapping`},
		{"watch item null", "workers:\n  watch:\n    - src\n    -\n", `peregrine.yaml:4: workers.watch[1]: want a string, got nothing`},
		{"env list", "workers:\n  env: [A=1]\n", `peregrine.yaml:2: workers.env: want a mapping of names to values, got a list`},
		{"env value list", "workers:\n  env:\n    A: [1]\n", `peregrine.yaml:3: workers.env.A: want a string, got a list`},
		{"env duplicate", "workers:\n  env:\n    A: 1\n    A: 2\n", `peregrine.yaml:4: workers.env.A: set twice (first on line 3)`},
		{"php_ini scalar", "workers:\n  php_ini: memory_limit=1G\n", `peregrine.yaml:2: workers.php_ini: want a mapping of names to values, got "memory_limit=1G"`},

		// Commands.
		{"command empty list", "workers:\n  command: []\n", `peregrine.yaml:2: workers.command: empty: give the command that starts a worker, e.g. "php worker.php", or leave the key out and pass the worker script to peregrine serve`},
		{"command empty string", "workers:\n  command: ''\n", `peregrine.yaml:2: workers.command: empty: give the command that starts a worker, e.g. "php worker.php", or leave the key out and pass the worker script to peregrine serve`},
		{"command null", "workers:\n  command:\n", `peregrine.yaml:2: workers.command: empty: give the command that starts a worker, e.g. "php worker.php", or leave the key out and pass the worker script to peregrine serve`},
		{"command blank env", "workers:\n  command: ${EMPTY}\n", `peregrine.yaml:2: workers.command: empty: give the command that starts a worker, e.g. "php worker.php", or leave the key out and pass the worker script to peregrine serve`},
		{"command quote", "workers:\n  command: php \"worker.php\n", `peregrine.yaml:2: workers.command: unterminated double quote in the command`},
		{"command pipe", "workers:\n  command: php worker.php | tee log\n", `peregrine.yaml:2: workers.command: '|' means something to a shell, but the command runs without one: quote it, or run a wrapper script`},
		{"command empty program", "workers:\n  command: ['', x]\n", `peregrine.yaml:2: workers.command: the program name (the first word) is empty`},

		// Environment.
		{"unset", "\n\nhttp:\n  address: ${NOPE}:80\n", `peregrine.yaml:4: http.address: environment variable NOPE is not set: set it, or give a default with ${NOPE:-default}`},
		{"unset in list", "workers:\n  watch:\n    - a\n    - ${NOPE}\n", `peregrine.yaml:4: workers.watch[1]: environment variable NOPE is not set: set it, or give a default with ${NOPE:-default}`},
		{"unset in env", "workers:\n  env:\n    DB: ${DB_HOST}\n", `peregrine.yaml:3: workers.env.DB: environment variable DB_HOST is not set: set it, or give a default with ${DB_HOST:-default}`},
		{"bad reference", "log:\n  level: ${LOG LEVEL}\n", `peregrine.yaml:2: log.level: bad variable reference "${LOG LEVEL}": want ${NAME} or ${NAME:-default} (write $$ for a literal $)`},
		{"unterminated reference", "log:\n  level: ${LEVEL\n", `peregrine.yaml:2: log.level: unterminated "${LEVEL": add the closing }`},

		// Values.
		{"negative count", "workers:\n  count: -1\n", `peregrine.yaml:2: workers.count: cannot be negative, got -1 (0 means one worker per CPU)`},
		{"zero concurrency", "workers:\n  concurrency: 0\n", `peregrine.yaml:2: workers.concurrency: must be at least 1 (one request at a time), got 0`},
		{"concurrent classic mode", "http:\n  root: /srv\nworkers:\n  concurrency: 8\n", `peregrine.yaml:4: workers.concurrency: classic mode runs each request as a PHP request of its own, with process-wide state (superglobals, headers, output): it runs one at a time per worker; set workers.concurrency: 1, or serve a worker script`},
		{"negative max_jobs", "workers:\n  max_jobs: -5\n", `peregrine.yaml:2: workers.max_jobs: cannot be negative, got -5 (0 means never replace a worker)`},
		{"negative max_queue", "workers:\n  max_queue: -1\n", `peregrine.yaml:2: workers.max_queue: cannot be negative, got -1 (0 means no limit)`},
		{"tiny max_memory", "workers:\n  max_memory: 128\n", `peregrine.yaml:2: workers.max_memory: 128 is less than any PHP process uses, so every worker would be replaced after each request; did you mean 128MiB?`},
		{"zero exec_timeout", "workers:\n  exec_timeout: 0s\n", `peregrine.yaml:2: workers.exec_timeout: must be positive, got 0s`},
		{"negative read_header_timeout", "http:\n  read_header_timeout: -1s\n", `peregrine.yaml:2: http.read_header_timeout: must be positive, got -1s`},
		{"zero body_timeout", "http:\n  body_timeout: 0s\n", `peregrine.yaml:2: http.body_timeout: must be positive, got 0s`},
		{"zero idle_timeout", "http:\n  idle_timeout: 0\n", `peregrine.yaml:2: http.idle_timeout: must be positive, got 0s`},
		{"zero allocate_timeout", "workers:\n  allocate_timeout: 0ms\n", `peregrine.yaml:2: workers.allocate_timeout: must be positive, got 0s`},
		{"zero boot_timeout", "workers:\n  boot_timeout: 0s\n", `peregrine.yaml:2: workers.boot_timeout: must be positive, got 0s`},
		{"negative stop_timeout", "workers:\n  stop_timeout: -2s\n", `peregrine.yaml:2: workers.stop_timeout: cannot be negative, got -2s (0 kills a busy worker at once)`},
		{"address no port", "http:\n  address: localhost\n", `peregrine.yaml:2: http.address: "localhost" has no port: write host:port, e.g. localhost:8080`},
		{"address only port", "http:\n  address: 8080\n", `peregrine.yaml:2: http.address: "8080" has no host: write 127.0.0.1:8080 for this machine only, or :8080 for every interface`},
		{"address scheme", "http:\n  address: http://localhost:8080\n", `peregrine.yaml:2: http.address: want host:port without a scheme, e.g. 127.0.0.1:8080, got "http://localhost:8080"`},
		{"address bad port", "http:\n  address: localhost:http\n", `peregrine.yaml:2: http.address: the port in "localhost:http" must be a number from 0 to 65535`},
		{"address big port", "http:\n  address: localhost:65536\n", `peregrine.yaml:2: http.address: the port in "localhost:65536" must be a number from 0 to 65535`},
		{"address ipv6", "http:\n  address: ::1:8080\n", `peregrine.yaml:2: http.address: want host:port, e.g. 127.0.0.1:8080 or [::1]:8080, got "::1:8080"`},
		{"address empty", "http:\n  address:\n", `peregrine.yaml:2: http.address: empty: want host:port, e.g. 127.0.0.1:8080`},
		{"admin address", "admin:\n  address: 9180\n", `peregrine.yaml:2: admin.address: "9180" has no host: write 127.0.0.1:9180 for this machine only, or :9180 for every interface`},
		{"admin same", "http:\n  address: 127.0.0.1:8080\nadmin:\n  address: 127.0.0.1:8080\n", `peregrine.yaml:4: admin.address: the same as http.address: give the admin listener its own port`},
		{"admin same as default", "admin:\n  address: 127.0.0.1:8080\n", `peregrine.yaml:2: admin.address: the same as http.address: give the admin listener its own port`},
		{"level", "log:\n  level: verbose\n", `peregrine.yaml:2: log.level: want one of debug, info, warn, error, got "verbose"`},
		{"format", "log:\n  format: xml\n", `peregrine.yaml:2: log.format: want one of auto, text, json, got "xml"`},
		{"env name", "workers:\n  env:\n    A=B: x\n", `peregrine.yaml:3: workers.env.A=B: a variable name cannot contain = or a NUL byte`},
		{"env empty name", "workers:\n  env:\n    '': x\n", `peregrine.yaml:2: workers.env: an empty variable name`},
		{"php_ini name", "workers:\n  php_ini:\n    a=b: x\n", `peregrine.yaml:3: workers.php_ini.a=b: a setting name cannot contain = or a NUL byte`},
		{"env NUL value", "workers:\n  env:\n    A: \"x\\0y\"\n", `peregrine.yaml:3: workers.env.A: a value cannot contain a NUL byte`},
		{"watch glob", "workers:\n  watch:\n    - src\n    - 'src/[a'\n", `peregrine.yaml:4: workers.watch[1]: bad glob pattern "src/[a": syntax error in pattern`},
		{"watch empty", "workers:\n  watch: ['']\n", `peregrine.yaml:2: workers.watch[0]: empty: give a directory or a glob pattern`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse("peregrine.yaml", []byte(tt.src), env(vars))
			if err == nil {
				t.Fatalf("no error for\n%s", tt.src)
			}
			first, _, _ := strings.Cut(err.Error(), "\n")
			if first != tt.want {
				t.Errorf("error for\n%s\n got: %s\nwant: %s", tt.src, first, tt.want)
			}
			var cerr *Error
			if !errors.As(err, &cerr) || cerr.File != "peregrine.yaml" || cerr.Line == 0 {
				t.Errorf("error %#v is not an *Error with a file and line", err)
			}
			if c.HTTP.Address != "" {
				t.Errorf("parse returned a config with its error: %+v", c)
			}
		})
	}
}

func TestParseErrorsAll(t *testing.T) {
	// Every problem is reported, in file order, each on its own line.
	src := `log:
  level: loud
http:
  address: nowhere
  adress: x
workers:
  count: many
  max_jobs: -1
`
	_, err := parse("p.yaml", []byte(src), env(nil))
	want := `p.yaml:2: log.level: want one of debug, info, warn, error, got "loud"
p.yaml:4: http.address: "nowhere" has no port: write host:port, e.g. nowhere:8080
p.yaml:5: http.adress: unknown key (did you mean address?)
p.yaml:7: workers.count: want a whole number, got "many"
p.yaml:8: workers.max_jobs: cannot be negative, got -1 (0 means never replace a worker)`
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
}

func TestParseValues(t *testing.T) {
	vars := map[string]string{"PORT": "9000", "EMPTY": "", "CMD": "php app.php"}
	tests := []struct {
		name  string
		src   string
		check func(c Config) bool
	}{
		{"env", "http:\n  address: 127.0.0.1:${PORT}\n", func(c Config) bool { return c.HTTP.Address == "127.0.0.1:9000" }},
		{"env default", "http:\n  address: ${HOST:-0.0.0.0}:${PORT:-80}\n", func(c Config) bool { return c.HTTP.Address == "0.0.0.0:9000" }},
		{"env empty default", "workers:\n  dir: ${EMPTY:-/srv}\n", func(c Config) bool { return c.Workers.Dir == "/srv" }},
		{"env quoted", "workers:\n  dir: '${EMPTY}x'\n", func(c Config) bool { return c.Workers.Dir == "x" }},
		{"env in comment", "# ${NOPE}\nworkers: # ${NOPE}\n  dir: x # ${NOPE}\n", func(c Config) bool { return c.Workers.Dir == "x" }},
		{"env in unknown value", "workers:\n  command: ${CMD}\n", func(c Config) bool { return len(c.Workers.Command) == 2 }},
		{"dollar", "workers:\n  env:\n    P: $$5 and $x and $${NOPE}\n", func(c Config) bool { return c.Workers.Env["P"] == "$5 and $x and ${NOPE}" }},
		{"count quoted", "workers:\n  count: '3'\n", func(c Config) bool { return c.Workers.Count == 3 }},
		{"count from env", "workers:\n  count: ${N:-2}\n", func(c Config) bool { return c.Workers.Count == 2 }},
		{"bool yes", "log:\n  access: yes\n", func(c Config) bool { return c.Log.Access }},
		{"bool False", "log:\n  access: False\n", func(c Config) bool { return !c.Log.Access }},
		{"size bytes", "http:\n  max_body_size: 512\n", func(c Config) bool { return c.HTTP.MaxBodySize == 512 }},
		{"size zero", "http:\n  max_body_size: 0\n", func(c Config) bool { return c.HTTP.MaxBodySize == 0 }},
		{"stop at once", "workers:\n  stop_timeout: 0\n", func(c Config) bool { return c.Workers.StopTimeout == 0 }},
		{"null string", "admin:\n  address:\n", func(c Config) bool { return c.Admin.Address == "" }},
		{"null section", "admin:\nlog:\n", func(c Config) bool { return c.Log.Level == "info" }},
		{"null watch", "workers:\n  watch:\n", func(c Config) bool { return c.Workers.Watch == nil }},
		{"null env value", "workers:\n  env:\n    A:\n", func(c Config) bool { v, ok := c.Workers.Env["A"]; return ok && v == "" }},
		{"folded command", "workers:\n  command: >\n    php\n    -d x=1\n    w.php\n", func(c Config) bool { return len(c.Workers.Command) == 4 }},
		{"format upper", "log:\n  format: JSON\n", func(c Config) bool { return c.Log.Format == "json" }},
		{"address every interface", "http:\n  address: :8080\n", func(c Config) bool { return c.HTTP.Address == ":8080" }},
		{"address ipv6", "http:\n  address: '[::1]:0'\n", func(c Config) bool { return c.HTTP.Address == "[::1]:0" }},
		{"both port 0", "http:\n  address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n", func(c Config) bool { return c.Admin.Address == "127.0.0.1:0" }},
		{"bom", "\ufeffhttp:\n  address: :1\n", func(c Config) bool { return c.HTTP.Address == ":1" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := mustParse(t, tt.src, vars); !tt.check(c) {
				t.Errorf("unexpected config for\n%s\n%+v", tt.src, c)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	valid := func() Config {
		c := Default()
		c.Workers.Command = []string{"php", "worker.php"}
		return c
	}
	tests := []struct {
		name   string
		change func(c *Config)
		want   string
	}{
		{"no command", func(c *Config) { c.Workers.Command = nil }, "workers.command: no worker to run: pass a worker script (peregrine serve worker.php) or an application (--laravel DIR, --symfony DIR; config check takes them too), set workers.command, or set http.root for classic mode"},
		{"count", func(c *Config) { c.Workers.Count = -2 }, "workers.count: cannot be negative, got -2 (0 means one worker per CPU)"},
		{"address", func(c *Config) { c.HTTP.Address = "nope" }, `http.address: "nope" has no port: write host:port, e.g. nope:8080`},
		{"body", func(c *Config) { c.HTTP.MaxBodySize = -1 }, "http.max_body_size: cannot be negative, got -1 (0 means no limit)"},
		{"memory", func(c *Config) { c.Workers.MaxMemory = -1 }, "workers.max_memory: cannot be negative, got -1 (0 turns the check off)"},
		{"exec", func(c *Config) { c.Workers.ExecTimeout = 0 }, "workers.exec_timeout: must be positive, got 0s"},
		{"level", func(c *Config) { c.Log.Level = "INFO" }, `log.level: want one of debug, info, warn, error, got "INFO"`},
		{"format", func(c *Config) { c.Log.Format = "" }, `log.format: want one of auto, text, json, got ""`},
		{"admin", func(c *Config) { c.Admin.Address = c.HTTP.Address }, "admin.address: the same as http.address: give the admin listener its own port"},
		{"fork cli", func(c *Config) { c.Workers.Fork, c.Workers.Runtime = true, "cli" }, "workers.fork: the workers are forked from the native runtime: set workers.runtime: native, or fork: false"},
		{"fork wrapper", func(c *Config) { c.Workers.Fork, c.Workers.Command = true, []string{"./run.sh"} },
			`workers.fork: the workers are forked from the native runtime, which runs a PHP script: workers.command must run php, not "./run.sh"; or set fork: false`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.change(&c)
			err := c.Validate()
			if err == nil || err.Error() != tt.want {
				t.Errorf("Validate() = %v, want %s", err, tt.want)
			}
		})
	}

	c := valid()
	if err := c.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	c.HTTP.Address, c.Workers.Count = "", -1
	if err := c.Validate(); err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("two problems should give two lines: %v", err)
	}
}

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		err  Error
		want string
	}{
		{Error{File: "p.yaml", Line: 3, Key: "http.address", Msg: "bad"}, "p.yaml:3: http.address: bad"},
		{Error{File: "p.yaml", Key: "workers.command", Msg: "bad"}, "p.yaml: workers.command: bad"},
		{Error{File: "p.yaml", Line: 1, Msg: "bad"}, "p.yaml:1: bad"},
		{Error{Key: "workers.count", Msg: "bad"}, "workers.count: bad"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%#v.Error() = %q, want %q", tt.err, got, tt.want)
		}
	}
}

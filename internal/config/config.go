// Package config owns Peregrine's configuration: the Config struct whose field comments are the
// reference, defaults, loading YAML with line-accurate errors, and validation. It must not start
// anything or import other packages of this module.
//
// A configuration is built in three steps that the command line strings together:
//
//	cfg, err := config.Load("peregrine.yaml") // Default(), then what the file sets
//	cfg.HTTP.Address = flagAddress             // flags override the file
//	err = cfg.Validate()                       // whatever the source, before anything starts
//
// Load checks everything it reads and names the file, line and dotted key of every problem:
//
//	peregrine.yaml:7: workers.count: want a whole number, got "many"
//
// Validate repeats the value checks without a file or line, because by then a value may have come
// from a flag; it also insists on a worker command, which Load cannot, since the command line may
// supply one (peregrine serve worker.php).
package config

import (
	"runtime"
	"slices"
	"time"
)

// Config is Peregrine's whole configuration. Each field maps to the YAML key in its tag under the
// section of its parent struct, e.g. Workers.MaxJobs is workers.max_jobs.
type Config struct {
	HTTP    HTTP    `yaml:"http"`
	Workers Workers `yaml:"workers"`
	Admin   Admin   `yaml:"admin"`
	Log     Log     `yaml:"log"`
}

// HTTP configures the listener that serves the application (the http section).
type HTTP struct {
	// Address is the host:port to listen on. An empty host listens on every interface
	// (:8080); port 0 picks a free port. Default 127.0.0.1:8080.
	Address string `yaml:"address"`

	// MaxBodySize is the largest request body accepted; a larger one gets 413 Content Too Large
	// before a worker sees it. 0 means no limit. Default 8MiB.
	MaxBodySize Size `yaml:"max_body_size"`

	// ReadHeaderTimeout is how long a client may take to send the request line and headers.
	// Must be positive. Default 10s.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`

	// IdleTimeout is how long a keep-alive connection may wait for its next request.
	// Must be positive. Default 60s.
	IdleTimeout Duration `yaml:"idle_timeout"`
}

// Workers configures the PHP worker processes and how requests wait for them (the workers
// section).
type Workers struct {
	// Command starts one worker: the program and its arguments, run without a shell. In YAML it
	// is a string, split like a shell would (quotes and backslashes, no variables, pipes or
	// redirections), or a list taken as is. It has no default in the file; peregrine serve
	// worker.php sets it to php worker.php.
	Command []string `yaml:"command"`

	// Dir is the working directory of the workers. A relative path is relative to the directory
	// peregrine was started in; empty means that directory too. Default ".".
	Dir string `yaml:"dir"`

	// Count is the number of workers; 0 means one per CPU available to the process (see
	// ResolvedCount). Default 0.
	Count int `yaml:"count"`

	// Env holds variables added to the environment the workers inherit; a name given here
	// overrides the inherited value. Default none.
	Env map[string]string `yaml:"env"`

	// PHPIni holds php.ini settings passed as -d name=value when the command runs php. The file's
	// entries are added to the defaults, so OPcache stays on unless opcache.enable_cli is set
	// here; PHPIniArgs lists them in a stable order. Default opcache.enable_cli: "1".
	PHPIni map[string]string `yaml:"php_ini"`

	// MaxJobs replaces a worker after it has served this many requests; 0 means never.
	// Default 0.
	MaxJobs int `yaml:"max_jobs"`

	// MaxMemory replaces a worker after a request once its resident memory (RSS) exceeds this
	// size; 0 turns the check off. Default 0.
	MaxMemory Size `yaml:"max_memory"`

	// ExecTimeout bounds one request's time in a worker; past it the worker is killed and the
	// client gets 504 Gateway Timeout. Must be positive. Default 60s.
	ExecTimeout Duration `yaml:"exec_timeout"`

	// AllocateTimeout is how long a request may wait for a free worker before it gets 503 Service
	// Unavailable. Must be positive. Default 60s.
	AllocateTimeout Duration `yaml:"allocate_timeout"`

	// MaxQueue is how many requests may wait for a worker at once; beyond it a request gets 503
	// at once. 0 means no limit. Default 0.
	MaxQueue int `yaml:"max_queue"`

	// StopTimeout is how long a busy worker may finish its request when the server stops or
	// replaces it, before it is killed. 0 kills at once. Default 10s.
	StopTimeout Duration `yaml:"stop_timeout"`

	// BootTimeout is how long a new worker may take to become ready for requests (run its
	// bootstrap and report ready) before it is killed and counted as a failed start. Must be
	// positive. Default 30s. An addition to the documented interface.
	BootTimeout Duration `yaml:"boot_timeout"`

	// Watch lists directories or glob patterns; a change under any of them replaces the workers.
	// Meant for development. In YAML a single string is a list of one. Default none.
	Watch []string `yaml:"watch"`
}

// Admin configures the admin listener that serves GET /metrics, /health and /ready, and that the
// peregrine workers and peregrine reset commands talk to (the admin section).
type Admin struct {
	// Address is the host:port of the admin listener, e.g. 127.0.0.1:9180; empty turns the
	// listener off. It must differ from http.address. Default empty.
	Address string `yaml:"address"`
}

// Log configures the server's log, written to stderr (the log section).
type Log struct {
	// Level is the least severe level logged: debug, info, warn or error; these are also the
	// names log/slog's Level.UnmarshalText accepts. Read case-insensitively. At debug, a
	// handler's error response carries its trace. Default info.
	Level string `yaml:"level"`

	// Format is auto, text or json; auto writes text to a terminal and JSON otherwise.
	// Read case-insensitively. Default auto.
	Format string `yaml:"format"`

	// Access logs one line per request: method, path, status, bytes, duration and worker pid.
	// Default false.
	Access bool `yaml:"access"`
}

// Log levels and formats, the values Log.Level and Log.Format accept.
var (
	levels  = []string{"debug", "info", "warn", "error"}
	formats = []string{"auto", "text", "json"}
)

// Default returns the configuration used where neither the file nor a flag says otherwise.
// Its Workers.Command is empty: a file or the command line must supply it. Each call returns
// fresh maps, so the result may be modified freely.
func Default() Config {
	return Config{
		HTTP: HTTP{
			Address:           "127.0.0.1:8080",
			MaxBodySize:       8 * MiB,
			ReadHeaderTimeout: Duration(10 * time.Second),
			IdleTimeout:       Duration(60 * time.Second),
		},
		Workers: Workers{
			Dir:             ".",
			Env:             map[string]string{},
			PHPIni:          map[string]string{"opcache.enable_cli": "1"},
			ExecTimeout:     Duration(60 * time.Second),
			AllocateTimeout: Duration(60 * time.Second),
			StopTimeout:     Duration(10 * time.Second),
			BootTimeout:     Duration(30 * time.Second),
		},
		Log: Log{
			Level:  "info",
			Format: "auto",
		},
	}
}

// ResolvedCount returns the number of workers to run: Count, or when it is 0 (or less), one per
// CPU available to the process, which is runtime.GOMAXPROCS: the CPU count, lowered by a
// container's CPU limit or the GOMAXPROCS environment variable.
func (w Workers) ResolvedCount() int {
	if w.Count > 0 {
		return w.Count
	}
	return runtime.GOMAXPROCS(0)
}

// PHPIniArgs returns PHPIni as php command-line arguments, "-d", "name=value" for each entry,
// sorted by name so that the same configuration always gives the same command.
func (w Workers) PHPIniArgs() []string {
	names := make([]string, 0, len(w.PHPIni))
	for name := range w.PHPIni {
		names = append(names, name)
	}
	slices.Sort(names)
	args := make([]string, 0, 2*len(names))
	for _, name := range names {
		args = append(args, "-d", name+"="+w.PHPIni[name])
	}
	return args
}

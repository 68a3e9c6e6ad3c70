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
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Config is Peregrine's whole configuration. Each field maps to the YAML key in its tag under the
// section of its parent struct, e.g. Workers.MaxJobs is workers.max_jobs.
type Config struct {
	HTTP    HTTP    `yaml:"http"`
	Workers Workers `yaml:"workers"`
	Admin   Admin   `yaml:"admin"`
	Log     Log     `yaml:"log"`
	Tables  Tables  `yaml:"tables"`
	Jobs    Jobs    `yaml:"jobs"`
	KV      KV      `yaml:"kv"`

	WebSocket WebSocket `yaml:"websocket"` // websocket.go
}

// HTTP configures the listener that serves the application (the http section).
type HTTP struct {
	// Address is the host:port to listen on. An empty host listens on every interface
	// (:8080); port 0 picks a free port. Default 127.0.0.1:8080.
	Address string `yaml:"address"`

	// MaxBodySize is the largest request body accepted; a larger one gets 413 Content Too Large
	// before a worker sees it. 0 means no limit. Default 8MiB.
	MaxBodySize Size `yaml:"max_body_size"`

	// ReadHeaderTimeout is how long a client may take to send the request line and headers; on
	// a new TLS connection, the handshake and the first head together, from the accept.
	// Must be positive. Default 10s.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`

	// BodyTimeout is the most time between two successful reads of a request body (nginx's
	// client_body_timeout), on HTTP/1.1 and HTTP/2: an HTTP/1.1 client that stalls longer gets
	// 408 and its connection closes, an HTTP/2 stream is reset. Must be positive. Default 60s.
	BodyTimeout Duration `yaml:"body_timeout"`

	// IdleTimeout is how long a keep-alive connection may wait for its next request.
	// Must be positive. Default 60s.
	IdleTimeout Duration `yaml:"idle_timeout"`

	// MaxHeaderCount is the most header fields a request may carry (each value of a repeated
	// header counts); more get 431 before a worker sees them. PHP makes every header name an
	// array key, and crafted names collide in its hash tables. Must be positive. Default 100.
	// An addition to the documented interface, as are the limits below (docs/security.md).
	MaxHeaderCount int `yaml:"max_header_count"`

	// MaxHeaderLine is the largest header field, "Name: value", in bytes; a larger one gets 431,
	// as nginx refuses lines over its 8k large_client_header_buffers. Must be positive.
	// Default 8KiB.
	MaxHeaderLine Size `yaml:"max_header_line"`

	// MaxCookies is the most cookies a request may carry over all its Cookie headers; more get
	// 431. Must be positive. Default 1000, PHP's max_input_vars.
	MaxCookies int `yaml:"max_cookies"`

	// MaxInputVars is the most fields a query string or a form body may have; more get 400.
	// PHP's own max_input_vars (php_ini) still applies after it. Must be positive. Default 1000.
	MaxInputVars int `yaml:"max_input_vars"`

	// MaxConnections caps the open client connections; at the cap new ones wait in the
	// kernel's backlog until one closes, so that file descriptors stay for the workers. 0 means
	// 10000, lowered to what the open-files limit (raised to its hard limit at start) leaves
	// after a reserve for the workers. Default 0.
	MaxConnections int `yaml:"max_connections"`

	// ServerName is what PHP sees as $_SERVER['SERVER_NAME'], like nginx's server_name: never
	// the client's Host header, which PHP reads as HTTP_HOST. Empty means the address the
	// connection arrived on. Default empty.
	ServerName string `yaml:"server_name"`

	// WriteTimeout bounds each write of a response to the client (nginx's send_timeout): a
	// client that reads nothing for this long is disconnected. The server collects an answer
	// before it writes it, so a slow client never holds a worker unless PHP streams (flush()).
	// Must be positive. Default 60s. An addition to the documented interface.
	WriteTimeout Duration `yaml:"write_timeout"`

	// Root is the document root: existing files under it are served by the server itself, with
	// validators, ranges and precompressed siblings, never .php source and never dotfiles. With
	// Root set and no workers.command, Peregrine runs in classic mode: every request is a fresh
	// PHP request routed as nginx + PHP-FPM route it (try_files $uri $uri/ /index.php); with a
	// worker command (worker mode), only existing files are served and everything else goes to
	// the worker. A relative path is relative to the directory peregrine was started in; it must
	// be an existing directory. Empty means no static files. Default empty. See docs/static.md.
	Root string `yaml:"root"`

	// Index is the front controller in classic mode, a path under Root: the script that runs
	// for a path that names no file, with the request's query string. Its base name is also the
	// first index file of a directory, before index.html. Must end in .php. Default index.php.
	Index string `yaml:"index"`

	// SendfileDirs are directories, besides Root, whose files PHP may have the server send with
	// X-Sendfile (an absolute path), as nginx's internal locations allow: private downloads kept
	// outside the document root. Each must be an existing directory; a relative path is relative
	// to the directory peregrine was started in. X-Accel-Redirect names a URI, which maps under
	// Root only. Default none.
	SendfileDirs []string `yaml:"sendfile_dirs"`

	// Compression lists the content codings offered for compressible responses, PHP's and
	// static ones, in the server's order of preference: zstd, br, gzip, or any of them. The
	// client's Accept-Encoding chooses among them; responses of a compressible type (text,
	// JSON, JavaScript, XML, SVG, wasm ...) of at least 1 KiB are compressed, and precompressed
	// siblings of static files (app.js.br, .zst, .gz) are served for the codings listed. An
	// empty list turns compression off. Default [zstd, br, gzip].
	Compression []string `yaml:"compression"`

	// TrustedProxies lists the proxies (CIDRs such as 10.0.0.0/8, or single addresses) whose
	// X-Forwarded-For, X-Forwarded-Proto and X-Forwarded-Host headers (or Forwarded, RFC 7239,
	// when there is no X-Forwarded-For) set the client address, scheme and host PHP sees. From
	// any other peer these headers are ignored. See docs/http.md. Default none.
	TrustedProxies []string `yaml:"trusted_proxies"`

	// TLS turns the listener into an HTTPS one (the http.tls section).
	TLS TLS `yaml:"tls"`

	// Direct has the workers accept and answer HTTP/1.1 on Address themselves (direct mode,
	// docs/direct.md): no process between the client and PHP. What only the server's own front
	// does is refused with it: tls, root (and classic mode), sendfile_dirs, trusted_proxies,
	// a compression list other than the default (which direct mode turns off), and
	// workers.concurrency above 1; workers.fork is not used. Needs the native runtime.
	// Default false. `peregrine serve --direct` sets it.
	Direct bool `yaml:"direct"`
}

// TLS configures HTTPS on http.address: certificates from files (Cert and Key) or from an ACME
// CA (ACME), not both. With either, the listener serves HTTP/2 and HTTP/1.1 over TLS; without,
// it serves cleartext HTTP/1.1 and HTTP/2 with prior knowledge (h2c).
type TLS struct {
	// Cert is the PEM file of the certificate chain, the server's certificate first. Set with
	// Key. Read at start-up, and again when the files change (a renewal), checked at most once
	// a second during TLS handshakes. Default empty.
	Cert string `yaml:"cert"`

	// Key is the PEM file of the certificate's private key. Default empty.
	Key string `yaml:"key"`

	// RedirectAddress is the host:port of a cleartext listener that answers every request with a
	// permanent redirect (308) to the same URL over HTTPS, and answers ACME HTTP-01 challenges;
	// typically :80. Needs Cert and Key or ACME. Empty turns it off. Default empty. An addition
	// to the documented interface.
	RedirectAddress string `yaml:"redirect_address"`

	// ACME obtains and renews certificates automatically (the http.tls.acme section).
	ACME ACME `yaml:"acme"`
}

// ACME configures automatic certificates from an ACME CA such as Let's Encrypt (the
// http.tls.acme section). It is on when Domains is not empty. The CA validates each domain with
// the TLS-ALPN-01 challenge on http.address, which must then be reachable on port 443, or with
// HTTP-01 on http.tls.redirect_address, reachable on port 80. Certificates are renewed in the
// background, a third of their lifetime before they expire.
type ACME struct {
	// Email is the contact address of the ACME account; the CA may write to it about expiring
	// certificates. Optional. Default empty.
	Email string `yaml:"email"`

	// Domains are the names to obtain certificates for; each must resolve to this server.
	// Default none.
	Domains []string `yaml:"domains"`

	// CA is the URL of the CA's ACME directory; empty means Let's Encrypt's production
	// directory. Default empty.
	CA string `yaml:"ca"`

	// CARoot is a PEM file of root certificates to trust, besides the system's, when talking to
	// the CA; for a private or test CA (step-ca, Pebble). Default empty. An addition to the
	// documented interface.
	CARoot string `yaml:"ca_root"`

	// Storage is the directory that keeps the account, certificates and keys, shared by every
	// server pointed at it; empty means $XDG_DATA_HOME/peregrine/certmagic, or
	// ~/.local/share/peregrine/certmagic without XDG_DATA_HOME (see ResolvedStorage). Default
	// empty. An addition to the documented interface.
	Storage string `yaml:"storage"`
}

// Workers configures the PHP worker processes and how requests wait for them (the workers
// section).
type Workers struct {
	// Command starts one worker: the program and its arguments, run without a shell. In YAML it
	// is a string, split like a shell would (quotes and backslashes, no variables, pipes or
	// redirections), or a list taken as is. It has no default in the file; peregrine serve
	// worker.php sets it to php worker.php.
	Command []string `yaml:"command"`

	// Runtime is what runs PHP in the workers: native, Peregrine's own PHP runtime
	// (peregrine-php, built beside peregrine), under which PHP's functions (header(), setcookie(),
	// sessions, php://input, uploads, exit) behave as under PHP-FPM and which classic mode needs;
	// or cli, plain php CLI processes running the PHP library, the fallback. The runtime applies
	// when workers.command runs php; another program is run as it is. Default native.
	Runtime string `yaml:"runtime"`

	// Fork starts the workers by forking them from one template process that has started PHP
	// (module startup, OPcache, opcache.preload) instead of executing each: OPcache's shared
	// memory, the preloaded code and what PHP builds at startup are then shared copy-on-write,
	// as between PHP-FPM's children, and each worker costs a fraction of the memory. A reset
	// (SIGHUP, admin, watch) starts a new template first, so new workers see new code. False
	// executes every worker, a process of its own. Forking needs the native runtime
	// (workers.runtime native and a command that runs php, or classic mode): true elsewhere is
	// an error. Default DefaultFork: true where the native runtime runs the workers, false
	// under runtime cli or with a command that is not php. Parse applies it, from the file's
	// runtime and command, when the file leaves the key out, so that after Parse Fork is the
	// value in effect (which EffectiveYAML prints).
	Fork bool `yaml:"fork"`

	// Dir is the working directory of the workers. A relative path is relative to the directory
	// peregrine was started in; empty means that directory too. Default ".".
	Dir string `yaml:"dir"`

	// Count is the number of workers; 0 means one per CPU available to the process (see
	// ResolvedCount). Default 0.
	Count int `yaml:"count"`

	// Concurrency is how many requests one worker runs at once. Above 1, each runs in a Fiber of
	// its own and a request waiting on I/O lets the others run (docs/concurrency.md); the worker
	// must be a script serving with serve() or servePsr(): classic mode, serveGlobals(),
	// --laravel and --symfony keep process-wide request state and refuse it. The pool counts
	// count x concurrency request slots. Must be at least 1. Default 1.
	Concurrency int `yaml:"concurrency"`

	// Env holds variables added to the environment the workers inherit; a name given here
	// overrides the inherited value. Default none.
	Env map[string]string `yaml:"env"`

	// ClearEnv starts the workers with an environment that holds only PATH, workers.env and
	// PEREGRINE_* variables, as PHP-FPM's clear_env = yes does, instead of the
	// server's whole environment. Default false: workers inherit it, as RoadRunner's and
	// FrankenPHP's do, so applications configured by environment keep working.
	ClearEnv bool `yaml:"clear_env"`

	// DebugLeaks turns on the leak report of --laravel, --symfony and Peregrine\Worker's serve
	// methods (docs/frameworks.md): after each request a worker logs the static properties and
	// globals the request changed and its memory. It reflects over every loaded class:
	// development only. The workers see it as PEREGRINE_DEBUG_LEAKS=1. Default false.
	DebugLeaks bool `yaml:"debug_leaks"`

	// PHPIni holds php.ini settings passed as -d name=value when the command runs php. The file's
	// entries are added to the defaults, so OPcache stays on unless opcache.enable_cli is set
	// here; PHPIniArgs lists them in a stable order. Default opcache.enable_cli: "1" and
	// memory_limit: 128M (PHP's own default, and PHP-FPM's; Debian's CLI has no limit, which a
	// long-lived worker must not run with).
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
	// at once, before its body is read. 0 means no limit. Default 1000: a bound by default, so
	// that an overload sheds load rather than piling up bodies (each waits on disk past 128 KiB)
	// and connections.
	MaxQueue int `yaml:"max_queue"`

	// StopTimeout is how long a busy worker may finish its request when the server stops or
	// replaces it, before it is killed. 0 kills at once. Default 10s.
	StopTimeout Duration `yaml:"stop_timeout"`

	// BootTimeout is how long a new worker may take to become ready for requests (run its
	// bootstrap and report ready) before it is killed and counted as a failed start. Must be
	// positive. Default 30s. An addition to the documented interface.
	BootTimeout Duration `yaml:"boot_timeout"`

	// Watch lists directories or glob patterns; a change under any of them replaces the workers.
	// A relative entry is relative to Dir ("*.php": Dir's PHP files). Meant for development. In
	// YAML a single string is a list of one. Default none.
	Watch []string `yaml:"watch"`
}

// Admin configures the admin listener that serves GET /metrics, /health and /ready, and that the
// peregrine workers and peregrine reset commands talk to (the admin section).
type Admin struct {
	// Address is the host:port of the admin listener, e.g. 127.0.0.1:9180; empty turns the
	// listener off. It must differ from http.address. Default empty.
	Address string `yaml:"address"`

	// Token, when set, is required of every admin request as "Authorization: Bearer TOKEN";
	// peregrine workers and peregrine reset send it from the config file. Required when
	// Address is not a loopback address. Default empty.
	Token string `yaml:"token"`
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

	// Access logs one line per request: method, path, query, proto, host, status, bytes,
	// bytes_in, duration_ms, worker pid, remote address, user agent and referer. Default false.
	Access bool `yaml:"access"`

	// AccessFile, when set, is a file the access log is appended to (as JSON lines) instead of
	// stderr; setting it turns the access log on. SIGHUP reopens it, for logrotate. Default
	// empty: stderr, with the rest of the log.
	AccessFile string `yaml:"access_file"`
}

// Log levels and formats, the values Log.Level and Log.Format accept, the content codings
// HTTP.Compression accepts and the runtimes Workers.Runtime accepts.
var (
	runtimes = []string{"native", "cli"}
	codings  = []string{"zstd", "br", "gzip"}
	levels   = []string{"debug", "info", "warn", "error"}
	formats  = []string{"auto", "text", "json"}
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
			BodyTimeout:       Duration(60 * time.Second),
			IdleTimeout:       Duration(60 * time.Second),
			MaxHeaderCount:    100,
			MaxHeaderLine:     8 * KiB,
			MaxCookies:        1000,
			MaxInputVars:      1000,
			WriteTimeout:      Duration(60 * time.Second),
			Index:             "index.php",
			Compression:       []string{"zstd", "br", "gzip"},
		},
		Workers: Workers{
			Runtime:         "native",
			Fork:            true, // DefaultFork of these defaults
			Concurrency:     1,
			Dir:             ".",
			Env:             map[string]string{},
			PHPIni:          map[string]string{"opcache.enable_cli": "1", "memory_limit": "128M"},
			ExecTimeout:     Duration(60 * time.Second),
			AllocateTimeout: Duration(60 * time.Second),
			MaxQueue:        1000,
			StopTimeout:     Duration(10 * time.Second),
			BootTimeout:     Duration(30 * time.Second),
		},
		Log: Log{
			Level:  "info",
			Format: "auto",
		},
		WebSocket: defaultWebSocket(),
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

// DefaultFork returns the default of Fork for w's runtime and command: true when the workers
// run the native runtime, which the template is, that is workers.runtime native with a
// command that runs php or no command (classic mode); false (every worker executed) under
// runtime cli or with a command that is not php.
func (w Workers) DefaultFork() bool {
	return w.Runtime == "native" && (len(w.Command) == 0 || isPHP(w.Command[0]))
}

// Enabled reports whether the listener serves HTTPS.
func (t TLS) Enabled() bool { return t.Cert != "" || t.Key != "" || t.ACME.Enabled() }

// Enabled reports whether certificates come from an ACME CA.
func (a ACME) Enabled() bool { return len(a.Domains) > 0 }

// ResolvedStorage returns Storage, or when it is empty $XDG_DATA_HOME/peregrine/certmagic, or
// failing that ~/.local/share/peregrine/certmagic, or ./peregrine-certmagic without a home.
func (a ACME) ResolvedStorage() string {
	if a.Storage != "" {
		return a.Storage
	}
	if dir := os.Getenv("XDG_DATA_HOME"); dir != "" && filepath.IsAbs(dir) {
		return filepath.Join(dir, "peregrine", "certmagic")
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		return filepath.Join(home, ".local", "share", "peregrine", "certmagic")
	}
	return "peregrine-certmagic"
}

// TrustedPrefixes returns TrustedProxies as prefixes, a single address as a prefix of its full
// length. Entries that do not parse (which Validate reports) are left out.
func (h HTTP) TrustedPrefixes() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range h.TrustedProxies {
		if p, err := parsePrefix(s); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// parsePrefix parses a CIDR, or a single address as a prefix of its full length. IPv4-mapped
// IPv6 forms are unmapped, so that ::ffff:10.0.0.0/104 matches what 10.0.0.0/8 matches.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q has a zone", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("%q: an IPv4-mapped prefix needs at least 96 bits", s)
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
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

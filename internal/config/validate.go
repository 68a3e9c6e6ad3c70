package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Validate checks c whatever its source, typically after command-line flags have overridden a
// loaded file, and before anything starts. It reports every problem as an *Error naming the
// dotted key (joined with errors.Join when there are several); the errors carry no file or line,
// since a value may have come from a flag. Unlike Load it requires a worker command.
func (c *Config) Validate() error {
	return joinErrors(c.validate(true))
}

// validate returns c's problems, keyed by dotted key so that Parse can add the file and line.
func (c *Config) validate(requireCommand bool) []*Error {
	var errs []*Error
	add := func(key, format string, args ...any) {
		errs = append(errs, &Error{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	positive := func(key string, d Duration) {
		if d <= 0 {
			add(key, "must be positive, got %s", d)
		}
	}
	notNegative := func(key string, n int, zero string) {
		if n < 0 {
			add(key, "cannot be negative, got %d (0 means %s)", n, zero)
		}
	}
	// checkNames checks the names of workers.env or workers.php_ini, which end up as NAME=value.
	checkNames := func(key, what string, m map[string]string) {
		for name, value := range m {
			switch {
			case name == "":
				add(key, "an empty %s name", what)
			case strings.ContainsAny(name, "=\x00"):
				add(key+"."+name, "a %s name cannot contain = or a NUL byte", what)
			case strings.Contains(value, "\x00"):
				add(key+"."+name, "a value cannot contain a NUL byte")
			}
		}
	}

	h := &c.HTTP
	if msg := checkAddress(h.Address); msg != "" {
		add("http.address", "%s", msg)
	}
	if h.MaxBodySize < 0 {
		add("http.max_body_size", "cannot be negative, got %d (0 means no limit)", h.MaxBodySize)
	}
	positive("http.read_header_timeout", h.ReadHeaderTimeout)
	positive("http.body_timeout", h.BodyTimeout)
	positive("http.idle_timeout", h.IdleTimeout)
	for _, l := range []struct {
		key string
		n   int64
	}{
		{"http.max_header_count", int64(h.MaxHeaderCount)},
		{"http.max_header_line", int64(h.MaxHeaderLine)},
		{"http.max_cookies", int64(h.MaxCookies)},
		{"http.max_input_vars", int64(h.MaxInputVars)},
	} {
		if l.n <= 0 {
			add(l.key, "must be positive, got %d", l.n)
		}
	}
	notNegative("http.max_connections", h.MaxConnections, "10000 or what the open-files limit allows")
	if strings.ContainsAny(h.ServerName, " \t\r\n/\x00") {
		add("http.server_name", "want a host name like www.example.com, got %q", h.ServerName)
	}
	positive("http.write_timeout", h.WriteTimeout)
	for i, p := range h.TrustedProxies {
		if _, err := parsePrefix(p); err != nil {
			add("http.trusted_proxies["+strconv.Itoa(i)+"]", "want a CIDR like 10.0.0.0/8 or an address like 10.0.0.1, got %q", p)
		}
	}
	for i, dir := range h.SendfileDirs {
		key := "http.sendfile_dirs[" + strconv.Itoa(i) + "]"
		switch fi, err := os.Stat(dir); {
		case dir == "":
			add(key, "empty: give a directory whose files PHP may send with X-Sendfile")
		case errors.Is(err, fs.ErrNotExist):
			add(key, "%s does not exist: give an existing directory", dir)
		case err != nil:
			add(key, "%v", err)
		case !fi.IsDir():
			add(key, "%s is not a directory", dir)
		}
	}
	if h.Root != "" {
		switch fi, err := os.Stat(h.Root); {
		case errors.Is(err, fs.ErrNotExist):
			add("http.root", "%s does not exist: give the document root, an existing directory", h.Root)
		case err != nil:
			add("http.root", "%v", err)
		case !fi.IsDir():
			add("http.root", "%s is not a directory: give the document root, the directory the site's files are in", h.Root)
		}
	}
	switch ix := h.Index; {
	case ix == "":
		add("http.index", "empty: give the front controller under http.root, e.g. index.php")
	case strings.Contains(ix, "\x00") || slices.Contains(strings.Split(ix, "/"), ".."):
		add("http.index", "want a path under http.root without .. or NUL, e.g. index.php or public/app.php, got %q", ix)
	case !strings.HasSuffix(ix, ".php"):
		add("http.index", "the front controller is a PHP script: want a name ending in .php, got %q", ix)
	}
	for i, e := range h.Compression {
		key := "http.compression[" + strconv.Itoa(i) + "]"
		switch {
		case !slices.Contains(codings, e):
			add(key, "want one of %s, got %q ([] turns compression off)", strings.Join(codings, ", "), e)
		case slices.Index(h.Compression, e) < i:
			add(key, "%q is listed twice", e)
		}
	}
	errs = append(errs, h.TLS.validate(h.Address, c.Admin.Address)...)

	w := &c.Workers
	errs = append(errs, c.validateDirect()...)
	switch {
	case len(w.Command) == 0 && requireCommand && h.Root == "":
		add("workers.command", "no worker to run: pass a worker script (peregrine serve worker.php) or an application (--laravel DIR, --symfony DIR; config check takes them too), set workers.command, or set http.root for classic mode")
	case len(w.Command) > 0 && w.Command[0] == "":
		add("workers.command", "the program name (the first word) is empty")
	}
	switch {
	case !slices.Contains(runtimes, w.Runtime):
		add("workers.runtime", "want one of %s, got %q", strings.Join(runtimes, ", "), w.Runtime)
	case w.Runtime == "cli" && len(w.Command) == 0 && h.Root != "":
		add("workers.runtime", "classic mode (http.root without workers.command) needs the native runtime: set workers.runtime: native, or give a worker script")
	}
	switch {
	case w.Fork && w.Runtime != "native":
		add("workers.fork", "the workers are forked from the native runtime: set workers.runtime: native, or fork: false")
	case w.Fork && len(w.Command) > 0 && !isPHP(w.Command[0]):
		add("workers.fork", "the workers are forked from the native runtime, which runs a PHP script: workers.command must run php, not %q; or set fork: false", w.Command[0])
	}
	notNegative("workers.count", w.Count, "one worker per CPU")
	switch {
	case w.Concurrency < 1:
		add("workers.concurrency", "must be at least 1 (one request at a time), got %d", w.Concurrency)
	case w.Concurrency > 1 && len(w.Command) == 0 && h.Root != "":
		add("workers.concurrency", "classic mode runs each request as a PHP request of its own, with process-wide state (superglobals, headers, output): it runs one at a time per worker; set workers.concurrency: 1, or serve a worker script")
	}
	checkNames("workers.env", "variable", w.Env)
	checkNames("workers.php_ini", "setting", w.PHPIni)
	notNegative("workers.max_jobs", w.MaxJobs, "never replace a worker")
	switch {
	case w.MaxMemory < 0:
		add("workers.max_memory", "cannot be negative, got %d (0 turns the check off)", w.MaxMemory)
	case w.MaxMemory > 0 && w.MaxMemory < MiB:
		add("workers.max_memory", "%s is less than any PHP process uses, so every worker would be replaced after each request; did you mean %dMiB?", w.MaxMemory, w.MaxMemory)
	}
	positive("workers.exec_timeout", w.ExecTimeout)
	positive("workers.allocate_timeout", w.AllocateTimeout)
	notNegative("workers.max_queue", w.MaxQueue, "no limit")
	if w.StopTimeout < 0 {
		add("workers.stop_timeout", "cannot be negative, got %s (0 kills a busy worker at once)", w.StopTimeout)
	}
	positive("workers.boot_timeout", w.BootTimeout)
	for i, p := range w.Watch {
		key := "workers.watch[" + strconv.Itoa(i) + "]"
		if p == "" {
			add(key, "empty: give a directory or a glob pattern")
		} else if _, err := filepath.Match(p, ""); err != nil {
			add(key, "bad glob pattern %q: %v", p, err)
		}
	}

	if a := c.Admin.Address; a != "" {
		if msg := checkAddress(a); msg != "" {
			add("admin.address", "%s", msg)
		} else if a == h.Address && !strings.HasSuffix(a, ":0") {
			add("admin.address", "the same as http.address: give the admin listener its own port")
		} else if c.Admin.Token == "" && !loopbackAddress(a) {
			add("admin.token", "required when admin.address (%s) is not a loopback address: anyone who reaches it could "+
				"replace the workers and read the metrics; set a token, or listen on 127.0.0.1", a)
		}
	}
	if strings.ContainsAny(c.Admin.Token, " \t\r\n\x00") {
		add("admin.token", "cannot contain spaces, line breaks or NUL bytes")
	}

	if !slices.Contains(levels, c.Log.Level) {
		add("log.level", "want one of %s, got %q", strings.Join(levels, ", "), c.Log.Level)
	}
	if !slices.Contains(formats, c.Log.Format) {
		add("log.format", "want one of %s, got %q", strings.Join(formats, ", "), c.Log.Format)
	}
	errs = append(errs, c.Tables.validate()...)
	errs = append(errs, c.validateJobs()...)
	errs = append(errs, c.validateWebSocket()...)
	return errs
}

// validate checks the http.tls section; address and admin are http.address and admin.address,
// which the redirect listener must not take.
func (t *TLS) validate(address, admin string) []*Error {
	var errs []*Error
	add := func(key, format string, args ...any) {
		errs = append(errs, &Error{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	a := &t.ACME
	switch {
	case t.Cert != "" && t.Key == "":
		add("http.tls.cert", "set without http.tls.key: give the PEM file of its private key too")
	case t.Key != "" && t.Cert == "":
		add("http.tls.key", "set without http.tls.cert: give the PEM file of the certificate too")
	case t.Cert != "" && a.Enabled():
		add("http.tls.acme.domains", "set with http.tls.cert: take certificates from files or from ACME, not both")
	}
	if r := t.RedirectAddress; r != "" {
		switch msg := checkAddress(r); {
		case msg != "":
			add("http.tls.redirect_address", "%s", msg)
		case !t.Enabled():
			add("http.tls.redirect_address", "set without HTTPS: it redirects to HTTPS, so set http.tls.cert and key or http.tls.acme.domains, or remove it")
		case r == address && !strings.HasSuffix(r, ":0"):
			add("http.tls.redirect_address", "the same as http.address: give the redirect listener its own port (usually :80)")
		case r == admin && !strings.HasSuffix(r, ":0"):
			add("http.tls.redirect_address", "the same as admin.address: give the redirect listener its own port (usually :80)")
		}
	}
	if !a.Enabled() {
		for _, k := range []struct{ name, value string }{{"email", a.Email}, {"ca", a.CA}, {"ca_root", a.CARoot}, {"storage", a.Storage}} {
			if k.value != "" {
				add("http.tls.acme."+k.name, "set without http.tls.acme.domains: list the domains to obtain certificates for")
				break
			}
		}
		return errs
	}
	if e := a.Email; e != "" && (!strings.Contains(e, "@") || strings.ContainsAny(e, " \t<>")) {
		add("http.tls.acme.email", "want an address like admin@example.com, got %q", e)
	}
	for i, d := range a.Domains {
		key := "http.tls.acme.domains[" + strconv.Itoa(i) + "]"
		switch {
		case d == "":
			add(key, "empty: give a domain name like example.com")
		case strings.Contains(d, "*"):
			add(key, "%q: wildcard certificates need the DNS-01 challenge, which Peregrine does not do; list each name", d)
		case strings.Contains(d, "://") || strings.ContainsAny(d, "/:@ \t"):
			add(key, "want a bare domain name like example.com, without scheme, port or path, got %q", d)
		case slices.Contains(a.Domains[:i], d):
			add(key, "%q is listed twice", d)
		}
	}
	if ca := a.CA; ca != "" {
		if u, err := url.Parse(ca); err != nil || u.Scheme != "https" || u.Host == "" {
			add("http.tls.acme.ca", "want the https:// URL of an ACME directory, e.g. https://acme-staging-v02.api.letsencrypt.org/directory, got %q", ca)
		}
	}
	return errs
}

// loopbackAddress reports whether a valid listen address is reachable from this machine only:
// localhost or a loopback IP. An empty host, 0.0.0.0 and :: listen on every interface.
func loopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkAddress returns what is wrong with a listen address, or "" if it is a valid host:port.
func checkAddress(addr string) string {
	if strings.Contains(addr, "://") {
		return fmt.Sprintf("want host:port without a scheme, e.g. 127.0.0.1:8080, got %q", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	switch {
	case addr == "":
		return "empty: want host:port, e.g. 127.0.0.1:8080"
	case err != nil && !strings.Contains(addr, ":") && strings.Trim(addr, "0123456789") == "":
		return fmt.Sprintf("%q has no host: write 127.0.0.1:%s for this machine only, or :%s for every interface", addr, addr, addr)
	case err != nil && !strings.Contains(addr, ":"):
		return fmt.Sprintf("%q has no port: write host:port, e.g. %s:8080", addr, addr)
	case err != nil:
		return fmt.Sprintf("want host:port, e.g. 127.0.0.1:8080 or [::1]:8080, got %q", addr)
	case strings.ContainsAny(host, " \t/"):
		return fmt.Sprintf("bad host %q in %q", host, addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || port == "" || n > 65535 {
		return fmt.Sprintf("the port in %q must be a number from 0 to 65535", addr)
	}
	return ""
}

// validateDirect refuses, in direct mode (http.direct), what only the server's own front does:
// each error names the key and says what to do instead.
func (c *Config) validateDirect() []*Error {
	h, w := &c.HTTP, &c.Workers
	if !h.Direct {
		return nil
	}
	var errs []*Error
	refuse := func(key, what string) {
		errs = append(errs, &Error{Key: key, Msg: "http.direct: the workers answer HTTP themselves, without the server's front, which " +
			what + "; turn http.direct off, or put a load balancer in front (docs/direct.md)"})
	}
	if h.TLS.Enabled() {
		refuse("http.tls", "terminates TLS (and serves HTTP/2 over it)")
	}
	if h.Root != "" && len(w.Command) == 0 {
		refuse("http.root", "runs classic mode (every script a PHP request of its own)")
	} else if h.Root != "" {
		refuse("http.root", "serves the static files")
	}
	if len(h.SendfileDirs) > 0 {
		refuse("http.sendfile_dirs", "sends the files PHP names with X-Sendfile")
	}
	if len(h.TrustedProxies) > 0 {
		refuse("http.trusted_proxies", "takes the client's address from a trusted proxy's headers")
	}
	if len(h.Compression) > 0 && !slices.Equal(h.Compression, Default().HTTP.Compression) {
		refuse("http.compression", "compresses answers (direct mode leaves them uncompressed: set compression: [] or leave it out)")
	}
	if w.Runtime != "native" {
		errs = append(errs, &Error{Key: "workers.runtime", Msg: "http.direct needs the native runtime, whose event loop answers HTTP: set workers.runtime: native"})
	}
	return errs
}

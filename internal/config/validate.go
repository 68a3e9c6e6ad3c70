package config

import (
	"fmt"
	"net"
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
	positive("http.idle_timeout", h.IdleTimeout)

	w := &c.Workers
	switch {
	case len(w.Command) == 0 && requireCommand:
		add("workers.command", "no worker to run: pass a worker script (peregrine serve worker.php) or set workers.command")
	case len(w.Command) > 0 && w.Command[0] == "":
		add("workers.command", "the program name (the first word) is empty")
	}
	notNegative("workers.count", w.Count, "one worker per CPU")
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
		}
	}

	if !slices.Contains(levels, c.Log.Level) {
		add("log.level", "want one of %s, got %q", strings.Join(levels, ", "), c.Log.Level)
	}
	if !slices.Contains(formats, c.Log.Format) {
		add("log.format", "want one of %s, got %q", strings.Join(formats, ", "), c.Log.Format)
	}
	return errs
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

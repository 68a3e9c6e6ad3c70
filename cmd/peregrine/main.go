// Command peregrine is the Peregrine PHP application server. This file only parses the command
// line, sets up logging and signals, and hands over to internal/daemon (serve) or to the admin
// client (workers, reset).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/daemon"
)

const usage = `Peregrine, the PHP application server.

Usage:
  peregrine serve [WORKER.php] [--root DIR | --laravel DIR | --symfony DIR] [-c FILE] [--address HOST:PORT] [--workers N]
  peregrine config check [WORKER.php] [--root DIR | --laravel DIR | --symfony DIR] [-c FILE]
  peregrine version
  peregrine workers [-c FILE] [--json]
  peregrine reset [-c FILE] [--json]
  peregrine tables [-c FILE] [--json]
  peregrine jobs [push PIPELINE PAYLOAD [--delay 30s] | retry PIPELINE [ID...] | delete PIPELINE ID... | dead PIPELINE [show ID] | pause|resume PIPELINE] [-c FILE] [--json]
  peregrine websocket [-c FILE] [--json]

Run "peregrine serve worker.php" to serve a worker script with the defaults, or write a
peregrine.yaml (docs/config.md) and run "peregrine serve".
`

// errUsage marks errors whose message is enough; the exit code is 1 like any other error.
var errUsage = errors.New("usage")

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "peregrine:", err)
		}
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	err := dispatch(args, stdout, stderr)
	var help *helpRequested
	if errors.As(err, &help) { // COMMAND --help: its usage on stdout, exit 0
		help.print(stdout)
		return nil
	}
	return err
}

// helpRequested is returned by a command given -h or --help.
type helpRequested struct {
	usage string
	fs    *flag.FlagSet
}

func (h *helpRequested) Error() string { return "help requested" }

func (h *helpRequested) print(w io.Writer) {
	fmt.Fprintln(w, h.usage)
	if h.fs != nil {
		fmt.Fprintln(w, "\nFlags:")
		h.fs.SetOutput(w)
		h.fs.PrintDefaults()
	}
}

// commandUsage is the line of usage that describes command name.
func commandUsage(name string) string {
	for _, line := range strings.Split(usage, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "peregrine "+name+" ") || strings.TrimSpace(line) == "peregrine "+name {
			return "usage: " + strings.TrimSpace(line)
		}
	}
	return "usage: peregrine " + name
}

func dispatch(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "config":
		if len(args) >= 2 && (args[1] == "-h" || args[1] == "--help" || args[1] == "help") {
			return &helpRequested{usage: commandUsage("config check")}
		}
		if len(args) < 2 || args[1] != "check" {
			return fmt.Errorf("unknown config command; want: peregrine config check [-c FILE] (and serve's arguments)")
		}
		return configCheck(args[2:], stdout)
	case "version", "--version", "-v":
		return version(stdout)
	case "workers":
		return workers(args[1:], stdout)
	case "reset":
		return reset(args[1:], stdout)
	case "tables":
		return tablesCommand(args[1:], stdout)
	case "jobs":
		return jobsCommand(args[1:], stdout)
	case "websocket":
		return websocketCommand(args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	// Said first: after the usage's dozen lines, the reason would scroll by unseen.
	fmt.Fprintf(stderr, "peregrine: unknown command %q; the commands are:\n\n", args[0])
	fmt.Fprint(stderr, usage)
	return errUsage
}

// parseInterleaved parses flags that may stand before or after positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

const serveUsage = "usage: peregrine serve [WORKER.php] [--root DIR | --laravel DIR | --symfony DIR] [-c FILE] [--address HOST:PORT] [--workers N] [--direct]"

func serve(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve")
	serveArgsOf := serveFlags(fs, "serve") // serveargs.go: -c, --address, --workers, --root, --laravel, --symfony, --direct
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the daemon to this file (development)")
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, serveUsage+"\n\nFlags (they may stand before or after WORKER.php and override the config file):")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	}
	if err != nil {
		return fmt.Errorf("serve: %w; %s", err, serveUsage)
	}
	sa, err := serveArgsOf(pos)
	if err != nil {
		return err
	}
	cfgFile := sa.configFile() // the file SIGHUP reads again; none when the config is the defaults
	if sa.file == "" && cfgFile != "" {
		if _, statErr := os.Stat(cfgFile); statErr != nil {
			return errors.New("nothing to serve: no worker script given and no ./peregrine.yaml found.\n" +
				"Start it one of these ways:\n  peregrine serve worker.php          (built-in defaults)\n" +
				"  peregrine serve --root DIR          (classic mode: DIR's PHP scripts, as PHP-FPM runs them)\n" +
				"  peregrine serve -c peregrine.yaml   (or a peregrine.yaml in this directory; see docs/config.md)")
		}
	}
	// At start, and again on SIGHUP, where the flags keep overriding what the file says.
	load := func() (config.Config, error) { return sa.load(cfgFile) }
	cfg, err := load()
	if err != nil {
		return err
	}
	var reload func() (config.Config, error)
	if cfgFile != "" {
		reload = load
	}
	logger, level := newLogger(cfg.Log, stderr)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	// The first SIGINT or SIGTERM stops gracefully; a second SIGINT stops at once (the workers
	// are killed, in-flight requests fail), as an operator pressing ^C twice expects. A second
	// SIGTERM changes nothing: supervisors (systemd, docker stop) send it and wait for the
	// drain, and they have SIGKILL for impatience.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	force := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; !ok {
			return
		}
		stop()
		for sig := range sigs {
			if sig == os.Interrupt {
				logger.Warn("second signal: stopping at once")
				close(force)
				return
			}
		}
	}()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	banner := stderr // a line of text; under JSON a record of the log
	if logFormat(cfg.Log, stderr) == "json" {
		banner = nil
	}
	return daemon.Run(ctx, cfg, daemon.Options{Logger: logger, Banner: banner, Reset: hup, Force: force, Reload: reload, Level: level})
}

// newLogger returns the server's logger and its level, which a reload may change.
func newLogger(c config.Log, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if logFormat(c, w) == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), level
	}
	return slog.New(slog.NewJSONHandler(w, opts)), level
}

// logFormat resolves log.format for w: auto is text on a terminal, JSON otherwise.
func logFormat(c config.Log, w io.Writer) string {
	format := strings.ToLower(c.Format)
	if format == "auto" || format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	return format
}

func loadForCommand(name string, args []string) (config.Config, *flag.FlagSet, error) {
	fs := newFlagSet(name)
	file := fs.String("c", "peregrine.yaml", "config file")
	fs.Bool("json", false, "print JSON")
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return config.Config{}, nil, &helpRequested{usage: commandUsage(name), fs: fs}
	}
	if err != nil {
		return config.Config{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(pos) > 0 {
		return config.Config{}, nil, fmt.Errorf("%s: unexpected argument %q", name, pos[0])
	}
	cfg, err := config.Load(*file)
	return cfg, fs, err
}

// configCheck checks the config serve would run with the same arguments: the file, and the
// worker script, --root, --laravel or --symfony and the other flags over it, and prints it.
func configCheck(args []string, stdout io.Writer) error {
	fs := newFlagSet("config check")
	serveArgsOf := serveFlags(fs, "config check")
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return &helpRequested{usage: commandUsage("config check"), fs: fs}
	}
	if err != nil {
		return fmt.Errorf("config check: %w", err)
	}
	sa, err := serveArgsOf(pos)
	if err != nil {
		return err
	}
	cfg, err := sa.load(sa.configFile())
	if err != nil {
		return err
	}
	if err := checkFiles(cfg); err != nil {
		return err
	}
	_, err = stdout.Write(cfg.EffectiveYAML())
	return err
}

// checkFiles opens what the server will open at start, so that config check fails where
// serve would: the TLS certificate and key, and the document root.
func checkFiles(cfg config.Config) error {
	if t := cfg.HTTP.TLS; t.Cert != "" && t.Key != "" {
		if _, err := tls.LoadX509KeyPair(t.Cert, t.Key); err != nil {
			return fmt.Errorf("http.tls.cert and http.tls.key: %w", err)
		}
	}
	if cfg.HTTP.Root != "" {
		if err := daemon.CheckReadable(cfg.HTTP.Root); err != nil {
			return fmt.Errorf("http.root: %w", err)
		}
	}
	return nil
}

func version(stdout io.Writer) error {
	php := "not found (install it with: apt-get install php8.2-cli php8.2-opcache)"
	if out, err := exec.Command("php", "-r", "echo PHP_VERSION;").Output(); err == nil {
		php = string(out)
	}
	_, err := fmt.Fprintf(stdout, "peregrine %s\ngo %s\nphp %s\nnative runtime %s\n", daemon.Version, strings.TrimPrefix(runtime.Version(), "go"), php, daemon.NativeRuntime())
	return err
}
